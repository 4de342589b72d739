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
