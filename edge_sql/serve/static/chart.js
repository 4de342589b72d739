// A bar or line chart in plain SVG, for a result with one label column (the first) and one
// or more numeric columns (all the others). No library: the page must work offline and
// under a CSP that allows only its own files, and these two charts need ~150 lines.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 720;
const HEIGHT = 300;
const PAD = { top: 16, right: 16, bottom: 70, left: 64 };
const MAX_SERIES = 4;  // the page's CSS has four series colours

function svg(tag, attributes = {}, text = null) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, String(value));
  if (text !== null) element.textContent = text;
  return element;
}

/** The numeric columns' indexes when the result can be charted, else null. */
export function chartableSeries(columns, rows) {
  if (columns.length < 2 || rows.length === 0) return null;
  const series = [];
  for (let c = 1; c < columns.length; c++) {
    const values = rows.map((row) => row[c]);
    if (!values.every((v) => v === null || typeof v === "number")) return null;
    if (values.some((v) => typeof v === "number")) series.push(c);
  }
  return series.length ? series.slice(0, MAX_SERIES) : null;
}

function niceStep(span) {
  const raw = span / 5;
  const power = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * power).find((s) => raw <= s);
}

function formatNumber(value) {
  return Math.abs(value) >= 1e6 || (value !== 0 && Math.abs(value) < 1e-3)
    ? value.toExponential(1) : String(Number(value.toPrecision(6)));
}

/** Draw the chart into `box` (replacing what was there); `kind` is "bar" or "line". */
export function drawChart(box, columns, rows, series, kind) {
  const numbers = series.flatMap((c) => rows.map((row) => row[c])).filter((v) => typeof v === "number");
  let low = Math.min(0, ...numbers);
  let high = Math.max(0, ...numbers);
  if (low === high) high = low + 1;
  const step = niceStep(high - low);
  low = Math.floor(low / step) * step;
  high = Math.ceil(high / step) * step;
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const y = (v) => PAD.top + plotH * (1 - (v - low) / (high - low));
  const slot = plotW / rows.length;
  const x = (i) => PAD.left + slot * (i + 0.5);
  const label = `${kind === "bar" ? "Bar" : "Line"} chart of ${series.map((c) => columns[c]).join(", ")} by ${columns[0]}`;
  const root = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT + 18 * (series.length > 1)}`, role: "img", "aria-label": label });
  root.append(svg("title", {}, label));

  for (let v = low; v <= high + step / 2; v += step) {
    root.append(svg("line", { class: "grid", x1: PAD.left, x2: WIDTH - PAD.right, y1: y(v), y2: y(v) }));
    root.append(svg("text", { x: PAD.left - 6, y: y(v) + 4, "text-anchor": "end" }, formatNumber(v)));
  }
  root.append(svg("line", { class: "axis", x1: PAD.left, x2: WIDTH - PAD.right, y1: y(0), y2: y(0) }));
  root.append(svg("line", { class: "axis", x1: PAD.left, x2: PAD.left, y1: PAD.top, y2: PAD.top + plotH }));

  const every = Math.ceil(rows.length / 30);  // at most 30 labels on the axis
  rows.forEach((row, i) => {
    if (i % every) return;
    const text = row[0] === null ? "NULL" : String(row[0]);
    const shown = text.length > 14 ? `${text.slice(0, 13)}…` : text;
    root.append(svg("text", { x: x(i), y: PAD.top + plotH + 12, "text-anchor": "end",
      transform: `rotate(-40 ${x(i)} ${PAD.top + plotH + 12})` }, shown));
  });

  series.forEach((c, s) => {
    const group = svg("g", { class: `series-${s}` });
    if (kind === "bar") {
      const width = Math.max(1, (slot * 0.8) / series.length);
      rows.forEach((row, i) => {
        if (typeof row[c] !== "number") return;
        const top = Math.min(y(row[c]), y(0));
        const bar = svg("rect", { x: x(i) - (slot * 0.4) + s * width, y: top, width,
          height: Math.max(0.5, Math.abs(y(row[c]) - y(0))) });
        bar.append(svg("title", {}, `${row[0]}: ${columns[c]} ${row[c]}`));
        group.append(bar);
      });
    } else {
      const points = rows.flatMap((row, i) => (typeof row[c] === "number" ? [`${x(i)},${y(row[c])}`] : []));
      group.append(svg("polyline", { class: "line", points: points.join(" ") }));
      rows.forEach((row, i) => {
        if (typeof row[c] !== "number") return;
        const dot = svg("circle", { cx: x(i), cy: y(row[c]), r: 2.5 });
        dot.append(svg("title", {}, `${row[0]}: ${columns[c]} ${row[c]}`));
        group.append(dot);
      });
    }
    root.append(group);
    if (series.length > 1) {
      const lx = PAD.left + s * 160;
      root.append(svg("rect", { class: `series-${s}`, x: lx, y: HEIGHT + 4, width: 10, height: 10 }));
      root.append(svg("text", { class: "legend", x: lx + 14, y: HEIGHT + 13 }, columns[c]));
    }
  });
  box.replaceChildren(root);
}
