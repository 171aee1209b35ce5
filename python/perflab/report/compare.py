"""`perflab compare A B [...]`: experiments matched run by run.

Runs are matched by the values of the factors the experiments share; per
combination and headline metric the comparison gives A, B, the ratio B/A with
its bootstrap 95% CI, and a test of the difference with its method named
(perflab.analysis.effects says which test when). A difference that is not
significant is shown as "~", never as a bare percentage. The first directory
is the baseline A; each other one is a B.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.analysis.effects import LEGEND, effect
from perflab.analysis.stats import DEFAULT_SEED, Interval
from perflab.errors import UserError
from perflab.model import fmt_factors
from perflab.report import figures
from perflab.report import html as h
from perflab.report.data import ReportData, flatten, load
from perflab.store import Store

# Keys of the experiment file that name or describe it, not what was measured.
IGNORED_SPEC_KEYS = ("experiment.name", "experiment.description")


@dataclass
class Row:
    combination: str
    metric: str
    unit: str
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    ratio: Interval
    method: str
    p_value: float | None
    verdict: str  # "B better", "B worse", "differs", "~", "n=1"


def _load(path: Path) -> ReportData:
    store = Store.open(Path(path))
    try:
        return load(store, seed=DEFAULT_SEED)
    finally:
        store.close()


def spec_differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Dotted keys whose values differ between two experiment files."""
    fa, fb = flatten("", a, {}), flatten("", b, {})
    out = []
    for key in sorted(set(fa) | set(fb)):
        if key in IGNORED_SPEC_KEYS:
            continue
        va, vb = fa.get(key, "(unset)"), fb.get(key, "(unset)")
        if va != vb:
            out.append((key, va, vb))
    return out


def _grouped(data: ReportData, factors: list[str], metric: str) -> dict[str, list[float]]:
    """Metric values of done runs by the values of `factors`."""
    out: dict[str, list[float]] = {}
    for run in data.runs:
        value = data.values.get(run["id"], {}).get(metric)
        if run["status"] != "done" or value is None:
            continue
        key = json.dumps({f: run["factors"].get(f) for f in factors}, default=str)
        out.setdefault(key, []).append(value)
    return out


def _label(key: str) -> str:
    factors = json.loads(key)
    return fmt_factors(factors, ", ") or "all runs"


def compare_data(a: ReportData, b: ReportData) -> tuple[list[Row], list[str], list[str]]:
    """Rows for every matched combination and metric; the factors matched on;
    and notes (unmatched combinations, differing factor sets)."""
    notes = []
    factors_a, factors_b = list(a.factor_values), list(b.factor_values)
    common = [f for f in factors_a if f in factors_b]
    if set(factors_a) != set(factors_b):
        notes.append(f"factors differ (A: {', '.join(factors_a) or 'none'}; B: {', '.join(factors_b) or 'none'}); "
                     f"runs matched on {', '.join(common) or 'nothing: all runs against all runs'}")
    metrics = [m for m in a.headline if m in b.metrics] + [m for m in b.headline if m not in a.headline and m in a.metrics]
    if not metrics:
        raise UserError("the experiments share no headline metric",
                        "compare experiments of the same workload")
    rows = []
    unmatched: set[str] = set()
    for metric in metrics:
        ga, gb = _grouped(a, common, metric), _grouped(b, common, metric)
        unmatched |= set(ga) ^ set(gb)
        info = a.metrics.get(metric) or b.metrics[metric]
        for key in [k for k in ga if k in gb]:
            va, vb = ga[key], gb[key]
            found = effect(va, vb, info.higher_is_better, seed=DEFAULT_SEED)
            verdict = f"B {found.verdict}" if found.verdict in ("better", "worse") else found.verdict
            rows.append(Row(_label(key), metric, info.unit, len(va), len(vb), sum(va) / len(va), sum(vb) / len(vb),
                            found.ratio, found.method, found.p_value, verdict))
    key_order = {label: i for i, label in enumerate(dict.fromkeys(r.combination for r in rows))}
    rows.sort(key=lambda r: (key_order[r.combination], metrics.index(r.metric)))
    if unmatched:
        notes.append(f"{len(unmatched)} combination(s) ran in only one of the two: "
                     + "; ".join(sorted(_label(k) for k in unmatched)[:10]))
    if not rows:
        raise UserError("no factor combination of A matches one of B with finished runs",
                        "compare experiments that share factor values (e.g. the same [factors], one setting changed)")
    return rows, common, notes


