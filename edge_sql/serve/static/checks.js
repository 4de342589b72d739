// The answer's checks on the page: each table, column and literal of the SQL linked to the call
// that showed it to the model, a value its column does not hold marked with the values found
// instead, and one line with the confidence and its reasons. Text nodes only: nothing from the
// server becomes markup.

const LEVELS = { checked: "checked", unchecked: "unchecked", doubtful: "doubtful" };

function unquote(text) {
  const pairs = { '"': '"', "[": "]", "`": "`" };
  const close = pairs[text[0]];
  return close && text.endsWith(close) && text.length > 1 ? text.slice(1, -1) : text;
}

function sightingText(seen) {
  return seen.round === null ? `the ${seen.tool}` : `round ${seen.round}, ${seen.tool}`;
}

/** Name (lower case) -> its NameUse, columns by their short name too (the first one wins). */
function nameIndex(checks) {
  const index = new Map();
  for (const use of checks.names) {
    const key = (use.column ?? use.table).toLowerCase();
    if (!index.has(key)) index.set(key, use);
  }
  return index;
}

function linkName(node, use) {
  const seen = use.seen;
  if (seen === null) return;  // no episode to trace to (SQL run by hand)
  const shown = seen.find((s) => s.round !== null);
  if (!seen.length) {
    node.classList.add("sql-unseen");
    node.title = `${use.kind} ${use.name}: never shown to the model`;
    return;
  }
  const link = document.createElement("a");
  link.className = `${node.className} sql-link`;
  link.textContent = node.textContent;
  link.title = `${use.kind} ${use.name}: shown by ${sightingText(shown || seen[0])}`;
  if (shown) link.href = `#call-${shown.round}-${shown.call}`;
  node.replaceWith(link);
}

function markValue(node, value) {
  if (value.found === false) {
    node.classList.add("sql-missing");
    const closest = value.closest.map((v) => JSON.stringify(v)).join(", ");
    node.title = `not in ${value.table}.${value.column}` + (closest ? `; closest: ${closest}` : "");
    const found = document.createElement("span");
    found.className = "sql-found";
    found.textContent = `[not in ${value.table}.${value.column}${closest ? `; found: ${closest}` : ""}]`;
    node.after(found);
    return;
  }
  const shown = (value.seen || []).find((s) => s.round !== null);
  if (value.found && shown) {
    const link = document.createElement("a");
    link.className = `${node.className} sql-link`;
    link.textContent = node.textContent;
    link.title = `in ${value.table}.${value.column}; shown by ${sightingText(shown)}`;
    link.href = `#call-${shown.round}-${shown.call}`;
    node.replaceWith(link);
  } else if (value.found === null) {
    node.classList.add("sql-unsure");
    node.title = value.note || "not checked";
  }
}

/** Mark the highlighted SQL in `code` with `checks`, and say the confidence in `line`. */
export function showChecks(code, line, checks) {
  line.hidden = !checks;
  if (!checks) return;
  const names = nameIndex(checks);
  for (const node of code.querySelectorAll(".sql-ident, .sql-name")) {
    const use = names.get(unquote(node.textContent).toLowerCase());
    if (use) linkName(node, use);
  }
  const values = new Map(checks.values.map((v) => [v.literal, v]));
  for (const node of code.querySelectorAll(".sql-string, .sql-number")) {
    const value = values.get(node.textContent);
    if (value) markValue(node, value);
  }
  line.className = `checks ${LEVELS[checks.confidence] || ""}`;
  const reasons = checks.confidence === "checked" ? [] : checks.reasons;
  line.textContent = `Checks: ${checks.confidence}` + reasons.map((r) => `; ${r}`).join("");
}
