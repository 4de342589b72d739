// The page: pick a database, ask, watch the rounds stream, keep and re-run the result.

import { ApiError, TokenRequired, getJson, postJson, setToken } from "./api.js";
import { setUpChart, showChart } from "./chart.js";
import { clearHistory, loadHistory, saveEntry } from "./history.js";
import { showChecks } from "./checks.js";
import { markRight, showGiven } from "./knowledge.js";
import { setUpNotes } from "./notes.js";
import { applyTeaching, setUpTeaching } from "./teach.js";
import { addCall, addThink, addTokens, forcedText, renderRounds, roundItem, stopRounds } from "./rounds.js";
import { highlightSql } from "./sqltext.js";
import { readEvents } from "./stream.js";
import { download, renderTable, toCsv } from "./table.js";

const $ = (id) => document.getElementById(id);
const plural = (n, word) => `${n} ${n === 1 ? word : `${word}s`}`;  // 1 round, 2 rounds
const page = {
  databases: [],
  asking: null,        // the AbortController of the running question
  result: null,        // {database, question, sql, columns, rows, truncated, given, followUp} on show
  followUp: null,      // {question, sql}: the answer the next question follows ("Ask a follow-up")
  onToken: null,       // what to retry once a token is given
};

// ---- status and token ---------------------------------------------------------------------

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

function askForToken(error, retry) {
  page.onToken = retry;
  $("token-message").textContent = error.message;
  $("token-panel").hidden = false;
  $("token-input").value = "";
  $("token-input").focus();
}

function failed(error, retry) {
  if (error instanceof TokenRequired) askForToken(error, retry);
  else setStatus(error instanceof ApiError ? `Error: ${error.message}` : `Error: ${error}`, true);
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  setToken($("token-input").value.trim());
  $("token-panel").hidden = true;
  const retry = page.onToken;
  page.onToken = null;
  if (retry) retry();
});

// ---- start: databases, server line, the URL's question -------------------------------------

async function start() {
  try {
    const { databases } = await getJson("/v1/databases");
    page.databases = databases;
    const health = await getJson("/health");
    $("server-line").textContent = `${health.model} (${health.variant}) on ${health.backend}`;
    applyTeaching(health);  // teach.js: the teaching buttons only for whoever may teach
  } catch (error) {
    failed(error, start);
    return;
  }
  const select = $("database");
  select.replaceChildren(...page.databases.map(({ name }) => new Option(name, name)));
  const params = new URLSearchParams(location.search);
  if (params.has("db") && page.databases.some(({ name }) => name === params.get("db"))) select.value = params.get("db");
  $("question").value = params.get("q") || "";
  $("evidence").value = params.get("e") || "";
  showTables();
  updateShareLink();
  $("ask-form").hidden = false;
  setStatus(params.has("q") ? "The question from the link is filled in: press Ask to run it." : "");
  $("question").focus();
  renderHistory();
}

function showTables() {
  const entry = page.databases.find(({ name }) => name === $("database").value);
  $("tables").textContent = entry ? `${plural(entry.tables.length, "table")}: ${entry.tables.join(", ")}` : "";
  $("question").placeholder = exampleQuestion(entry ? entry.tables : []);
  refreshNotes();
}

const refreshNotes = setUpNotes(() => $("database").value, failed);  // notes.js
setUpTeaching(refreshNotes);


// The example in the question box, from the chosen database's own first table ("Album": "How
// many albums are there?"), so it never names a table the database lacks.
function exampleQuestion(tables) {
  if (!tables.length) return "Ask a question about this database";
  const words = tables[0].replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/[_\s]+/g, " ").trim().toLowerCase();
  const many = /s$/.test(words) ? words : /[^aeiou]y$/.test(words) ? `${words.slice(0, -1)}ies` : `${words}s`;
  return `How many ${many} are there?`;
}

function updateShareLink() {
  const params = new URLSearchParams({ db: $("database").value, q: $("question").value });
  if ($("evidence").value) params.set("e", $("evidence").value);
  $("share-link").href = `/?${params}`;
}

$("database").addEventListener("change", () => { showTables(); updateShareLink(); });
$("question").addEventListener("input", updateShareLink);
$("evidence").addEventListener("input", updateShareLink);
$("question").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("ask-form").requestSubmit();
  }
});

// ---- asking -------------------------------------------------------------------------------