def _ratio_text(r: Interval) -> str:
    if not math.isfinite(r.low):
        return f"{r.estimate:.3f}"
    return f"{r.estimate:.3f} [{r.low:.3f}, {r.high:.3f}]"


def _text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) for i in range(len(headers))]
    lines = ["  ".join(hd.ljust(w) for hd, w in zip(headers, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


HEADERS = ["combination", "metric", "A", "B", "B/A [95% CI]", "n A/B", "test", "p", "verdict"]


def _cells(row: Row) -> list[str]:
    return [row.combination, f"{row.metric} ({row.unit})", h.fmt(row.mean_a), h.fmt(row.mean_b),
            _ratio_text(row.ratio), f"{row.n_a}/{row.n_b}", row.method,
            "–" if row.p_value is None else f"{row.p_value:.3g}", row.verdict]


def compare(dirs: list[Path], html: Path | None = None) -> str:
    """The comparison as text (what the CLI prints); with `html`, also as a
    self-contained HTML file (its figures beside it in <stem>-figures/)."""
    if len(dirs) < 2:
        raise UserError("compare needs at least two output directories", "perflab compare DIR_A DIR_B")
    loaded = [(Path(d), _load(Path(d))) for d in dirs]
    dir_a, a = loaded[0]
    out: list[str] = []
    html_parts: list[str] = []
    fig_dir = html.parent / f"{html.stem}-figures" if html else None
    for dir_b, b in loaded[1:]:
        rows, common, notes = compare_data(a, b)
        title = f"A = {dir_a} ({a.experiment['name']})  vs  B = {dir_b} ({b.experiment['name']})"
        diffs = spec_differences(a.spec, b.spec)
        out.append(title)
        if diffs:
            out.append("experiment files differ in: " + "; ".join(f"{k}: {va!r} -> {vb!r}" for k, va, vb in diffs))
        out += [f"note: {n}" for n in notes]
        out.append(_text_table(HEADERS, [_cells(r) for r in rows]))
        out.append(LEGEND)
        out.append("")
        if fig_dir is not None:
            html_parts.append(_html_block(title, diffs, notes, rows, fig_dir, len(html_parts)))
    text = "\n".join(out).rstrip() + "\n"
    if html is not None:
        _write_html(html, html_parts, [str(d) for d, _ in loaded])
    return text


def _html_block(title: str, diffs: list[tuple[str, Any, Any]], notes: list[str], rows: list[Row],
                fig_dir: Path, index: int) -> str:
    parts = [f"<h2>{h.esc(title)}</h2>"]
    if diffs:
        parts.append(h.table(["experiment file key", "A", "B"], [[k, str(va), str(vb)] for k, va, vb in diffs],
                             caption="What differs between the two experiment files"))
    parts += [h.note(n, "warn") for n in notes]
    classes = ["" if r.verdict in ("~", "n=1") else "changed" for r in rows]
    cells = []
    for r in rows:
        c: list[Any] = _cells(r)
        verdict_class = {"B better": "good", "B worse": "bad"}.get(r.verdict, "")
        c[-1] = h.td(r.verdict, verdict_class)
        cells.append(c)
    parts.append(h.table(HEADERS, cells, row_classes=classes))
    fig = figures.ratio_figure([f"{r.combination} · {r.metric}" for r in rows], [r.ratio.estimate for r in rows],
                               [r.ratio.low for r in rows], [r.ratio.high for r in rows], "B / A per combination")
    svg = figures.save(fig, fig_dir, f"compare-{index + 1}")
    parts.append(h.figure(svg, "Ratio B/A with its bootstrap 95% CI; 1.0 is no change.", f"compare-{index + 1}",
                          files_dir=fig_dir.name))
    parts.append(h.note(LEGEND))
    return "".join(parts)


def _write_html(path: Path, parts: list[str], dirs: list[str]) -> None:
    header = "<h1>perflab compare</h1>" + "".join(f'<div class="sub">{"A" if i == 0 else "B"}: {h.esc(d)}</div>'
                                                 for i, d in enumerate(dirs))
    data = {"runs": [], "dirs": dirs}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(h.page("perflab compare", header, [], "".join(parts), data), encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}", "give --html a writable path") from None
