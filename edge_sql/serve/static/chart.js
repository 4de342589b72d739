// The answer's chart: the Vega-Lite spec the server chose by its written rules (edge_sql/charts,
// docs/charts.md; `chart` in the answer, null when none), drawn with Vega, Vega-Lite and
// vega-embed from the package (static/vendor/), loaded on the first chart. The page's CSP allows
// no eval: vega-embed runs Vega's expression interpreter (`ast: true`) instead of compiled code,
// and injects no style element (its own and the tooltip's CSS are in page.css).

const VENDOR = ["vega.min.js", "vega-lite.min.js", "vega-embed.min.js"];
let loading = null;

function loadScript(name) {
  return new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = `/static/vendor/${name}`;
    script.onload = resolve;
    script.onerror = () => reject(new Error(`${name} did not load`));
    document.head.append(script);
  });
}

/** Vega's three bundles, in order (each needs the one before), once per page. */
export function loadVega() {
  loading ??= VENDOR.reduce((done, name) => done.then(() => loadScript(name)), Promise.resolve());
  return loading;
}

/** Draw `spec` into `box`, as wide as the box; returns the Vega view (for saving). */
export async function drawChart(box, spec) {
  await loadVega();
  const shown = { ...spec, width: "container" };  // as wide as the page's box, on a phone too
  const { view } = await window.vegaEmbed(box, shown, {
    ast: true,
    expr: window.vega.expressionInterpreter,
    actions: false,
    defaultStyle: false,
    renderer: "svg",
    tooltip: { disableDefaultStyle: true },
  });
  return view;
}

/** The drawn chart as a PNG or SVG file's URL (the view renders it afresh, off screen). */
export function chartImageUrl(view, format) {
  return view.toImageURL(format, format === "png" ? 2 : 1);
}

/** What the chart says in words, for the line above it: its rule and, when cut, that it was. */
export function chartCaption(spec) {
  const meta = spec.usermeta?.edge_sql || {};
  const rows = `${meta.rows} row${meta.rows === 1 ? "" : "s"}`;
  const rule = `${meta.rule.charAt(0).toUpperCase()}${meta.rule.slice(1)}`;
  return meta.truncated ? `${rule}; the first ${rows} only: the query had more.` : `${rule}; all ${rows}.`;
}

// ---- the answer's chart on the page: drawn, switched with the table, saved ------------------

const $ = (id) => document.getElementById(id);
const shown = {
  spec: null,       // the result's chart (null: none suits the result)
  view: "chart",    // "chart" or "table": what a result with a chart shows (the switch)
  vega: null,       // the drawn chart's Vega view (to save it), null while none is drawn
  drawn: 0,         // counts the charts asked for: a slow draw never replaces a newer one
};

/** Show the result's chart (null: none suits the result) and the switch between it and the
 * table; without a chart, the table alone and no switch. */
export function showChart(spec) {
  shown.spec = spec || null;
  const drawing = ++shown.drawn;
  shown.vega = null;
  $("view-switch").hidden = !shown.spec;
  $("chart").replaceChildren();
  $("chart-status").textContent = "";
  showView();
  if (!shown.spec) return;
  $("chart-caption").textContent = chartCaption(shown.spec);
  drawChart($("chart"), shown.spec).then((view) => {
    if (drawing === shown.drawn) shown.vega = view;
    else view.finalize();
  }).catch((error) => {
    if (drawing === shown.drawn) $("chart-caption").textContent = `The chart could not be drawn: ${error.message}`;
  });
}

function showView() {
  const chart = Boolean(shown.spec) && shown.view === "chart";
  $("chart-box").hidden = !chart;
  $("table-box").hidden = chart;
  $("show-chart").setAttribute("aria-pressed", String(chart));
  $("show-table").setAttribute("aria-pressed", String(!chart));
  if (chart) shown.vega?.resize();  // drawn while hidden: fit the box's width now
}

async function saveChart(format, stem) {
  if (!shown.vega) return;
  try {
    const link = document.createElement("a");
    link.href = await chartImageUrl(shown.vega, format);
    link.download = `${stem}-chart.${format}`;
    document.body.append(link);
    link.click();
    link.remove();
    $("chart-status").textContent = `Saved as ${format.toUpperCase()}.`;
  } catch (error) {
    $("chart-status").textContent = `Not saved: ${error.message}`;
  }
}

/** The switch's and the save buttons' handlers; `fileStem()` names the saved files. */
export function setUpChart(fileStem) {
  $("show-chart").addEventListener("click", () => { shown.view = "chart"; showView(); });
  $("show-table").addEventListener("click", () => { shown.view = "table"; showView(); });
  $("save-png").addEventListener("click", () => saveChart("png", fileStem()));
  $("save-svg").addEventListener("click", () => saveChart("svg", fileStem()));
}
