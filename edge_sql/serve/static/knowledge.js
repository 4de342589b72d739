// What a person teaches the server from under an answer: "Right" (the answer's SQL stored as
// verified, POST /v1/verify) and "Fix SQL and mark right" (the SQL the person ran instead); the
// answer says what the model was given (notes, verified examples, the previous answer) or that
// it is a verified answer. Text nodes only: nothing from the server becomes markup.

import { postJson } from "./api.js";

export function item(text) {
  const node = document.createElement("li");
  node.textContent = text;
  return node;
}

/** The list under an answer of what it was given (`answer.given` of /v1/ask; none: hidden). */
export function showGiven(box, list, given, stop) {
  const items = [];
  if (given?.verified && stop === "verified") {
    items.push(item(`A verified answer from ${given.verified.verified_at.slice(0, 10)}: its SQL was run afresh, ` +
      "no model asked."));
  }
  for (const note of given?.notes || []) items.push(item(`Note: ${note.text}`));
  for (const example of given?.examples || []) items.push(item(`Verified example: "${example.question}"`));
  if (given?.follow_up) items.push(item(`The previous answer: "${given.follow_up.question}"`));
  if (given?.schema_change) items.push(item(`Note: ${given.schema_change}`));
  if (given?.stale_verified) items.push(item(`Note: ${given.stale_verified}`));
  list.replaceChildren(...items);
  box.hidden = items.length === 0;
}

/** Store `sql` as the confirmed answer to `result`'s question (the answer the button sits
 * under); `replace`: the person confirmed replacing another verified SQL. The server's reply:
 * {verified, action, replaced, message}; an ApiError with status 409 names the stored SQL. */
export async function markRight(result, sql, replace = false) {
  const body = { database: result.database, question: result.question, sql, evidence: result.evidence || null };
  if (result.followUp) body.follows = result.followUp.question;
  if (replace) body.replace = true;
  return (await postJson("/v1/verify", body)).json();
}
