"""The report's figures, drawn with matplotlib's object API (no pyplot state,
so nothing depends on a display or a global backend) and saved as SVG and PNG.
"""

from __future__ import annotations

import io
import math
import re
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from perflab.analysis.degradation import Degradation
from perflab.analysis.scaling import Curve, CurvePoint

# Percentiles of the latency spectrum, p50..p99.99 as the issue asks, drawn on a
# "nines" axis (x = -log10(1 - q)) so the tail is as wide as the body.
SPECTRUM_PERCENTILES = (50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99)
SPECTRUM_TICKS = (50.0, 90.0, 99.0, 99.9, 99.99)

WIDTH_IN, HEIGHT_IN = 7.2, 3.9
# Up to this many factor values, each gets its own tick on a scaling axis.
MAX_VALUE_TICKS = 12
PNG_DPI = 110
# Legends go beside the plot (legend_outside): labels wrapped at this many
# characters; the inches a character and a line of the legend's font take.
LEGEND_WRAP = 40
LEGEND_FONT_PT = 7.5
LEGEND_CHAR_IN = 0.06
LEGEND_LINE_IN = 0.14
LEGEND_GAP_IN = 0.05
# Figure file names are made from metric, histogram and series names, which
# may hold dots or other marks ("latency.tpcb-like", "ins.mean_ms").
NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


class FigureWarning(UserWarning):
    """matplotlib warned while drawing a report figure: a bug of the figure."""


def new_figure(width_in: float = WIDTH_IN, height_in: float = HEIGHT_IN) -> Figure:
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _style(ax: matplotlib.axes.Axes) -> None:
    ax.grid(True, color="#e3e6ec", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def file_name(name: str) -> str:
    """A figure's file name: `name` with every run of other characters as '_'."""
    safe = NAME_UNSAFE.sub("_", name).strip("_")
    if not safe:
        raise ValueError(f"figure name {name!r} has no letter or digit")
    return safe


def save(fig: Figure, figures_dir: Path, name: str) -> str:
    """Write figures/<name>.svg and .png; return the SVG element for inlining."""
    name = file_name(name)
    figures_dir.mkdir(parents=True, exist_ok=True)
    # What matplotlib warns while drawing (a layout it could not apply, a
    # legend that does not fit: UserWarnings) is a defect of the figure: said
    # again as a FigureWarning naming it, which the tests make an error.
    # Anything else caught meanwhile is not the figure's (a ResourceWarning
    # of another's unclosed file, raised when the garbage collector runs in
    # the middle of drawing): it goes on as it came.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # A salt per figure keeps the ids matplotlib gives clip paths and markers
        # distinct between the SVGs inlined in one page; no date keeps files stable.
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": name}):
            buf = io.StringIO()
            fig.savefig(buf, format="svg", metadata={"Date": None})
        svg = buf.getvalue()
        (figures_dir / f"{name}.svg").write_text(svg)
        # The layout was solved for the SVG; keep it rather than solve it again.
        fig.set_layout_engine("none")
        fig.savefig(figures_dir / f"{name}.png", dpi=PNG_DPI, metadata={"Software": None})
    for w in caught:
        if not issubclass(w.category, UserWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    for found in dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, UserWarning)):
        warnings.warn(f"figure {name}: {found}", FigureWarning, stacklevel=2)
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


def _log_x_helps(xs: Sequence[float]) -> bool:
    positive = [x for x in xs if x > 0]
    return len(positive) == len(xs) and len(xs) >= 3 and max(positive) / min(positive) >= 8


def scaling_figure(curves: list[Curve], factor: str, metric_label: str, ci_note: str) -> Figure:
    """Every run as a point, the mean as a line, and the 95% band only where
    an interval is shown (from MIN_INTERVAL_N runs, not too wide). The y axis
    fits the runs' values, never the bands: a band beyond them is clipped."""
    fig = new_figure()
    ax = fig.add_subplot()
    _style(ax)
    xs_all: list[float] = []
    ys_all: list[float] = []
    for curve in curves:
        xs = [p.x for p in curve.points]
        xs_all += xs
        means = [p.summary.mean for p in curve.points]
        (line,) = ax.plot(xs, means, linewidth=1.4, label=curve.label)
        for p in curve.points:
            ys_all += p.summary.values
            ax.scatter([p.x] * len(p.summary.values), p.summary.values, s=12, color=line.get_color(), alpha=0.75,
                       linewidths=0, zorder=3)
        # one band per run of consecutive points that have an interval
        segments: list[list[CurvePoint]] = [[]]
        for p in curve.points:
            if p.summary.interval.shown:
                segments[-1].append(p)
            elif segments[-1]:
                segments.append([])
        for segment in segments:
            if not segment:
                continue
            ax.fill_between([q.x for q in segment], [q.summary.interval.low for q in segment],
                            [q.summary.interval.high for q in segment], color=line.get_color(), alpha=0.18,
                            linewidth=0)
            if len(segment) == 1:  # a lone point's interval as an error bar
                ci = segment[0].summary.interval
                ax.errorbar([segment[0].x], [ci.estimate], yerr=[[ci.estimate - ci.low], [ci.high - ci.estimate]],
                            color=line.get_color(), capsize=3, linewidth=1, fmt="none")
    ticks = sorted(set(xs_all))
    if _log_x_helps(ticks):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
        ax.minorticks_off()
    elif all(float(x).is_integer() for x in ticks):
        # clients, cores: no tick at 2.5 clients
        if len(ticks) <= MAX_VALUE_TICKS:
            ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.minorticks_off()
    ax.set_xlabel(factor)
    ax.set_ylabel(metric_label)
    finite = [y for y in ys_all if math.isfinite(y)]
    if finite:
        low, high = min(finite), max(finite)
        pad = 0.08 * (high - low) if high > low else 0.05 * abs(high) or 1.0
        bottom = low - pad
        if low >= 0:
            bottom = max(0.0, bottom)
        ax.set_ylim(bottom, high + pad)
    ax.set_title(f"{metric_label} vs {factor.rsplit('.', 1)[-1]}  (points: runs; band: {ci_note})", fontsize=10,
                 loc="left")
    if len(curves) > 1:
        legend_outside(fig, ax)
    return fig


