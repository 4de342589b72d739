// How the agent worked: one item per round, its thinking (collapsed: streamed as the model
// writes it, with a token counter) and its calls, each with its arguments, ok or error, and
// the output the model read.

import { highlightSql } from "./sqltext.js";

const FORCED_REASONS = {
  max_rounds: "it had used all its rounds",
  failed_queries: "too many of its queries failed",
  context: "the context window was full",
};

function element(tag, className, text = null) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== null) node.textContent = text;
  return node;
}

function argsView(args) {
  const view = element("pre", "args");
  const entries = Object.entries(args || {});
  entries.forEach(([name, value], i) => {
    view.append(`${name}: `);
    if (name === "sql" && typeof value === "string") view.append(highlightSql(value));
    else view.append(typeof value === "string" ? value : JSON.stringify(value));
    if (i < entries.length - 1) view.append("\n");
  });
  if (!entries.length) view.textContent = "(no arguments)";
  return view;
}

/** The list item of a round (created when its first event arrives). */
export function roundItem(list, index) {
  let item = list.querySelector(`li[data-round="${index}"]`);
  if (!item) {
    item = element("li", "round");
    item.dataset.round = String(index);
    const head = element("h3", null, `Round ${index}`);
    head.append(element("span", "counter"));
    item.append(head);
    item.append(element("p", "pending", "thinking…"));
    list.append(item);
  }
  return item;
}

function plural(n, word) {
  return `${n} ${n === 1 ? word : `${word}s`}`;
}

/** The model is writing ({round, tokens, tok_s, text, elapsed_s}): the round's counter moves
 * and, until the round's thinking is complete, its text grows in the collapsed block. */
export function addTokens(list, index, data) {
  const item = roundItem(list, index);
  const counter = `${plural(data.tokens, "token")}, ${data.tok_s.toFixed(1)} tok/s, ${Math.round(data.elapsed_s)} s`;
  item.querySelector(".counter").textContent = ` · ${counter}`;
  let details = item.querySelector("details.thinking");
  if (!details) {
    item.querySelector(".pending")?.remove();
    details = element("details", "thinking");
    details.dataset.live = "true";
    details.append(element("summary", null, "Thinking…"), element("div", "think", ""));
    item.querySelector("h3").after(details);
  }
  if (details.dataset.live === "true") {
    details.querySelector("summary").textContent = `Thinking… (${counter})`;
    if (data.text) details.querySelector(".think").append(data.text);
  }
}

/** Append one call (as streamed: {tool, args, ok, output}) to its round. */
export function addCall(list, index, call) {
  const item = roundItem(list, index);
  item.querySelector(".pending")?.remove();
  const box = element("div", `call ${call.ok ? "ok" : "error"}`);
  box.id = `call-${index}-${item.querySelectorAll(".call").length}`;  // what the answer's checks link to
  const head = element("div", "call-head");
  head.append(element("span", "tool", call.tool), element("span", `badge ${call.ok ? "ok" : "error"}`, call.ok ? "ok" : "error"));
  box.append(head, argsView(call.args), element("pre", "output", call.output));
  item.append(box);
}

/** Add a round's thinking (collapsed) once it is complete, before its calls; it replaces the
 * text streamed so far (the block stays where it is, open or not). */
export function addThink(list, index, think) {
  const item = roundItem(list, index);
  item.querySelector(".pending")?.remove();
  let details = item.querySelector("details.thinking");
  if (!details) {
    details = element("details", "thinking");
    details.append(element("summary"), element("div", "think"));
    item.append(details);
  }
  delete details.dataset.live;
  details.querySelector("summary").textContent = think ? "Thinking" : "Thinking (none)";
  details.querySelector(".think").textContent = think || "";
}

/** A question that ended without an answer (Stop, an error, a broken stream): the round that
 * was writing says it stopped, instead of "Thinking…" for ever. */
export function stopRounds(list) {
  for (const details of list.querySelectorAll("details.thinking[data-live]")) {
    delete details.dataset.live;
    details.querySelector("summary").textContent = "Thinking (stopped)";
  }
  for (const pending of list.querySelectorAll(".pending")) pending.textContent = "stopped";
}

/** The rounds of a finished episode, with their thinking, replacing what was streamed. */
export function renderRounds(list, rounds) {
  list.replaceChildren();
  for (const round of rounds) {
    addThink(list, round.index, round.think);
    for (const call of round.calls) addCall(list, round.index, call);
  }
}

export function forcedText(round, reason) {
  return `The final answer was forced after round ${round}: ${FORCED_REASONS[reason] || reason}.`;
}
