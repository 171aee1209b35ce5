"""The web-server study's own layout, when the server is a factor (the target,
its kind, or a target setting): the Flash/DeBox paper's Table 10 and
Figure 12.

- Throughput: a row per data set, a column per server (the target's level
  label: "Apache 2.4.71 mpm=prefork", "nginx 1.22.1"), each cell the mean
  Mb/s over the repetitions with its interval (analysis.pivot.cell).
- Response time: per data set, a row per profile figure (5%, median, 95%,
  mean) and a column per server, each cell the repetitions' cell of that
  run figure.
- Latency distributions: per data set a panel, one line per server, the
  CDF of every response of all its repetitions (their HDR histograms merged
  exactly by the engine), on a log axis of milliseconds.

From the store only; built by http's report_sections.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from perflab import _engine
from perflab.analysis import pivot
from perflab.section import Block, Figure, Section, Table, Text

if TYPE_CHECKING:
    from perflab.store import Store

PROFILE = (("latency_p5_ms", "5%"), ("latency_p50_ms", "median"), ("latency_p95_ms", "95%"),
           ("latency_mean_ms", "mean"))
# The CDF's points: quantiles from 0.1% to 99.9%, denser in the tail.
CDF_QUANTILES = tuple(q / 1000 for q in range(1, 1000, 10)) + (0.995, 0.999)
HISTOGRAM = "latency"  # every response's time, as http stores it


def server_factors(factors: Sequence[str]) -> list[str]:
    """The factors that vary the server: the target, its kind or a setting of it."""
    return [f for f in factors if f == "target" or f.startswith("target.")]


def _columns(runs: list[dict[str, Any]], config: list[str]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The servers (config's level combinations) in plan order, by their labels alone."""
    return [(pivot.combo_label(config, values, named=False), grp) for values, grp in pivot.group(runs, config)]


def _data_sets(runs: list[dict[str, Any]], data_set: list[str]) -> list[tuple[str, list[dict[str, Any]]]]:
    if not data_set:
        return [("as set", runs)]
    return [(pivot.combo_label(data_set, values, named=False), grp) for values, grp in pivot.group(runs, data_set)]


def sections(store: Store, runs: list[dict[str, Any]], metric: Callable[[str], Callable[[dict[str, Any]], Any]],
             data_set: list[str], config: list[str]) -> list[Section]:
    """Table 10 (throughput, and the response-time profiles per data set) and
    Figure 12 (latency CDFs per data set), as one headline section."""
    servers = _columns(runs, config)
    sets = _data_sets(runs, data_set)
    mbps = metric("throughput_mbps")
    headers = ["data set", *[label for label, _ in servers]]
    rows = []
    for ds_label, ds_runs in sets:
        ids = {r["id"] for r in ds_runs}
        rows.append([ds_label, *[pivot.cell([v for r in grp if r["id"] in ids and (v := mbps(r)) is not None])
                                 for _, grp in servers]])
    blocks: list[Block] = [
        Text("Throughput counts the body bytes of good responses (status 200 and the file's exact size) over the "
             "measured window, in megabits per second: a row per data set, a column per server, as the Flash/DeBox "
             "study's Table 10. " + pivot.INTERVAL_NOTE.format(center="mean")),
        Table(headers, rows, "Mb/s per data set and server (mean over repetitions)"),
        Text("Response times, per data set: each run's 5%, median, 95% and mean (from send, or from each "
             "request's intended send time with a rate), a column per server, as cells over the repetitions."),
    ]
    for ds_label, ds_runs in sets:
        ids = {r["id"] for r in ds_runs}
        profile = []
        for name, label in PROFILE:
            get = metric(name)
            profile.append([label, *[pivot.cell([v for r in grp if r["id"] in ids and (v := get(r)) is not None])
                                     for _, grp in servers]])
        blocks.append(Table(["response time (ms)", *[label for label, _ in servers]], profile,
                            f"Response time (ms) by server, data set {ds_label}"))
    figure = cdf_figure(store, sets, servers)
    if figure is not None:
        blocks.append(figure)
    return [Section("Web servers: throughput and response time (Table 10, Figure 12)", blocks, headline=True)]


def _merged(store: Store, runs: list[dict[str, Any]]) -> bytes | None:
    blobs = [bytes(h["data"]) for r in runs for h in store.histograms(r["id"]) if h["name"] == HISTOGRAM]
    if not blobs:
        return None
    try:
        return _engine.hdr_merge(blobs) if len(blobs) > 1 else blobs[0]
    except Exception:  # noqa: BLE001 - a histogram this engine cannot read: no figure, the tables stand
        return None


def cdf_figure(store: Store, sets: list[tuple[str, list[dict[str, Any]]]],
               servers: list[tuple[str, list[dict[str, Any]]]]) -> Figure | None:
    """A panel per data set, a line per server: the share of responses within
    a response time, on a log axis (ms)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure as MplFigure

    cols = min(3, len(sets))
    nrows = (len(sets) + cols - 1) // cols
    fig = MplFigure(figsize=(3.6 * cols + 2.2, 2.8 * nrows + 0.4), layout="constrained")
    axes = fig.subplots(nrows, cols, sharey=True, squeeze=False)
    handles: dict[str, Any] = {}
    drawn = False
    for i, (ds_label, ds_runs) in enumerate(sets):
        ax = axes[i // cols][i % cols]
        ids = {r["id"] for r in ds_runs}
        for label, grp in servers:
            merged = _merged(store, [r for r in grp if r["id"] in ids])
            if merged is None:
                continue
            xs = [max(_engine.hdr_quantile_us(merged, q), 1) / 1000.0 for q in CDF_QUANTILES]
            (line,) = ax.plot(xs, CDF_QUANTILES, linewidth=1.4, label=label)
            handles.setdefault(label, line)
            drawn = True
        ax.set_xscale("log")
        ax.set_title(f"data set {ds_label}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for j in range(len(sets), nrows * cols):
        axes[j // cols][j % cols].set_visible(False)
    if not drawn:
        return None
    fig.supxlabel("response time (ms, log)", fontsize=8)
    fig.supylabel("share of responses", fontsize=8)
    fig.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize=7)
    return Figure("http-latency-cdf-by-server", fig,
                  "Response-time distributions per data set, a line per server (every response of all its "
                  "repetitions, their histograms merged exactly), as the Flash/DeBox study's Figure 12")
