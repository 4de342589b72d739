// Calls to the server's API. With a token (`serve --token`), every call carries it as
// `Authorization: Bearer TOKEN`, as for any other client; it is kept for this tab only. Once
// the teach token (`serve --teach-token`) is given, calls carry it instead: the server takes it
// wherever it takes the token, and only it for teaching.

const TOKEN_KEY = "edge-sql-token";
const TEACH_KEY = "edge-sql-teach-token";

/** The server answered 401: no token yet (`refused` false) or a wrong one (`refused` true). */
export class TokenRequired extends Error {
  constructor(refused) {
    super(refused
      ? "The server refused this token (401): check the --token (or EDGE_SQL_TOKEN) it was started with."
      : "This server needs its access token: the --token (or EDGE_SQL_TOKEN) it was started with.");
    this.refused = refused;
  }
}

/** Any other error answer: the server's own one-line message and the HTTP status. */
export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

/** The teach token for this tab (`null`: forget it). */
export function setTeachToken(token) {
  if (token) sessionStorage.setItem(TEACH_KEY, token);
  else sessionStorage.removeItem(TEACH_KEY);
}

export async function apiFetch(path, options = {}) {
  const headers = new Headers(options.headers || {});
  headers.set("X-Edge-Sql-Surface", "page");  // the history says a change came from the page
  const teach = sessionStorage.getItem(TEACH_KEY);
  const token = teach || sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.set("Authorization", `Bearer ${token}`);
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401 && teach) {
    sessionStorage.removeItem(TEACH_KEY);  // a wrong teach token: the access token may still do
    throw new ApiError("The server refused this teach token (401): check the --teach-token it was started with.", 401);
  }
  if (response.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    throw new TokenRequired(Boolean(token));
  }
  if (!response.ok) throw new ApiError(await errorMessage(response), response.status);
  return response;
}

async function errorMessage(response) {
  try {
    const body = await response.json();
    if (body && typeof body.error === "string") return body.error;
  } catch {
    // not JSON: say what came back
  }
  return `the server answered ${response.status} ${response.statusText}`;
}

export async function getJson(path) {
  return (await apiFetch(path)).json();
}

export function postJson(path, body, { accept = "application/json", signal } = {}) {
  return apiFetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: accept },
    body: JSON.stringify(body),
    signal,
  });
}