$("ask-form").addEventListener("submit", (event) => {
  event.preventDefault();
  if (!page.asking && $("question").value.trim()) ask();
});
$("stop").addEventListener("click", () => page.asking?.abort());

function setAsking(controller) {
  page.asking = controller;
  $("ask").disabled = Boolean(controller);
  $("stop").hidden = !controller;
  if (controller) $("stop").focus();
}

async function ask() {
  const request = { question: $("question").value, database: $("database").value,
    evidence: $("evidence").value.trim() || null };
  if (page.followUp) request.follow_up = page.followUp;
  setFollowUp(null);  // a follow-up of a follow-up carries only the last answer: ask for it again
  const controller = new AbortController();
  setAsking(controller);
  $("rounds").replaceChildren();
  $("forced").hidden = true;
  $("work").hidden = false;
  $("answer").hidden = true;
  setStatus("Sending the question…");
  let ended = false;
  let answered = false;
  try {
    const response = await postJson("/v1/ask", request, { accept: "text/event-stream", signal: controller.signal });
    for await (const { name, data } of readEvents(response)) {
      if (name === "queued") setStatus(`Waiting in the queue: position ${data.position}.`);
      else if (name === "running") setStatus("The agent is working…");
      else if (name === "round") {
        roundItem($("rounds"), data.round);
        setStatus(`The agent is working: round ${data.round}…`);
      } else if (name === "tokens") {
        addTokens($("rounds"), data.round, data);
        setStatus(`The agent is working: round ${data.round}, ${plural(data.tokens, "token")} generated ` +
          `(${data.tok_s.toFixed(1)} tok/s), ${Math.round(data.elapsed_s)} s…`);
      } else if (name === "think") addThink($("rounds"), data.round, data.think);
      else if (name === "call") addCall($("rounds"), data.round, data);
      else if (name === "forced") {
        $("forced").textContent = forcedText(data.round, data.reason);
        $("forced").hidden = false;
      } else if (name === "answer") {
        ended = answered = true;
        showAnswer(request, data);
      } else if (name === "error") {
        ended = true;
        setStatus(`Error: ${data.error}`, true);
      }
    }
    if (!ended) setStatus("Error: the connection ended before the answer came.", true);
  } catch (error) {
    if (error.name === "AbortError") setStatus("Stopped: the server has cancelled this question.");
    else failed(error, ask);
  } finally {
    if (!answered) stopRounds($("rounds"));  // stopped, failed or cut off: no round is still "Thinking…"
    setAsking(null);
  }
}

function showAnswer(request, answer) {
  $("answer-title").textContent = "Answer";
  renderRounds($("rounds"), answer.rounds);
  const note = $("answer-note");
  note.classList.toggle("error", Boolean(answer.error));
  if (answer.stop === "cancelled") note.textContent = "Stopped before the agent answered.";
  else if (answer.error) note.textContent = `Error: ${answer.error}`;
  else if (answer.fallback) note.textContent = "The model's own answer did not run: this is the last query that ran without error.";
  else note.textContent = "";
  const stats = answer.stats || {};
  $("stats").textContent = answer.stop === "verified" ? "No episode: a verified answer, its SQL run afresh." :
    `${plural(stats.rounds ?? 0, "round")}, ${plural(stats.calls ?? 0, "call")}; ` +
    `${(stats.wall_s ?? 0).toFixed(1)} s; ` +
    `${plural(stats.generated_tokens ?? 0, "token")} generated at ${(stats.decode_tok_s ?? 0).toFixed(1)} tok/s`;
  $("work").hidden = answer.stop === "verified";
  const sql = answer.sql ?? answer.answer ?? "";
  const shown = { database: request.database, question: request.question, evidence: request.evidence, sql,
    columns: answer.columns, rows: answer.rows, truncated: answer.truncated, ran: answer.sql !== null,
    checks: answer.checks, given: answer.given, stop: answer.stop, followUp: answer.given?.follow_up || null,
    chart: answer.chart ?? null };
  showResult(shown);
  setStatus(answer.stop === "cancelled" ? "Stopped." : "Answered.");
  saveEntry({ ...shown, stats: $("stats").textContent, note: note.textContent, time: new Date().toISOString() });
  renderHistory();
  $("answer").scrollIntoView({ block: "start" });  // the rounds stay above, the answer comes into view
}

