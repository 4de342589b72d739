// The result table: sortable columns, NULL shown as such, long cells clipped with the full
// value a click away; and the result as CSV or JSON for download.

export const CLIP_CHARS = 80;

function compareValues(a, b) {
  if (a === b) return 0;
  if (a === null) return -1;  // NULL sorts first, as in SQLite's ORDER BY
  if (b === null) return 1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  if (typeof a === "number") return -1;  // numbers before text, as in SQLite
  if (typeof b === "number") return 1;
  return String(a).localeCompare(String(b));
}

function cell(value) {
  const td = document.createElement("td");
  if (value === null) {
    td.className = "null";
    td.textContent = "NULL";
    return td;
  }
  if (typeof value === "number") td.className = "number";
  const text = String(value);
  if (text.length <= CLIP_CHARS) {
    td.textContent = text;
    return td;
  }
  const shown = document.createElement("span");
  shown.textContent = `${text.slice(0, CLIP_CHARS)}…`;
  const more = document.createElement("button");
  more.type = "button";
  more.className = "more";
  more.textContent = `show all ${text.length} characters`;
  more.addEventListener("click", () => {
    const open = more.getAttribute("aria-expanded") === "true";
    shown.textContent = open ? `${text.slice(0, CLIP_CHARS)}…` : text;
    more.textContent = open ? `show all ${text.length} characters` : "show less";
    more.setAttribute("aria-expanded", String(!open));
  });
  more.setAttribute("aria-expanded", "false");
  td.append(shown, more);
  return td;
}

/** Fill `table` with the result; a click on a column's header sorts by it (again: reversed). */
export function renderTable(table, columns, rows) {
  let order = rows.map((_, i) => i);
  let sortColumn = -1;
  let descending = false;
  const head = document.createElement("thead");
  const headRow = head.insertRow();
  const body = document.createElement("tbody");
  columns.forEach((name, index) => {
    const th = document.createElement("th");
    th.scope = "col";
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = name;
    button.title = `Sort by ${name}`;
    button.addEventListener("click", () => {
      descending = sortColumn === index ? !descending : false;
      sortColumn = index;
      order = rows.map((_, i) => i).sort((x, y) =>
        (descending ? -1 : 1) * compareValues(rows[x][index], rows[y][index]) || x - y);
      for (const other of headRow.cells) other.removeAttribute("aria-sort");
      th.setAttribute("aria-sort", descending ? "descending" : "ascending");
      fillBody();
    });
    th.append(button);
    headRow.append(th);
  });
  function fillBody() {
    body.replaceChildren(...order.map((i) => {
      const tr = document.createElement("tr");
      tr.append(...rows[i].map(cell));
      return tr;
    }));
  }
  fillBody();
  table.replaceChildren(head, body);
}

// A text cell a spreadsheet would read as a formula (OWASP, "CSV Injection"): =, +, -, @, tab or
// carriage return first. Numbers are left alone: -3 is a number, not a formula.
const FORMULA_START = /^[=+\-@\t\r]/;

function csvField(value) {
  if (value === null) return "";
  let text = String(value);
  if (typeof value === "string" && FORMULA_START.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** RFC 4180 CSV: a header line, then one line per row, CRLF line ends; NULL is an empty field.
 * A text cell starting with =, +, -, @, a tab or a carriage return gets a leading `'` (OWASP's
 * advice against CSV injection), so a spreadsheet shows it as text instead of running it; the
 * JSON download keeps every value exact. */
export function toCsv(columns, rows) {
  return [columns, ...rows].map((row) => row.map(csvField).join(",")).join("\r\n") + "\r\n";
}

/** Offer `text` as a file named `name` (a Blob URL: nothing goes to the network). */
export function download(name, type, text) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
