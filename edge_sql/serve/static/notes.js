// The chosen database's notes for the model (GET/POST /v1/notes, DELETE /v1/notes/ID): listed
// with their tie and a stale flag, added and removed from the panel above the question. Text
// nodes only.

import { TokenRequired, apiFetch, getJson, postJson } from "./api.js";
import { item } from "./knowledge.js";

const $ = (id) => document.getElementById(id);

/** The notes of `database` in `list` (each with its tie, a stale flag and a Remove button that
 * calls `onRemove(note)`); the count in `count`. */
async function showNotes(database, list, count, onRemove) {
  const { notes } = await getJson(`/v1/notes?database=${encodeURIComponent(database)}`);
  list.replaceChildren(...notes.map((note) => {
    const entry = item(note.text);
    entry.dataset.noteId = String(note.id);
    if (note.question) entry.append(` (only with questions about: ${note.question})`);
    if (note.stale) entry.append(` (stale: ${note.stale})`);
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "teaching";  // shown only to whoever may teach (teach.js)
    remove.textContent = "Remove";
    remove.addEventListener("click", () => onRemove(note));
    entry.append(" ", remove);
    return entry;
  }));
  count.textContent = `(${notes.length})`;
}

async function addNote(database, text, words) {
  const body = { database, text };
  if (words) body.question = words;
  return (await (await postJson("/v1/notes", body)).json()).note;
}

async function removeNote(database, note) {
  await apiFetch(`/v1/notes/${note.id}?database=${encodeURIComponent(database)}`, { method: "DELETE" });
}

/** Wire the panel; returns the function that shows the notes of `database()` (call it when the
 * database changes). `failed(error, retry)` handles a token the server asks for. */
export function setUpNotes(database, failed) {
  async function refresh() {
    const name = database();
    try {
      await showNotes(name, $("notes-list"), $("notes-count"), async (note) => {
        let said;
        try {
          await removeNote(name, note);
          said = `Removed: ${note.text}`;
        } catch (error) {
          said = `Not removed: ${error.message}`;
        }
        await refresh();  // the list first, then what happened: no list redrawn after the line
        $("notes-status").textContent = said;
      });
      $("notes-panel").hidden = false;
    } catch (error) {
      if (error instanceof TokenRequired) failed(error, refresh);
      else $("notes-status").textContent = `The notes could not be read: ${error.message}`;
    }
  }

  $("note-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    let said;
    try {
      const note = await addNote(database(), $("note-text").value, $("note-words").value.trim());
      said = `Added: ${note.text}`;
      $("note-text").value = "";
      $("note-words").value = "";
    } catch (error) {
      said = `Not added: ${error.message}`;
    }
    await refresh();
    $("notes-status").textContent = said;
  });
  return refresh;
}
