"""The report's figures, drawn with matplotlib's object API (no pyplot state,
so nothing depends on a display or a global backend) and saved as SVG and PNG.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from perflab.analysis.degradation import Degradation
from perflab.analysis.scaling import Curve

# Percentiles of the latency spectrum, p50..p99.99 as the issue asks, drawn on a
# "nines" axis (x = -log10(1 - q)) so the tail is as wide as the body.
SPECTRUM_PERCENTILES = (50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99)
SPECTRUM_TICKS = (50.0, 90.0, 99.0, 99.9, 99.99)

WIDTH_IN, HEIGHT_IN = 7.2, 3.9
# Up to this many factor values, each gets its own tick on a scaling axis.
MAX_VALUE_TICKS = 12
PNG_DPI = 110
# Figure file names are made from metric, histogram and series names, which
# may hold dots or other marks ("latency.tpcb-like", "ins.mean_ms").
NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


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
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


def _log_x_helps(xs: Sequence[float]) -> bool:
    positive = [x for x in xs if x > 0]
    return len(positive) == len(xs) and len(xs) >= 3 and max(positive) / min(positive) >= 8


def scaling_figure(curves: list[Curve], factor: str, metric_label: str, ci_note: str) -> Figure:
    fig = new_figure()
    ax = fig.add_subplot()
    _style(ax)
    xs_all: list[float] = []
    for curve in curves:
        xs = [p.x for p in curve.points]
        xs_all += xs
        means = [p.summary.mean for p in curve.points]
        (line,) = ax.plot(xs, means, marker="o", markersize=4, linewidth=1.6, label=curve.label)
        lows = [p.summary.interval.low for p in curve.points]
        highs = [p.summary.interval.high for p in curve.points]
        if all(math.isfinite(v) for v in lows + highs):
            ax.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.18, linewidth=0)
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
    if all(p.summary.mean >= 0 for c in curves for p in c.points):
        ax.set_ylim(bottom=0)
    ax.set_title(f"{metric_label} vs {factor.rsplit('.', 1)[-1]}  (band: {ci_note})", fontsize=10, loc="left")
    if len(curves) > 1:
        ax.legend(fontsize=8, frameon=False)
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
        ax.legend(fontsize=8, frameon=False)
    return fig


def series_figure(lines: Sequence[tuple[str, Sequence[float], Sequence[float]]], ylabel: str, title: str) -> Figure:
    """lines: (label, t_s, values) on the run's clock."""
    fig = new_figure(width_in=WIDTH_IN + (2.6 if len(lines) > 1 else 0), height_in=3.4)
    ax = fig.add_subplot()
    _style(ax)
    for label, t, v in lines:
        ax.plot(t, v, linewidth=1.2, label=label)
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10, loc="left")
    if len(lines) > 1:
        _legend_right(ax)
    return fig


def _legend_right(ax: matplotlib.axes.Axes) -> None:
    """A legend beside the plot, where it cannot hide a line."""
    ax.legend(fontsize=7.5, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))


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
    ax.legend(fontsize=8, frameon=False)
    return fig


def ratio_figure(labels: list[str], ratios: list[float], lows: list[float], highs: list[float], title: str) -> Figure:
    fig = new_figure(height_in=max(2.4, 0.3 * len(labels) + 1.2))
    ax = fig.add_subplot()
    _style(ax)
    ys = list(range(len(labels)))
    err_low = [r - lo if math.isfinite(lo) else 0 for r, lo in zip(ratios, lows, strict=True)]
    err_high = [hi - r if math.isfinite(hi) else 0 for r, hi in zip(ratios, highs, strict=True)]
    ax.errorbar(ratios, ys, xerr=[err_low, err_high], fmt="o", color="#3b6fb6", capsize=3)
    ax.axvline(1.0, color="#888", linewidth=1)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ratio B / A (95% CI)")
    ax.set_title(title, fontsize=10, loc="left")
    return fig
