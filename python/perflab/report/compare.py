"""`perflab compare A B [...]`: experiments matched run by run.

Runs are matched on every factor value the two experiments share. Runs whose
other factors differ are never pooled: where one experiment holds several
combinations at a matched value (a factor only it varies), the one whose
value the other experiment's file sets is taken, else the value is listed as
not matched. Per matched combination and headline metric the comparison
gives A, B, the ratio B/A with its 95% interval and a test named by
perflab.analysis.effects (Benjamini-Hochberg over the rows; where either
experiment names its question in [experiment] primary, over those metrics'
rows as one family and the others' as another, as the report does).

Two experiments are two moments of the host. compare says whether they ran
interleaved (their run time ranges overlap), shows each side's own noise (the
spread of its repetitions, its noise floor, and the runs its host-noise flags
mark), and gives a verdict only when the difference is significant and beyond
both experiments' noise floors, and, for experiments run one after the other,
when neither side's host was flagged noisy. Otherwise it answers
"inconclusive" and says how to ask the question properly: as a factor of one
experiment in random order.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from perflab.analysis import effects
from perflab.analysis.effects import LEGEND, effect, settle_families
from perflab.analysis.stats import DEFAULT_SEED, WIDE_FACTOR, Interval, NoiseFloor
from perflab.errors import UserError
from perflab.model import Flag, fmt_factors, without_label
from perflab.report import figures
from perflab.report import html as h
from perflab.report.data import ReportData, flatten, load
from perflab.store import Store

# Keys of the experiment file that name or describe it, not what was measured.
IGNORED_SPEC_KEYS = ("experiment.name", "experiment.description")
# The flags that say a run's host was busy with something else (set by the
# host-noise measurement; an older store's runs simply carry none).
HOST_NOISE_FLAGS = (str(Flag.NOISY_HOST), str(Flag.CPU_SATURATED))
HOST_NOISE_METRIC = "host.noise_cores"
INCONCLUSIVE = "inconclusive"


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
    verdict: str  # "B better", "B worse", "B differs", "inconclusive", "too few runs", "undefined"
    q_value: float | None = None
    floor: float | None = None  # the larger noise floor of the two sides, as a ratio
    why: str = ""
    family: str = "all"  # the false discovery rate family: "primary", "secondary", or "all" (none named)


@dataclass
class Side:
    """What one experiment says about its own noise."""

    runs: int
    first: datetime | None
    last: datetime | None
    floors: dict[str, NoiseFloor | None] = field(default_factory=dict)
    flagged: dict[str, int] = field(default_factory=dict)
    noise_cores: float | None = None  # median over runs that measured it

    def span(self) -> str:
        if self.first is None or self.last is None:
            return "no run times"
        return f"{self.first.isoformat(timespec='seconds')} to {self.last.isoformat(timespec='seconds')}"


def _load(path: Path) -> ReportData:
    store = Store.open(Path(path), write=False)  # compare reads: a read-only store too
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


def _time(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


def side(data: ReportData, metrics: list[str]) -> Side:
    """An experiment's run time range, noise floors and host-noise flags,
    read defensively: a store older than the host-noise measurement has none."""
    done = [r for r in data.runs if r["status"] == "done"]
    starts = [t for r in done if (t := _time(r.get("started_at"))) is not None]
    ends = [t for r in done if (t := _time(r.get("ended_at"))) is not None]
    flagged = {f: sum(1 for r in done if f in (r.get("flags") or [])) for f in HOST_NOISE_FLAGS}
    cores = [v[HOST_NOISE_METRIC] for r in done if HOST_NOISE_METRIC in (v := data.values.get(r["id"], {}))]
    return Side(
        runs=len(done),
        first=min(starts) if starts else None,
        last=max(ends or starts) if (ends or starts) else None,
        floors={m: data.noise_floor(m) for m in metrics if m in data.metrics},
        flagged=flagged,
        noise_cores=statistics.median(cores) if cores else None,
    )


def interleaved(a: Side, b: Side) -> bool | None:
    """Whether the two experiments' run time ranges overlap (None: unknown)."""
    if None in (a.first, a.last, b.first, b.last):
        return None
    return a.first <= b.last and b.first <= a.last  # type: ignore[operator]