// ---- the result: SQL, table, chart, downloads ---------------------------------------------

function showResult(result) {
  page.result = result;
  $("answer").hidden = false;
  $("sql-code").replaceChildren(highlightSql(result.sql || "(no SQL)"));
  showChecks($("sql-code"), $("checks-line"), result.checks);
  showGiven($("given-box"), $("given-list"), result.given, result.stop);
  $("teach").hidden = result.question == null;  // an asked question's answer (not one's own SQL)
  $("mark-right").hidden = $("follow-up").hidden = !result.ran;  // a failed answer can only be fixed
  $("teach-status").textContent = "";
  $("replace-verified").hidden = true;
  $("sql-box").hidden = false;
  $("sql-form").hidden = true;
  $("query-error").hidden = true;
  $("copy-status").textContent = "";
  $("result").hidden = !result.ran;
  if (!result.ran) return;
  const count = result.rows.length;
  $("row-count").textContent = `${count}${result.truncated ? "+" : ""} row${count === 1 ? "" : "s"}`;
  $("truncated-note").hidden = !result.truncated;
  $("truncated-note").textContent = `The query has more rows: only the first ${count} are shown (the server's --max-rows).`;
  renderTable($("result-table"), result.columns, result.rows);
  showChart(result.chart);
}


function fileStem() {
  return `edge-sql-${page.result.database}`;
}

setUpChart(fileStem);  // chart.js: the switch between chart and table, and saving the chart

$("download-csv").addEventListener("click", () => {
  download(`${fileStem()}.csv`, "text/csv", toCsv(page.result.columns, page.result.rows));
});
$("download-json").addEventListener("click", () => {
  const { database, question, sql, columns, rows, truncated } = page.result;
  download(`${fileStem()}.json`, "application/json",
    `${JSON.stringify({ database, question, sql, columns, rows, truncated }, null, 2)}\n`);
});

$("copy-sql").addEventListener("click", async () => {
  try {
    await navigator.clipboard.writeText(page.result.sql);
    $("copy-status").textContent = "Copied.";
  } catch {
    const range = document.createRange();  // no clipboard access (a plain-http remote page): select it
    range.selectNodeContents($("sql-code"));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    $("copy-status").textContent = "Selected: press Ctrl+C to copy.";
  }
});

// ---- edit and run -------------------------------------------------------------------------

// SQL of one's own, before (or without) asking: the editor over the chosen database, as
// datasette offers it on every database page
$("own-sql").addEventListener("click", () => {
  if (page.asking) return;
  page.result = { database: $("database").value, question: null, evidence: null, sql: "", columns: [], rows: [],
    truncated: false, ran: false };
  $("answer-title").textContent = `Your SQL on ${page.result.database}`;
  $("answer").hidden = false;
  $("answer-note").textContent = "";
  $("stats").textContent = "";
  $("result").hidden = true;
  $("query-error").hidden = true;
  $("sql-box").hidden = true;
  $("given-box").hidden = true;
  $("run-and-mark").hidden = true;
  $("sql-input").value = "";
  $("sql-form").hidden = false;
  $("sql-input").focus();
  setStatus("Write a read-only query and press Run.");
});

function openEditor(fixing) {
  $("sql-input").value = page.result.sql;
  $("run-and-mark").hidden = !fixing;  // "Fix SQL and mark right": the fix is stored once it runs
  $("sql-box").hidden = true;
  $("sql-form").hidden = false;
  $("sql-input").focus();
}

$("edit-sql").addEventListener("click", () => openEditor(false));
$("fix-sql").addEventListener("click", () => openEditor(true));

// ---- teaching: mark an answer right, fix it, follow it up ----------------------------------

// acts on `shown`, the answer the button sits under (taken when it is pressed), never a later one;
// says what it stored; a question verified with other SQL is replaced only after "Replace it"
async function storeRight(sql, shown = page.result, replace = false) {
  $("replace-verified").hidden = true;
  try {
    const reply = await markRight(shown, sql, replace);
    $("teach-status").textContent = `Marked right: ${reply.message}. Asked again, this question is answered at ` +
      "once from this SQL, and similar ones get it as an example.";
    setStatus("Marked right.");
  } catch (error) {
    if (error instanceof TokenRequired) failed(error, () => storeRight(sql, shown, replace));
    else if (error instanceof ApiError && error.status === 409) {
      $("teach-status").textContent = `Not stored yet: ${error.message}`;
      $("replace-verified").hidden = false;
      $("replace-verified").onclick = () => storeRight(sql, shown, true);
      setStatus("This question has another verified answer: press Replace it to replace it.");
    } else {
      $("teach-status").textContent = `Not stored: ${error.message}`;
      setStatus("The answer was not marked right.", true);
    }
  }
}

