"""A run's telemetry figure: what the system did, on the benchmark's clock.

Stacked panels sharing one time axis (seconds since the run's t0), in the
manner of the OSDL DBT-3 durability graphs, which plotted vmstat's us/sy/id/wa,
free/buff/cache and bi/bo for each run:

1. throughput: every `tps` or `qps` series of a non-collector source (the
   workload's driver series, e.g. source "tpcb" name "tps"), named as the
   workload names it (`Workload.series_labels`: an HTTP run's is req/s);
2. then, for each collector that sampled the run, in the registry's order,
   the panels it declares (`Collector.panels`: CPU, memory and block I/O
   from vmstat, %util per disk, wait events, ...). This module names no
   collector: it draws what they declare.

Panels without data are left out; with no panel at all no file is written.
Drawn with matplotlib's object API (no pyplot state, safe in threads), Agg.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from perflab.collectors import COLLECTORS
from perflab.collectors.base import TelemetryPanel
from perflab.model import fmt_factors
from perflab.store import Store
from perflab.workloads import WORKLOADS

THROUGHPUT_NAMES = ("tps", "qps")
WIDTH_IN = 11.0
PANEL_HEIGHT_IN = 1.9
DPI = 110
Series = dict[str, tuple[list[float], list[float]]]  # name -> (t, value)
# A series longer than this is drawn from its mean per bucket, this many buckets.
LONG_SERIES = 5000
LONG_SERIES_BUCKETS = 2000


def _load(store: Store, run_id: int, source: str, name_like: str = "%") -> Series:
    """One source's series (names matching a LIKE pattern: pgstat writes ~60
    series a second and the figure wants its wait events only). A series of
    more than LONG_SERIES samples (a three-day run's) is read as SQLite's
    mean per bucket, LONG_SERIES_BUCKETS of them, not row by row."""
    from perflab.report.durability import envelope
    from perflab.serve.views import series_names

    out: Series = {}
    for src, name in series_names(store.conn, run_id):
        if src != source or not store.conn.execute("SELECT ? LIKE ?", (name, name_like)).fetchone()[0]:
            continue
        key = (run_id, source, name)
        where = "FROM series WHERE run_id = ? AND source = ? AND name = ? AND value IS NOT NULL"
        if store.conn.execute(f"SELECT count(*) {where}", key).fetchone()[0] > LONG_SERIES:
            e = envelope(store, run_id, source, name, LONG_SERIES_BUCKETS)
            e = e[e[:, 3] == e[:, 3]]  # a bucket of missing values only: no point, as a missing value is none
            out[name] = (e[:, 0].tolist(), e[:, 3].tolist())
            continue
        rows = store.conn.execute(f"SELECT t, value {where} ORDER BY t", key).fetchall()
        if rows:
            out[name] = _without_partial_last([r[0] for r in rows], [r[1] for r in rows])
    return out


def _without_partial_last(ts: list[float], vs: list[float]) -> tuple[list[float], list[float]]:
    """A collector's last sample is taken when it stops, over what is left of
    an interval (0.1 s of a 1 s interval, say): a rate or a percentage over so
    short a span is mostly noise, and drawn as a sudden drop or spike at the
    end of every panel. Such a sample (under half the series' usual interval)
    is left out of the figure; the store keeps it."""
    if len(ts) < 3:
        return ts, vs
    gaps = sorted(b - a for a, b in zip(ts, ts[1:], strict=False))
    usual = gaps[len(gaps) // 2]
    if usual > 0 and ts[-1] - ts[-2] < usual / 2:
        return ts[:-1], vs[:-1]
    return ts, vs


def _sources(store: Store, run_id: int) -> list[str]:
    # seeks on the index, not a scan of a long run's rows
    from perflab.serve.views import series_names

    return sorted({source for source, _ in series_names(store.conn, run_id)})


def _aligned(series: Series, names: Sequence[str], *, zero_when_absent: bool = False
             ) -> tuple[list[float], list[list[float]]] | None:
    """Series on shared timestamps, for stacking. By default the timestamps
    all of them have (vmstat's us, sy, ... share each sample's t); with
    `zero_when_absent`, every timestamp any has, the others 0 there (a wait
    event first seen later had no sessions before)."""
    present = [n for n in names if n in series]
    if not present:
        return None
    stamps = set(series[present[0]][0])
    for n in present[1:]:
        stamps = stamps | set(series[n][0]) if zero_when_absent else stamps & set(series[n][0])
    ts = sorted(stamps)
    if not ts:
        return None
    columns = []
    for n in names:
        lookup = dict(zip(*series[n], strict=True)) if n in series else {}
        columns.append([lookup.get(t, 0.0) for t in ts])
    if len(ts) == 1 and ts[0] > 0:
        # a run shorter than the interval has one sample, covering the time
        # since the collector started at the run's start: draw it over that
        # span instead of as an invisible zero-width area
        ts = [0.0, ts[0]]
        columns = [[col[0], col[0]] for col in columns]
    return ts, columns


def _style(ax: Axes, ylabel: str) -> None:
    ax.set_ylabel(ylabel, fontsize=8)
    ax.grid(True, color="#dddddd", linewidth=0.6)
    ax.tick_params(labelsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _legend(ax: Axes) -> None:
    """Beside the panel, so no line is hidden behind it."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)


class _Panel:
    def __init__(self, title: str, draw: Callable[[Axes, float], None]) -> None:
        self.title = title
        self.draw = draw


def _throughput_panel(store: Store, run_id: int, sources: list[str]) -> _Panel | None:
    collectors = set(COLLECTORS.names())
    lines = []
    for source in sources:
        if source in collectors:
            continue
        # the workload's own name for the series (an HTTP run's "tps" is req/s)
        labels = WORKLOADS.get(source).series_labels if source in WORKLOADS else {}
        for name, (ts, vs) in _load(store, run_id, source).items():
            if name in THROUGHPUT_NAMES:
                lines.append((f"{source} {labels.get(name, name)}", labels.get(name, name), ts, vs))
    if not lines:
        return None
    unit = "/".join(sorted({name for _, name, _, _ in lines}))

    def draw(ax: Axes, scale: float) -> None:
        for label, _, ts, vs in lines:
            ax.plot([t / scale for t in ts], vs, label=label, color="#1f3a93", linewidth=1.2)
        ax.set_ylim(bottom=0)
        _style(ax, unit)
        _legend(ax)

    return _Panel("throughput", draw)


def _stack_panel(series: Series, parts: Sequence[tuple[str, str, str | None]], title: str, ylabel: str,
                 divisor: float, *, stacked: bool, ymax: float | None = None) -> _Panel | None:
    aligned = _aligned(series, [p[0] for p in parts])
    if aligned is None:
        return None
    ts, columns = aligned

    def draw(ax: Axes, scale: float) -> None:
        xs = [t / scale for t in ts]
        scaled = [[v / divisor for v in col] for col in columns]
        if stacked:
            colours = [p[2] for p in parts]
            ax.stackplot(xs, *scaled, labels=[p[1] for p in parts], linewidth=0,
                         colors=None if None in colours else [c for c in colours if c is not None])
        else:
            for (_, label, colour), col in zip(parts, scaled, strict=True):
                ax.plot(xs, col, label=label, color=colour, linewidth=1.2)
        ax.set_ylim(0, ymax)
        _style(ax, ylabel)
        _legend(ax)

    return _Panel(title, draw)


def _per_name_panel(lines: list[tuple[str, list[float], list[float]]], title: str, ylabel: str,
                    *, stacked: bool) -> _Panel | None:
    if not lines:
        return None

    def draw(ax: Axes, scale: float) -> None:
        if stacked:
            aligned = _aligned({label: (ts, vs) for label, ts, vs in lines}, [label for label, _, _ in lines],
                               zero_when_absent=True)
            if aligned is not None:
                ts, columns = aligned
                ax.stackplot([t / scale for t in ts], *columns, labels=[label for label, _, _ in lines], linewidth=0)
        else:
            for label, ts, vs in lines:
                # a lone sample has no line to draw: mark it
                ax.plot([t / scale for t in ts], vs, label=label, linewidth=1.0, marker="o" if len(ts) == 1 else None)
        ax.set_ylim(bottom=0)
        _style(ax, ylabel)
        _legend(ax)

    return _Panel(title, draw)


def _collector_panel(series: Series, spec: TelemetryPanel) -> _Panel | None:
    """A collector's declared panel, from its series."""
    if spec.parts:
        parts = [(p.name, p.label, p.colour) for p in spec.parts]
        return _stack_panel(series, parts, spec.title, spec.ylabel, spec.divisor, stacked=spec.stacked,
                            ymax=spec.ymax)
    names = sorted(series)
    if spec.top is not None:
        names = sorted(names, key=lambda n: -sum(series[n][1]))[:spec.top]
    lines = [(spec.label_of(n), ts, [v / spec.divisor for v in vs])
             for n in names for ts, vs in [series[n]] if not spec.drop_zero or sum(vs) > 0]
    return _per_name_panel(lines, spec.title, spec.ylabel, stacked=spec.stacked)


def build_run_figure(store: Store, run_id: int) -> Figure | None:
    """The run's panels as a matplotlib Figure (None when nothing was sampled)."""
    sources = _sources(store, run_id)
    panels = [_throughput_panel(store, run_id, sources)]
    loaded: dict[tuple[str, str], Series] = {}
    for name in COLLECTORS.in_registration_order():
        if name not in sources:
            continue
        for spec in COLLECTORS.get(name).panels:
            key = (name, spec.name_like)
            if key not in loaded:
                loaded[key] = _load(store, run_id, name, spec.name_like)
            panels.append(_collector_panel(loaded[key], spec))
    present = [p for p in panels if p is not None]
    if not present:
        return None
    t_max = max((r[0] or 0.0) for r in store.conn.execute("SELECT max(t) FROM series WHERE run_id = ?", (run_id,)))
    scale, t_unit = (60.0, "minutes") if t_max > 900 else (1.0, "seconds")

    fig = Figure(figsize=(WIDTH_IN, PANEL_HEIGHT_IN * len(present) + 0.8), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(present), 1, sharex=True, squeeze=False)[:, 0]
    for ax, panel in zip(axes, present, strict=True):
        panel.draw(ax, scale)
        ax.set_title(panel.title, fontsize=9, loc="left")
    axes[-1].set_xlabel(f"time since the run's start ({t_unit})", fontsize=8)
    axes[-1].set_xlim(0, t_max / scale if t_max > 0 else 1)
    fig.suptitle(_title(store, run_id), fontsize=10, x=0.01, ha="left")
    height_in = fig.get_figheight()
    fig.subplots_adjust(left=0.07, right=0.84, top=1 - 0.7 / height_in, bottom=0.5 / height_in, hspace=0.5)
    return fig


def _title(store: Store, run_id: int) -> str:
    run = next((r for r in store.runs() if r["id"] == run_id), None)
    name = store.experiment().get("name", "")
    if run is None:
        return f"{name} run {run_id}"
    factors = fmt_factors(run["factors"], ", ")
    text = f"{name}: run {run_id}, repetition {run['repetition']}"
    return f"{text} ({factors})" if factors else text


def write_run_figure(store: Store, run_id: int, path: Path) -> Path | None:
    """Write the run's telemetry panels as a PNG at `path`; None when the run
    has no telemetry or throughput series to draw."""
    fig = build_run_figure(store, run_id)
    if fig is None:
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI)
    return path
