"""The durability study's reading of long series (OSDL's DBT-3 durability
runs): SQLite aggregates each run's series into min/max/mean buckets (the
envelopes serve.views.decimate draws) and whole hours on its index, so a
three-day run of 1-s samples draws as quickly as a short one and a one-second
spike stays visible. OSDL's memory, I/O and CPU panels (free, buff, cache;
bi, bo; us, sy, id, wa: the vmstat collector's series) on one time axis, runs
back to back, and a run's driver series drawn from bucket means. The
section that opens a durability study's report with them is
report.sections.durability."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from perflab.report import figures

if TYPE_CHECKING:
    from matplotlib.figure import Figure as MplFigure

    from perflab.store import Store

# OSDL's durability graphs: (panel title, unit, scale, [(vmstat series, label, colour)]).
OSDL_PANELS: tuple[tuple[str, str, float, tuple[tuple[str, str, str], ...]], ...] = (
    ("memory", "GiB", 1 / 2**20, (("free_kib", "free", "#3b6fb6"), ("buff_kib", "buff", "#e67e22"),
                                  ("cache_kib", "cache", "#27ae60"))),
    ("I/O", "KiB/s", 1.0, (("bi_kib_per_s", "bi (in)", "#3b6fb6"), ("bo_kib_per_s", "bo (out)", "#c0392b"))),
    ("CPU", "%", 1.0, (("us_pct", "us", "#2e8b57"), ("sy_pct", "sy", "#c0392b"), ("id_pct", "id", "#7f8c8d"),
                       ("wa_pct", "wa", "#f39c12"))),
)
OS_SOURCE = "vmstat"
# Buckets (min/max/mean) per run and line: the study's 5 runs make 2,000 per line.
BUCKETS_PER_RUN = 400
# A run this long or longer gets its per-hour windows and trend (within_run).
WITHIN_RUN_MIN_S = 2 * 3600.0


def bucket_stats(store: Store, run_id: int, source: str, name: str,
                 n_buckets: int | None = None, width_s: float | None = None, t_from: float | None = None) -> np.ndarray:
    """A run's series in buckets of time, aggregated by SQLite on the series
    index (one range per bucket: no row crosses into Python, none is sorted):
    rows of (first t, min, max, sum, count of values, count of samples).
    Either `n_buckets` equal buckets from the first sample to the last (the
    last one holds the last sample: serve.views.decimate's buckets), or
    buckets `width_s` wide from the first sample, only the whole ones (the
    windows of analysis.degradation.within_run). Empty buckets are left out;
    samples before `t_from` (a warm-up) count in none."""
    key: tuple[Any, ...] = (run_id, source, name)
    where = "FROM series WHERE run_id=? AND source=? AND name=?"
    # t_from bounds the first sample only: every bucket starts after it, and a second lower
    # bound on t in a bucket's query makes SQLite seek to t_from and scan from there
    since, since_key = (where + " AND t>=?", (*key, t_from)) if t_from is not None else (where, key)
    first = store.conn.execute(f"SELECT t {since} ORDER BY t LIMIT 1", since_key).fetchone()
    if first is None:
        return np.empty((0, 6))
    t0 = float(first[0])
    t1 = float(store.conn.execute(f"SELECT t {where} ORDER BY t DESC LIMIT 1", key).fetchone()[0])
    if width_s is not None:
        n = store.conn.execute(f"SELECT count(*) {since}", since_key).fetchone()[0]
        step = (t1 - t0) / (n - 1) if n > 1 else 0.0  # the sampling interval
        edges = [t0 + k * width_s for k in range(int((t1 - t0 + step) // width_s) + 1)]
        closed = False
    else:
        assert n_buckets is not None
        span = t1 - t0
        edges = [t0 + span * k / n_buckets for k in range(n_buckets)] + [t1]
        closed = True
    out = []
    for k in range(len(edges) - 1):
        last = closed and k == len(edges) - 2
        row = store.conn.execute(
            f"SELECT min(t), min(value), max(value), total(value), count(value), count(*) {where} "
            f"AND t>=? AND t{'<=' if last else '<'}?", (*key, edges[k], edges[k + 1])).fetchone()
        if row[5]:
            out.append([float("nan") if v is None else float(v) for v in row])
    return np.asarray(out, dtype=float).reshape(-1, 6)


def envelope(store: Store, run_id: int, source: str, name: str, n_buckets: int,
             t_from: float | None = None) -> np.ndarray:
    """(t, min, max, mean) per bucket, as serve.views.decimate gives them
    from the whole series, read as SQLite aggregates."""
    b = bucket_stats(store, run_id, source, name, n_buckets=n_buckets, t_from=t_from)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(b[:, 4] > 0, b[:, 3] / np.maximum(b[:, 4], 1), np.nan)
    return np.column_stack([b[:, 0], b[:, 1], b[:, 2], mean])


def osdl_figure(store: Store, run_ids: list[int]) -> MplFigure | None:
    """Three panels (memory, I/O, CPU) with every run's vmstat series on one
    time axis in hours, each run starting where the one before it ended."""
    # not at import: serve.views imports the report's data
    from perflab.serve.views import series_names

    present = {name for run_id in run_ids for source, name in series_names(store.conn, run_id)
               if source == OS_SOURCE}
    panels = [p for p in OSDL_PANELS if any(s in present for s, _, _ in p[3])]
    if not panels:
        return None
    fig = figures.new_figure(height_in=1.0 + 2.0 * len(panels))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    offset = 0.0
    bounds: list[tuple[float, int]] = []
    for run_id in run_ids:
        span = 0.0
        for ax, (_, _, scale, parts) in zip(axes, panels, strict=True):
            for series, label, colour in parts:
                if series not in present:
                    continue
                b = envelope(store, run_id, OS_SOURCE, series, BUCKETS_PER_RUN)
                if not len(b):
                    continue
                span = max(span, float(b[-1, 0]))
                x = (offset + b[:, 0]) / 3600.0
                ax.fill_between(x, b[:, 1] * scale, b[:, 2] * scale, color=colour, alpha=0.25, linewidth=0)
                ax.plot(x, b[:, 3] * scale, color=colour, linewidth=0.9, label=label if not bounds else None)
        bounds.append((offset, run_id))
        offset += span
    for ax, (title, unit, _, _) in zip(axes, panels, strict=True):
        figures._style(ax)
        ax.set_ylabel(f"{title} ({unit})", fontsize=8)
        for start, _ in bounds:
            if start > 0:
                ax.axvline(start / 3600.0, color="#555", linestyle=":", linewidth=0.8)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    top = axes[0]
    for start, run_id in bounds:
        top.annotate(f"#{run_id}", (start / 3600.0, 1.0), xycoords=("data", "axes fraction"),
                     fontsize=7, va="bottom", color="#555")
    axes[-1].set_xlabel("hours since the first run's start (runs back to back)")
    return fig


# A driver series longer than this is drawn from bucket means (DRIVER_BUCKETS of them).
DRIVER_POINTS = 5000
DRIVER_BUCKETS = 2000


def driver_points(store: Store, run_id: int, collector_sources: set[str],
                  start: float | None) -> dict[tuple[str, str], tuple[list[float], list[float]]]:
    """A run's driver series (any source that is not a collector) from
    `start` (the measured window), as (t, values): every sample of a series
    of up to DRIVER_POINTS, a missing value (a second with no completions,
    no latency) as NaN so the line breaks there; a longer one as its mean
    per bucket, a bucket with no value a NaN."""
    from perflab.serve.views import series_names

    t_from = None if start is None else start - 1e-6
    out: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for source, name in series_names(store.conn, run_id):
        if source in collector_sources:
            continue
        key: tuple[Any, ...] = (run_id, source, name) + (() if t_from is None else (t_from,))
        where = "FROM series WHERE run_id=? AND source=? AND name=?" + ("" if t_from is None else " AND t>=?")
        if store.conn.execute(f"SELECT count(*) {where}", key).fetchone()[0] > DRIVER_POINTS:
            e = envelope(store, run_id, source, name, DRIVER_BUCKETS, t_from=t_from)
            out[(source, name)] = (e[:, 0].tolist(), e[:, 3].tolist())
            continue
        rows = store.conn.execute(f"SELECT t, value {where} ORDER BY t", key).fetchall()
        if rows:
            out[(source, name)] = ([r[0] for r in rows], [math.nan if r[1] is None else r[1] for r in rows])
    return out
