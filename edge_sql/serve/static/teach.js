// Who may teach from this page (issue 61). A server started with --teach-token answers
// questions for whoever has the access token, but adds and removes notes and stores verified
// answers only for the teach token: the teaching controls (class "teaching": Right, Fix, the
// note form, Remove) show only once /health says this page may teach, and a small form takes
// the teach token. A server without one: everyone who may ask may teach, as before.

import { ApiError, getJson, setTeachToken } from "./api.js";

const $ = (id) => document.getElementById(id);

/** Show or hide the teaching controls from /health's `teaching` and `teacher`. */
export function applyTeaching(health) {
  const allowed = health.teacher !== false;
  document.body.classList.toggle("no-teaching", !allowed);
  $("teach-login").hidden = allowed || health.teaching !== "teach token";
  return allowed;
}

/** Wire the teach-token form; `refresh()` redraws what depends on it (the notes). */
export function setUpTeaching(refresh) {
  $("teach-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    setTeachToken($("teach-input").value.trim());
    $("teach-input").value = "";
    let said;
    try {
      if (applyTeaching(await getJson("/health"))) {
        said = "Teaching is on: the buttons under an answer and the notes panel can store and remove.";
      } else {
        setTeachToken(null);
        said = "That is not this server's teach token: asking still works, teaching does not.";
      }
    } catch (error) {
      setTeachToken(null);
      said = error instanceof ApiError ? error.message : `The teach token could not be checked: ${error}`;
    }
    $("teach-login-status").textContent = said;
    refresh();
  });
}