def _nines(percentile: float) -> float:
    return -math.log10(1.0 - percentile / 100.0)


def spectrum_figure(lines: Sequence[tuple[str, Sequence[float], Sequence[float]]], unit: str, title: str) -> Figure:
    """lines: (label, percentiles, latencies)."""
    fig = new_figure()
    ax = fig.add_subplot()
    _style(ax)
    for label, percentiles, latencies in lines:
        ax.plot([_nines(p) for p in percentiles], latencies, marker="o", markersize=3, linewidth=1.5, label=label)
    ax.set_xticks([_nines(p) for p in SPECTRUM_TICKS], [f"p{p:g}" for p in SPECTRUM_TICKS])
    ax.set_yscale("log")
    ax.set_xlabel("percentile")
    ax.set_ylabel(f"latency ({unit})")
    ax.set_title(title, fontsize=10, loc="left")
    if len(lines) > 1:
        legend_outside(fig, ax)
    return fig


def series_figure(lines: Sequence[tuple[str, Sequence[float], Sequence[float]]], ylabel: str, title: str,
                  marks: Sequence[float | None] = ()) -> Figure:
    """lines: (label, t_s, values) on the run's clock; marks[i]: a time on
    line i's run drawn as a dotted line in its colour (where its rate settled)."""
    fig = new_figure(height_in=3.4)
    ax = fig.add_subplot()
    _style(ax)
    for i, (label, t, v) in enumerate(lines):
        (drawn,) = ax.plot(t, v, linewidth=1.2, label=label)
        mark = marks[i] if i < len(marks) else None
        if mark is not None:
            ax.axvline(mark, color=drawn.get_color(), linewidth=1, linestyle=":")
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10, loc="left")
    if len(lines) > 1:
        legend_outside(fig, ax)
    return fig


def legend_outside(fig: Figure, ax: matplotlib.axes.Axes) -> None:
    """The legend beside the plot, where it cannot hide a line: each label
    wrapped at LEGEND_WRAP characters, and the figure made wider (and taller,
    for many labels) by what the legend needs, so the plot keeps its size and
    the layout never collapses (matplotlib's "constrained_layout not applied")."""
    handles, labels = ax.get_legend_handles_labels()
    if not labels:
        return
    wrapped = [textwrap.fill(label, LEGEND_WRAP, break_long_words=True) or " " for label in labels]
    longest = max(len(line) for label in wrapped for line in label.splitlines())
    text_lines = sum(label.count("\n") + 1 for label in wrapped)
    width, height = fig.get_size_inches()
    fig.set_size_inches(width + 0.5 + LEGEND_CHAR_IN * longest,
                        max(height, LEGEND_LINE_IN * text_lines + LEGEND_GAP_IN * len(labels) + 1.0))
    ax.legend(handles, wrapped, fontsize=LEGEND_FONT_PT, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def degradation_figure(d: Degradation, run_labels: list[str], metric_label: str, title: str) -> Figure:
    fig = new_figure(height_in=3.2)
    ax = fig.add_subplot()
    _style(ax)
    xs = list(range(1, len(d.values) + 1))
    ax.plot(xs, d.values, marker="o", markersize=4, linewidth=1.4, color="#3b6fb6", label=metric_label)
    if d.trend is not None:
        fit = [d.trend.intercept + d.trend.slope * x for x in xs]
        ax.plot(xs, fit, linestyle="--", color="#888", linewidth=1, label="OLS trend")
    for cp in d.change_points:
        ax.axvline(cp.index + 0.5, color="#a4161a", linewidth=1, linestyle=":")
        ax.annotate(f"p={cp.p_value:.3f}", (cp.index + 0.5, max(d.values)), fontsize=8, color="#a4161a")
    ax.set_xticks(xs, run_labels, fontsize=8)
    ax.set_xlabel("run (in the order they ran)")
    ax.set_ylabel(metric_label)
    ax.set_title(title, fontsize=10, loc="left")
    legend_outside(fig, ax)
    return fig


def ratio_figure(labels: list[str], ratios: list[float], lows: list[float], highs: list[float], title: str) -> Figure:
    fig = new_figure(height_in=max(2.4, 0.3 * len(labels) + 1.2))
    ax = fig.add_subplot()
    _style(ax)
    ys = list(range(len(labels)))
    # a ratio that is undefined is not drawn; one without an interval is a bare point
    shown = [i for i, r in enumerate(ratios) if math.isfinite(r)]
    err_low = [ratios[i] - lows[i] if math.isfinite(lows[i]) else 0 for i in shown]
    err_high = [highs[i] - ratios[i] if math.isfinite(highs[i]) else 0 for i in shown]
    ax.errorbar([ratios[i] for i in shown], [ys[i] for i in shown], xerr=[err_low, err_high], fmt="o",
                color="#3b6fb6", capsize=3)
    ax.axvline(1.0, color="#888", linewidth=1)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ratio B / A (95% CI)")
    ax.set_title(title, fontsize=10, loc="left")
    return fig
