// SQL shown with its keywords, names, strings, numbers and comments marked (spans with
// classes; text nodes only, so nothing in the SQL can become markup).

const KEYWORDS = new Set((
  "SELECT FROM WHERE AND OR NOT JOIN LEFT RIGHT INNER OUTER CROSS FULL NATURAL ON USING AS " +
  "GROUP BY ORDER HAVING LIMIT OFFSET DISTINCT UNION ALL INTERSECT EXCEPT WITH RECURSIVE " +
  "CASE WHEN THEN ELSE END IN IS NULL LIKE GLOB BETWEEN EXISTS ASC DESC CAST VALUES COLLATE " +
  "ESCAPE OVER PARTITION WINDOW FILTER COUNT SUM AVG MIN MAX TOTAL ROUND LENGTH SUBSTR " +
  "UPPER LOWER COALESCE IFNULL STRFTIME DATE"
).split(" "));

const TOKEN = /(--[^\n]*|\/\*[\s\S]*?(?:\*\/|$))|('(?:[^']|'')*'?)|("(?:[^"]|"")*"?|`[^`]*`?|\[[^\]]*\]?)|(\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b)|([A-Za-z_][A-Za-z0-9_]*)/g;

function span(kind, text) {
  const element = document.createElement("span");
  element.className = `sql-${kind}`;
  element.textContent = text;
  return element;
}

/** A DocumentFragment of `sql` with its tokens marked. */
export function highlightSql(sql) {
  const fragment = document.createDocumentFragment();
  let last = 0;
  for (const match of sql.matchAll(TOKEN)) {
    if (match.index > last) fragment.append(sql.slice(last, match.index));
    const [text, comment, string, quoted, number, word] = match;
    if (comment) fragment.append(span("comment", text));
    else if (string) fragment.append(span("string", text));
    else if (quoted) fragment.append(span("name", text));
    else if (number) fragment.append(span("number", text));
    else if (word && KEYWORDS.has(word.toUpperCase())) fragment.append(span("keyword", text));
    else fragment.append(span("ident", text));
    last = match.index + text.length;
  }
  if (last < sql.length) fragment.append(sql.slice(last));
  return fragment;
}
