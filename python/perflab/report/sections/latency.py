"""Latency: the percentile spectrum from the stored HDR histograms, and the series the
workload itself recorded over time."""

from __future__ import annotations

import math

from perflab.collectors import COLLECTORS
from perflab.report import durability, figures, latency
from perflab.report import html as h
from perflab.report.data import representative_run
from perflab.report.sections.base import MAX_LINES_PER_FIGURE, ReportContext, SectionHtml, register
from perflab.workloads import WORKLOADS

# Bounds that keep a report of hundreds of runs readable and quick to write.
MAX_SERIES_FIGURES = 6
LATENCY_TABLE_PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99)


@register(rank=70)
class Latency:
    def render(self, ctx: ReportContext) -> list[SectionHtml]:
        spectrum = latency_spectrum(ctx)
        series = driver_series(ctx)
        parts = spectrum + series
        if not parts:
            parts = [h.note("No latency histograms and no driver series were stored by this workload.")]
        # the title says what is in it: the driver's series are throughput (goodput, req/s) as well as latency
        title = "Latency and the driver's series" if series else "Latency"
        return [("latency", title, "".join(parts))]


def latency_spectrum(ctx: ReportContext) -> list[str]:
    d = ctx.data
    by_name: dict[str, dict[int, list[bytes]]] = {}
    units: dict[str, str] = {}
    encodings: dict[str, str] = {}
    for combo in d.combinations:
        for run_id in combo.run_ids:
            for hist in ctx.store.histograms(run_id):
                by_name.setdefault(hist["name"], {}).setdefault(combo.index, []).append(hist["data"])
                units[hist["name"]] = hist["unit"]
                encodings[hist["name"]] = hist["encoding"]
    if not by_name:
        return []
    parts = []
    combos = {c.index: c for c in d.combinations}
    for name, per_combo in sorted(by_name.items()):
        # latency in ms, as every other table and the export say it (histograms hold µs)
        scale, unit = (1e-3, "ms") if units[name] == "us" else (1.0, units[name])
        lines, rows = [], []
        try:
            for index, blobs in sorted(per_combo.items()):
                combo = combos[index]
                values, count = latency.merged_percentiles(blobs, figures.SPECTRUM_PERCENTILES, encodings[name])
                values = [v * scale for v in values]
                lines.append((combo.label(), figures.SPECTRUM_PERCENTILES, values))
                at = dict(zip(figures.SPECTRUM_PERCENTILES, values, strict=True))
                rows.append([index, combo.label(), len(blobs), count,
                             *[at[p] for p in LATENCY_TABLE_PERCENTILES]])
        except latency.HistogramsUnavailable as exc:
            return [h.note(f"Latency percentile spectrum skipped: {exc}", "warn")]
        shown = lines[:MAX_LINES_PER_FIGURE]
        fig = figures.spectrum_figure(shown, unit, f"{name}: percentile spectrum (all repetitions merged)")
        caption = (
            f"{name}: latency at p50..p99.99 per combination, from the HDR histograms of all its "
            "repetitions merged exactly."
        )
        if len(lines) > len(shown):
            caption += f" {len(lines) - len(shown)} more combinations are in the table."
        parts.append(f"<h3>{h.esc(name)}</h3>")
        parts.append(ctx.figure(fig, f"latency-spectrum-{name}", caption))
        headers = ["#", "combination", "runs", "values",
                   *[f"p{p:g} ({unit})" for p in LATENCY_TABLE_PERCENTILES]]
        parts.append(h.table(headers, rows))
    return parts


def driver_series(ctx: ReportContext) -> list[str]:
    """Series the workload itself recorded (any source that is not a
    collector), over time, for one representative run per combination."""
    d = ctx.data
    collector_sources = set(COLLECTORS.names())
    per_name: dict[tuple[str, str], list[tuple[str, list[float], list[float]]]] = {}
    settled: dict[str, float | None] = {}  # line label -> where its run's rate settled (MSER-5)
    for combo in d.combinations[:MAX_LINES_PER_FIGURE]:
        run_id = representative_run(d, combo)
        if run_id is None:
            continue
        settled[f"{combo.label()} (run #{run_id})"] = next(
            (e["t"] for e in ctx.store.events(run_id) if e["kind"] == "steady-state"), None)
        # the measured seconds only: a harness run stores its warm-up's too (the export labels them)
        start = max((e["t"] for e in ctx.store.events(run_id) if e["kind"] == "measure-start"
                     and e["t"] is not None), default=None)
        # a long run's series (a three-day run's 259,200 seconds) as bucket means, not every row
        points = durability.driver_points(ctx.store, run_id, collector_sources, start)
        for key, (t, v) in points.items():
            if any(math.isfinite(x) for x in v):
                per_name.setdefault(key, []).append((f"{combo.label()} (run #{run_id})", t, v))
    parts = []
    # A series that is 0 throughout (failed transactions, say) says so in a line, not a figure.
    flat = sorted(k for k, lines in per_name.items() if all(x == 0 for _, _, v in lines for x in v))
    if flat:
        parts.append(h.note("0 throughout, in every run shown: " + ", ".join(f"{s}.{n}" for s, n in flat)))
    # latency series first: that is what this section is about
    keys = sorted((k for k in per_name if k not in flat), key=lambda k: (0 if "latency" in k[1] else 1, k))
    for source, name in keys[:MAX_SERIES_FIGURES]:
        # the workload's own name for the series (an HTTP run's "tps" is req/s)
        shown = (WORKLOADS.get(source).series_labels if source in WORKLOADS else {}).get(name, name)
        lines = per_name[(source, name)]
        marks = [settled.get(label) for label, _, _ in lines]
        marked = {"marks": marks} if any(m is not None for m in marks) else {}
        fig = figures.series_figure(lines, shown, f"{source}: {shown} over time", **marked)
        caption = (
            f"{source}.{name}" + (f" ({shown})" if shown != name else "") + " over the run, after warm-up, for "
            "the run of each combination nearest its median (the others are in the store: perflab export "
            "--table series). A gap in a line is a second in which nothing completed (a stall): it has no "
            f"latency (a series of more than {durability.DRIVER_POINTS:,} samples is drawn as its mean over "
            f"{durability.DRIVER_BUCKETS:,} equal intervals, a gap an interval with none)."
            + (" Dotted: where the run's rate settled (MSER-5, White 1997; its steady-state event)."
                          if any(m is not None for m in marks) else "")
        )
        parts.append(ctx.figure(fig, f"series-{source}-{name}", caption))
    if len(keys) > MAX_SERIES_FIGURES:
        rest = ", ".join(f"{s}.{n}" for s, n in keys[MAX_SERIES_FIGURES:])
        parts.append(h.note(f"Not drawn (in the store): {rest}"))
    return parts