$("mark-right").addEventListener("click", () => storeRight(page.result.sql));

function setFollowUp(followUp) {
  page.followUp = followUp;
  $("following").hidden = !followUp;
  $("following-text").textContent = followUp ? `Following the answer to "${followUp.question}".` : "";
}

$("follow-up").addEventListener("click", () => {
  setFollowUp({ question: page.result.question, sql: page.result.sql });
  $("question").value = "";
  updateShareLink();
  $("question").focus();
  setStatus("Ask a question that follows this answer (its question and SQL go with it).");
});
$("stop-following").addEventListener("click", () => { setFollowUp(null); $("question").focus(); });
// Cancel goes back to what Edit left: the answer (even one with no SQL, whose note says why)
// or the last run; only one's own SQL that never ran leaves nothing to show. The edited SQL's
// error goes with the edit.
$("cancel-edit").addEventListener("click", () => {
  $("sql-form").hidden = true;
  $("query-error").hidden = true;
  if (page.result?.question != null || page.result?.ran) $("sql-box").hidden = false;
  else $("answer").hidden = true;
});

$("sql-form").addEventListener("submit", (event) => {
  event.preventDefault();
  runEdited(false);
});
$("run-and-mark").addEventListener("click", () => runEdited(true));

/** Run the edited SQL; with `mark`, store it as the question's verified answer once it ran. */
async function runEdited(mark) {
  const sql = $("sql-input").value;
  const under = page.result;  // the answer the editor was opened under: the fix is stored for its question
  const database = under.database;
  $("run-sql").disabled = true;
  $("query-error").hidden = true;
  setStatus("Running the SQL…");
  try {
    const reply = await (await postJson("/v1/query", { database, sql })).json();
    showResult({ ...under, sql, columns: reply.columns, rows: reply.rows, truncated: reply.truncated, ran: true,
      checks: reply.checks, given: null, stop: null, chart: reply.chart ?? null });  // run by hand: nothing was given to a model
    $("answer-note").textContent = "";
    $("stats").textContent = "Run by hand (not by the agent).";
    setStatus("The edited SQL ran.");
    if (mark) await storeRight(sql);
  } catch (error) {
    if (error instanceof TokenRequired) {
      failed(error, () => runEdited(mark));
    } else {
      $("query-error").textContent = `Error: ${error.message}`;
      $("query-error").hidden = false;
      setStatus("The edited SQL did not run.");
    }
  } finally {
    $("run-sql").disabled = false;
  }
}

// ---- history ------------------------------------------------------------------------------

function renderHistory() {
  const entries = loadHistory();
  $("history-list").replaceChildren(...entries.map((entry) => {
    const item = document.createElement("li");
    const open = document.createElement("button");
    open.type = "button";
    open.textContent = entry.question;
    open.addEventListener("click", () => reopen(entry));
    const when = document.createElement("span");
    when.className = "hint";
    when.textContent = `${entry.database}, ${new Date(entry.time).toLocaleString()}`;
    item.append(open, when);
    return item;
  }));
  $("clear-history").hidden = entries.length === 0;
}

function reopen(entry) {
  if (page.asking) return;
  if (page.databases.some(({ name }) => name === entry.database)) $("database").value = entry.database;
  $("question").value = entry.question;
  $("evidence").value = entry.evidence || "";
  showTables();
  updateShareLink();
  $("work").hidden = true;
  $("answer-title").textContent = "Answer";
  showResult(entry);
  $("answer-note").textContent = entry.rowsDropped ? "The rows did not fit in this browser's storage: run the SQL again." : entry.note || "";
  $("stats").textContent = entry.stats || "";
  setStatus(`From the history (${new Date(entry.time).toLocaleString()}).`);
  $("answer").scrollIntoView({ block: "start" });
}

$("clear-history").addEventListener("click", () => { clearHistory(); renderHistory(); });

start();
