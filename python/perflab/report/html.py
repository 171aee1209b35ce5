"""HTML building blocks for the report: escaping, numbers, tables, the page.

The page is one self-contained file: CSS and a few lines of script inline,
figures inline as SVG, the data embedded as JSON in a <script type=
"application/json"> element. Nothing is fetched from anywhere.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from perflab.analysis.stats import Interval
from perflab.units import format_number


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: object, digits: int = 4) -> str:
    """A number as people read it (units.format_number)."""
    return format_number(value, digits)


def fmt_pct(value: float | None, digits: int = 2, signed: bool = True) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:+.{digits}f}%" if signed else f"{value:.{digits}f}%"


def fmt_interval(ci: Interval) -> str:
    if not math.isfinite(ci.low):
        return "–"
    return f"[{fmt(ci.low)}, {fmt(ci.high)}]"


class Raw(str):
    """A string that is already HTML (not escaped again by `table`)."""


def cell(value: object) -> str:
    if isinstance(value, Raw):
        return value
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return f'<td class="num">{esc(fmt(value))}</td>'
    return f"<td>{esc(value)}</td>"


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    caption: str = "",
    css_class: str = "",
    row_classes: Sequence[str] | None = None,
) -> str:
    """A sortable table; cells that are `Raw` must be whole `<td>` elements."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes and row_classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(cell(c) for c in row) + "</tr>")
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    # wide tables scroll sideways inside the page instead of running off it
    return (
        f'<div class="scroll"><table class="sortable {css_class}">{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def td(text: str, css_class: str = "", title: str = "") -> Raw:
    cls = f' class="{css_class}"' if css_class else ""
    tip = f' title="{esc(title)}"' if title else ""
    return Raw(f"<td{cls}{tip}>{esc(text)}</td>")


def details(summary: str, body_html: str, open_: bool = False) -> str:
    return f"<details{' open' if open_ else ''}><summary>{esc(summary)}</summary>{body_html}</details>"


def pre(text: str) -> str:
    return f"<pre>{esc(text)}</pre>"


def figure(svg: str, caption: str, name: str, files_dir: str = "figures") -> str:
    """`files_dir`: where the figure's files are, relative to the page."""
    return (
        f'<figure id="fig-{esc(name)}">{svg}<figcaption>{esc(caption)} '
        f'<span class="files">{esc(files_dir)}/{esc(name)}.svg · .png</span></figcaption></figure>'
    )


def note(text: str, kind: str = "note") -> str:
    return f'<p class="{kind}">{esc(text)}</p>'


def embed_json(data: object) -> str:
    # "</" would end the <script> element early; "<\/" is the same JSON string.
    text = json.dumps(data, default=str, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/")


CSS = """
:root { --fg:#1d2330; --muted:#5b6477; --line:#d8dde6; --bg:#fff; --soft:#f4f6f9;
        --warn:#8a5300; --warnbg:#fff4df; --bad:#a4161a; --badbg:#fde8e8; --good:#1b6e3a; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
       color: var(--fg); background: var(--bg); margin: 0; }
header { background: #1d2330; color: #fff; padding: 18px 32px 14px; }
header h1 { margin: 0 0 4px; font-size: 24px; font-weight: 600; }
header .sub { color: #c8cfdb; font-size: 14px; }
header .counts span { display: inline-block; margin-right: 14px; }
nav { position: sticky; top: 0; background: var(--soft); border-bottom: 1px solid var(--line);
      padding: 6px 32px; z-index: 2; font-size: 14px; }
nav a { margin-right: 16px; color: #2653a6; text-decoration: none; }
main { padding: 8px 32px 48px; max-width: 1400px; }
h2 { font-size: 20px; margin: 28px 0 8px; padding-top: 8px; border-top: 1px solid var(--line); }
h3 { font-size: 16px; margin: 18px 0 6px; }
p.note { color: var(--muted); margin: 4px 0 10px; }
p.warn { color: var(--warn); background: var(--warnbg); padding: 6px 10px; border-radius: 4px; }
p.bad { color: var(--bad); background: var(--badbg); padding: 6px 10px; border-radius: 4px; }
table { border-collapse: collapse; margin: 6px 0 14px; font-size: 13.5px; }
caption { text-align: left; color: var(--muted); padding: 2px 0 4px; caption-side: top; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; cursor: pointer; white-space: nowrap; user-select: none; }
th.sorted-asc::after { content: " \\25B2"; font-size: 10px; }
th.sorted-desc::after { content: " \\25BC"; font-size: 10px; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.warn { color: var(--warn); background: var(--warnbg); min-width: 14em; }
td.num.warn { min-width: 0; }  /* a flagged number (a CV) stays as narrow as its figure */
.scroll { overflow-x: auto; max-width: 100%; }
td.bad, tr.failed td { color: var(--bad); }
td.good { color: var(--good); }
td.flag { color: var(--warn); font-weight: 600; }
tr.failed { background: var(--badbg); }
figure { margin: 10px 0 22px; display: inline-block; vertical-align: top; max-width: 100%; }
figure svg { max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 13px; max-width: 760px; }
figcaption .files { color: #98a0b0; margin-left: 6px; }
pre { background: var(--soft); padding: 10px; overflow-x: auto; font-size: 12.5px; max-height: 420px; }
details { margin: 6px 0 10px; }
summary { cursor: pointer; color: #2653a6; }
.kv td:first-child { color: var(--muted); white-space: nowrap; }
.tag { display: inline-block; padding: 0 6px; border-radius: 3px; background: var(--warnbg);
       color: var(--warn); font-size: 12px; margin-left: 4px; }
"""

# Click a header to sort its table; numbers sort as numbers ("1,234" too).
SCRIPT = """
(function () {
  function key(td) {
    var t = td ? td.textContent.trim() : "";
    var n = parseFloat(t.replace(/[,%+\\[\\]]/g, ""));
    return isNaN(n) ? t.toLowerCase() : n;
  }
  document.querySelectorAll("table.sortable").forEach(function (tbl) {
    var heads = tbl.querySelectorAll("thead th");
    heads.forEach(function (th, col) {
      th.addEventListener("click", function () {
        var asc = !th.classList.contains("sorted-asc");
        heads.forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
        th.classList.add(asc ? "sorted-asc" : "sorted-desc");
        var body = tbl.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]);
          if (typeof x !== typeof y) { x = String(x); y = String(y); }
          return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  var data = JSON.parse(document.getElementById("perflab-data").textContent);
  document.documentElement.setAttribute("data-runs", String(data.runs.length));
})();
"""


def page(title: str, header_html: str, nav: list[tuple[str, str]], body_html: str, data: object) -> str:
    links = "".join(f'<a href="#{esc(anchor)}">{esc(text)}</a>' for anchor, text in nav)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # Forbid every fetch: the report must stand alone (inline style and script only).
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"<header>{header_html}</header><nav>{links}</nav><main>{body_html}</main>"
        f'<script type="application/json" id="perflab-data">{embed_json(data)}</script>'
        f"<script>{SCRIPT}</script></body></html>\n"
    )
