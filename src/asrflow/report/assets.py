"""The style sheet and the script of the HTML report (:mod:`asrflow.report.page`), inlined into
the page: no web server, no CDN, no file beside it.

The layout fits a 1366 px wide laptop screen without sideways scrolling: the page is at most
:data:`MAX_WIDTH` wide, cards and figures flow into as many columns as fit, table cells wrap
long words (``overflow-wrap: anywhere``) and images shrink to their column.

The script makes every ``table.sortable`` sortable by clicking (or pressing Enter on) a header:
by a cell's ``data-sort`` value where it has one (numbers as numbers), else by its text; empty
cells last either way; ``aria-sort`` says how a column is sorted.
"""

from __future__ import annotations

MAX_WIDTH = 1340
"""Widest the page's content gets, in CSS pixels."""

CSS = (
    """
:root { --ink: #1f2933; --muted: #5f6b7a; --line: #d9dee5; --soft: #f5f7fa;
        --good: #1d7a3a; --good-bg: #e3f4e1; --bad: #b42318; --bad-bg: #fdecea;
        --warn-bg: #fff6d6; --warn: #8a6100; --accent: #2457a6; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; color: var(--ink); background: #fff;
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: """
    + str(MAX_WIDTH)
    + """px; margin: 0 auto; padding: 12px 20px 40px; }
h1 { font-size: 1.5em; margin: 0.2em 0 0.1em; }
.top { display: flex; flex-wrap: wrap; align-items: baseline; gap: 0 16px; }
h2 { font-size: 1.2em; margin: 1.3em 0 0.5em; padding-bottom: 0.2em;
     border-bottom: 1px solid var(--line); }
h3 { font-size: 1.02em; margin: 1.1em 0 0.4em; }
p, li { overflow-wrap: anywhere; }
code, .hash { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 0.92em; }
.lede { color: var(--muted); margin: 0 0 0.6em; }
nav { display: flex; flex-wrap: wrap; gap: 4px 14px; margin: 0.3em 0 0.8em; font-size: 0.95em; }
nav a { color: var(--accent); text-decoration: none; }
nav a:hover { text-decoration: underline; }
.warning { background: var(--warn-bg); border: 1px solid #e8cf7a; border-radius: 6px;
           padding: 0.45em 0.9em; margin: 0.5em 0; }
.warning ul { margin: 0.3em 0; padding-left: 1.2em; }
.note { color: var(--muted); font-size: 0.9em; }
.cards { margin-top: 0.4em; display: grid; gap: 12px;
         grid-template-columns: repeat(auto-fill, minmax(300px, 1fr)); }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px;
        background: #fff; box-shadow: 0 1px 2px rgba(0, 0, 0, 0.05); min-width: 0; }
.card.baseline { border-top: 4px solid var(--accent); }
.card.failed { border-color: #f0b4ad; background: var(--bad-bg); }
.card header { display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 8px; }
.card h3 { margin: 0; font-size: 1.1em; overflow-wrap: anywhere; }
.card .pick { margin: 0.35em 0 0.3em; overflow-wrap: anywhere; }
.card table { width: 100%; border-collapse: collapse; font-size: 0.92em; margin: 0.2em 0; }
.card th, .card td { text-align: left; padding: 2px 4px; border-bottom: 1px solid var(--soft);
                     vertical-align: top; overflow-wrap: anywhere; }
.card th { color: var(--muted); font-weight: 600; white-space: nowrap; }
.card td.wer, .card td.vs { overflow-wrap: normal; }
.card td.set { overflow-wrap: anywhere; }  /* fsdd_nicolas_devtakes.dev has no other break */
.card .fig { font-weight: 600; font-variant-numeric: tabular-nums; }
.card .ci { color: var(--muted); font-size: 0.88em; font-variant-numeric: tabular-nums; }
.card table.seeds { table-layout: fixed; }
.card table.seeds th { white-space: normal; overflow-wrap: anywhere; }
.card table.seeds th:first-child { width: 3.3em; white-space: nowrap; }
.card table.seeds th:nth-child(2) { width: 46%; }
.card table.seeds td.num { white-space: nowrap; font-variant-numeric: tabular-nums; }
.card table.seeds code { overflow-wrap: break-word; }
.card .line { margin: 0.35em 0 0; overflow-wrap: anywhere; }
.card .gate .note { font-size: 0.86em; }
.card .label { color: var(--muted); }
.card .error { color: var(--bad); font-family: ui-monospace, monospace; font-size: 0.9em;
               white-space: pre-wrap; overflow-wrap: anywhere; }
.badge { display: inline-block; border-radius: 10px; padding: 0 7px; font-size: 0.8em;
         font-weight: 600; background: var(--soft); color: var(--muted);
         border: 1px solid var(--line); white-space: nowrap; }
.badge.good { background: var(--good-bg); color: var(--good); border-color: #b7dfb1; }
.badge.bad { background: var(--bad-bg); color: var(--bad); border-color: #f0b4ad; }
.badge.warn { background: var(--warn-bg); color: var(--warn); border-color: #e8cf7a; }
.badge.base { background: #e6eefa; color: var(--accent); border-color: #b9cdee; }
details { margin: 0.4em 0; }
details > summary { cursor: pointer; color: var(--accent); }
dl.settings { display: grid; grid-template-columns: max-content minmax(0, 1fr);
              gap: 1px 10px; margin: 0.3em 0; font-size: 0.88em; }
dl.settings dt { color: var(--muted); }
dl.settings dd { margin: 0; overflow-wrap: anywhere; }
.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr));
           gap: 14px; align-items: start; }
figure { margin: 0; min-width: 0; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid var(--line);
             border-radius: 4px; }
figure.wide { display: flex; flex-wrap: wrap; gap: 8px 18px; align-items: flex-start; }
figure.wide img { max-width: min(100%, 860px); }
figure.wide figcaption { flex: 1 1 240px; margin-top: 0; }
figcaption { color: var(--muted); font-size: 0.88em; margin-top: 0.3em; }
figcaption b { color: var(--ink); }
table.results { width: 100%; border-collapse: collapse; font-size: 0.9em; margin: 0.3em 0; }
table.results th, table.results td { border-bottom: 1px solid var(--line); padding: 4px 6px;
                                     text-align: left; vertical-align: top;
                                     overflow-wrap: anywhere; }
table.results th { background: var(--soft); position: sticky; top: 0; }
table.results td.num { font-variant-numeric: tabular-nums; }
table.results tr.selected td { background: var(--good-bg); font-weight: 600; }
table.results tr.failed td { background: var(--bad-bg); }
table.results tr.archived td { color: var(--muted); }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th::after { content: " \\2195"; color: #a0a8b3; font-weight: normal; }
table.sortable th[aria-sort="ascending"]::after { content: " \\2191"; color: var(--accent); }
table.sortable th[aria-sort="descending"]::after { content: " \\2193"; color: var(--accent); }
.set-meta { color: var(--muted); font-size: 0.88em; margin: -0.2em 0 0.3em; }
"""
)
"""The page's style sheet."""

SORT_JS = """
(function () {
  function key(row, col) {
    var cell = row.cells[col];
    if (!cell) { return null; }
    var v = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort")
                                            : cell.textContent.trim();
    if (v === "") { return null; }
    var n = Number(v);
    return isNaN(n) ? v.toLowerCase() : n;
  }
  function compare(a, b) {
    if (typeof a === "number" && typeof b === "number") { return a - b; }
    return String(a).localeCompare(String(b), undefined, {numeric: true});
  }
  function sortBy(table, th, col) {
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) { heads[i].removeAttribute("aria-sort"); }
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r, s) {
      var a = key(r, col), b = key(s, col);
      if (a === null || b === null) { return (a === null) - (b === null); }
      return ascending ? compare(a, b) : compare(b, a);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.tabIndex = 0;
      th.title = "sort by " + th.textContent.trim();
      th.addEventListener("click", function () { sortBy(table, th, col); });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(table, th, col); }
      });
    });
  });
})();
"""
"""The page's script: sortable tables (plain JavaScript, no library)."""