def _combinations(data: ReportData, common: list[str], fixed: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The experiment's combinations (with done runs) by the values of the
    shared factors; a combination whose own factor contradicts what the other
    experiment's file fixes (`fixed`) is left out."""
    out: dict[str, list[dict[str, Any]]] = {}
    for combo in data.combinations:
        if not combo.run_ids:
            continue
        if any(f in fixed and json.dumps(without_label(combo.factors.get(f)), default=str)
               != json.dumps(without_label(fixed[f]), default=str)
               for f in combo.factors if f not in common):
            continue
        # matched on what the levels set, not on their labels (derived from each file's own levels)
        key = json.dumps({f: without_label(combo.factors.get(f)) for f in common}, default=str)
        out.setdefault(key, []).append(combo.factors)
    return out


def _labels(*combos: dict[str, list[dict[str, Any]]], common: list[str]) -> dict[str, str]:
    """Each matching key as its first experiment's levels read (their labels)."""
    out: dict[str, str] = {}
    for by_key in combos:
        for key, factors in by_key.items():
            out.setdefault(key, fmt_factors({f: factors[0].get(f) for f in common}, ", ") or "all runs")
    return out


def _fixed_by_file(data: ReportData, factors: list[str]) -> dict[str, Any]:
    """The value the experiment's file sets for each of `factors` (the other
    experiment's, which this one does not vary), where its file sets one."""
    flat = flatten("", data.spec, {})
    return {f: flat[f] for f in factors if f in flat}


def _values(data: ReportData, factors: dict[str, Any], metric: str) -> list[float]:
    key = json.dumps(factors, sort_keys=True, default=str)
    return [data.values[r][metric] for c in data.combinations if c.key == key
            for r in c.run_ids if metric in data.values.get(r, {})]


def _larger_floor(*floors: NoiseFloor | None) -> NoiseFloor | None:
    known = [f for f in floors if f is not None]
    return max(known, key=lambda f: f.factor) if known else None


def compare_data(a: ReportData, b: ReportData) -> tuple[list[Row], list[str], list[str]]:
    """Rows for every matched combination and metric; the factors matched on;
    and notes (what could not be matched, differing factor sets, how the two
    ran, each side's noise)."""
    notes = []
    factors_a, factors_b = list(a.factor_values), list(b.factor_values)
    common = [f for f in factors_a if f in factors_b]
    only_a = [f for f in factors_a if f not in common]
    only_b = [f for f in factors_b if f not in common]
    if only_a or only_b:
        notes.append(f"factors differ (A: {', '.join(factors_a) or 'none'}; B: {', '.join(factors_b) or 'none'}); "
                     f"runs matched on {', '.join(common) or 'nothing (one combination a side)'}; runs that differ "
                     "in the other factors are never pooled")
    metrics = [m for m in a.headline if m in b.metrics] + [m for m in b.headline if m not in a.headline and m in a.metrics]
    if not metrics:
        raise UserError("the experiments share no headline metric",
                        "compare experiments of the same workload")
    combos_a = _combinations(a, common, _fixed_by_file(b, only_a))
    combos_b = _combinations(b, common, _fixed_by_file(a, only_b))
    labels = _labels(combos_a, combos_b, common=common)
    unmatched: list[str] = []
    for key in sorted(set(combos_a) ^ set(combos_b)):
        unmatched.append(f"{labels[key]} (only in {'A' if key in combos_a else 'B'})")
    pairs = []
    for key in [k for k in combos_a if k in combos_b]:
        ca, cb = combos_a[key], combos_b[key]
        if len(ca) > 1 or len(cb) > 1:
            many = [("A", ca, only_a), ("B", cb, only_b)]
            why = "; ".join(f"{name} holds {len(cs)} combinations differing in {', '.join(own) or 'nothing'}"
                            for name, cs, own in many if len(cs) > 1)
            unmatched.append(f"{labels[key]} ({why}: not pooled)")
            continue
        pairs.append((key, ca[0], cb[0]))
    side_a, side_b = side(a, metrics), side(b, metrics)
    together = interleaved(side_a, side_b)
    noisy = any(side_a.flagged.values()) or any(side_b.flagged.values())
    found, meta = [], []
    for key, fa, fb in pairs:
        for metric in metrics:
            info = a.metrics.get(metric) or b.metrics[metric]
            va, vb = _values(a, fa, metric), _values(b, fb, metric)
            if not va or not vb:
                continue
            found.append(effect(va, vb, info.higher_is_better, seed=DEFAULT_SEED))
            floor = _larger_floor(side_a.floors.get(metric), side_b.floors.get(metric))
            meta.append((key, metric, info.unit, va, vb, floor))
    # the question either experiment names: its own false discovery rate family (as in the report)
    primary = [m for m in dict.fromkeys(a.primary + b.primary) if m in metrics]
    families = [effects.family(m[1], primary) for m in meta]
    settled = settle_families(found, [m[5] for m in meta], families)
    rows = []
    for e, (key, metric, unit, va, vb, floor), fam in zip(settled, meta, families, strict=True):
        verdict, why = e.verdict, ""
        if verdict in ("better", "worse", "differs"):
            if floor is None:
                verdict, why = INCONCLUSIVE, "neither experiment measured its noise (no repeated set-up)"
            elif together is not True and noisy:
                verdict, why = INCONCLUSIVE, "ran one after the other on a host flagged noisy"
            else:
                verdict = f"B {verdict}"
        elif verdict == effects.WITHIN_NOISE:
            verdict, why = INCONCLUSIVE, "within the noise floor"
        elif verdict == effects.NO_DIFFERENCE:
            verdict, why = INCONCLUSIVE, f"not significant: q >= {effects.SIGNIFICANCE}"
            if e.power_note():  # what "no change" means: the change it could have seen
                why += f"; {e.power_note()}"
        rows.append(Row(labels[key], metric, unit, len(va), len(vb), sum(va) / len(va), sum(vb) / len(vb),
                        e.ratio, e.method, e.p_value, verdict, e.q_value, floor.factor if floor else None, why,
                        fam))
    key_order = {label: i for i, label in enumerate(dict.fromkeys(r.combination for r in rows))}
    rows.sort(key=lambda r: (key_order[r.combination], metrics.index(r.metric)))
    if unmatched:
        notes.append(f"{len(unmatched)} combination(s) not matched: " + "; ".join(unmatched[:10])
                     + ("; ..." if len(unmatched) > 10 else ""))
    if not rows:
        raise UserError("no factor combination of A matches one of B with finished runs"
                        + (f" (not matched: {'; '.join(unmatched[:10])})" if unmatched else ""),
                        "compare experiments that share factor values (e.g. the same [factors], one setting changed)")
    if together is False:
        notes.append(f"A and B did not run interleaved (A: {side_a.span()}; B: {side_b.span()}): a difference "
                     "between them is also a difference between two moments of the host")
    elif together is None:
        notes.append("the run times of A or B are unknown: whether they ran interleaved cannot be told")
    for name, sd in (("A", side_a), ("B", side_b)):
        notes.append(f"{name}'s noise: " + _noise_text(sd, metrics))
    if primary:
        notes.append(_families_text(a, b, primary, rows))
    if any(r.verdict == INCONCLUSIVE for r in rows):
        notes.append(ADVICE)
    return rows, common, notes


def _families_text(a: ReportData, b: ReportData, primary: list[str], rows: list[Row]) -> str:
    """What the p-values were adjusted over, where an experiment names its question."""
    named = "; ".join(f"{side}'s [experiment] primary = {', '.join(d.primary)}"
                      for side, d in (("A", a), ("B", b)) if d.primary)
    tested = [r for r in rows if r.q_value is not None]
    first = sum(1 for r in tested if r.family == "primary")
    return (f"{named}: the false discovery rate (Benjamini & Hochberg 1995) is controlled over the {first} tested "
            f"comparison(s) of {', '.join(primary)} as one family and over the {len(tested) - first} of the other "
            "metrics, secondary, as another (q says which)")


ADVICE = ('inconclusive: the difference is not beyond both experiments\' own noise. To answer the question, run '
          'it as one experiment with the setting as a factor and order = "random" in [experiment], so that its '
          'levels share the host\'s conditions run by run.')


def _noise_text(sd: Side, metrics: list[str]) -> str:
    parts = [f"{sd.runs} runs, {sd.span()}"]
    for m in metrics:
        floor = sd.floors.get(m)
        parts.append(f"{m} repetitions spread {floor.sd_log * 100:.2f}% (SD of ln; noise floor "
                     f"x{1 / floor.factor:.3f}-x{floor.factor:.3f}, df {floor.df})"
                     if floor else f"{m}: no repeated set-up, noise not measured")
    if sd.noise_cores is None and not any(sd.flagged.values()):
        parts.append("host noise not measured (its runs predate the measurement)")
    elif HOST_NOISE_FLAGS:
        flagged = ", ".join(f"{n} {f}" for f, n in sd.flagged.items())
        parts.append(f"host: {flagged} of {sd.runs} runs"
                     + (f", median {HOST_NOISE_METRIC} {sd.noise_cores:.3f}" if sd.noise_cores is not None else ""))
    return "; ".join(parts)


def _ratio_text(r: Interval) -> str:
    if not math.isfinite(r.estimate):
        return "undefined"
    if not math.isfinite(r.low):
        return f"{r.estimate:.3f}"
    if r.too_wide:
        return f"{r.estimate:.3f} (CI over x{WIDE_FACTOR:g}: too few runs)"
    return f"{r.estimate:.3f} [{r.low:.3f}, {r.high:.3f}]"


def _text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) for i in range(len(headers))]
    lines = ["  ".join(hd.ljust(w) for hd, w in zip(headers, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


HEADERS = ["combination", "metric", "A", "B", "B/A [95% CI]", "n A/B", "test", "p", "q (BH)", "noise floor",
           "verdict"]


def _cells(row: Row) -> list[str]:
    verdict = f"{row.verdict} ({row.why})" if row.why else row.verdict
    return [row.combination, f"{row.metric} ({row.unit})", h.fmt(row.mean_a), h.fmt(row.mean_b),
            _ratio_text(row.ratio), f"{row.n_a}/{row.n_b}", row.method,
            "–" if row.p_value is None else f"{row.p_value:.3g}",
            "–" if row.q_value is None else f"{row.q_value:.3g}" + ("" if row.family == "all" else f" ({row.family})"),
            "–" if row.floor is None else f"x{1 / row.floor:.3f}-x{row.floor:.3f}", verdict]


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
    classes = ["changed" if r.verdict.startswith("B ") else "" for r in rows]
    cells = []
    for r in rows:
        c: list[Any] = _cells(r)
        verdict_class = {"B better": "good", "B worse": "bad"}.get(r.verdict, "")
        c[-1] = h.td(c[-1], verdict_class)
        cells.append(c)
    parts.append(h.table(HEADERS, cells, row_classes=classes))
    fig = figures.ratio_figure([f"{r.combination} · {r.metric}" for r in rows], [r.ratio.estimate for r in rows],
                               [r.ratio.low if r.ratio.shown else math.nan for r in rows],
                               [r.ratio.high if r.ratio.shown else math.nan for r in rows], "B / A per combination")
    svg = figures.save(fig, fig_dir, f"compare-{index + 1}")
    parts.append(h.figure(svg, "Ratio B/A with its 95% interval (where one is computed); 1.0 is no change.",
                          f"compare-{index + 1}", files_dir=fig_dir.name))
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
