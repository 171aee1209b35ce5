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


def sections(store: Store, runs: list[dict[str, Any]], values: dict[int, dict[str, float]],
             data_set: list[str], config: list[str]) -> list[Section]:
    """Table 10 (throughput, and the response-time profiles per data set) and
    Figure 12 (latency CDFs per data set), as one headline section; then
    where each run's bytes came from (page cache or disk)."""

    def metric(name: str) -> Callable[[dict[str, Any]], Any]:
        return lambda run: values.get(run["id"], {}).get(name)

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
    out = [Section("Web servers: throughput and response time (Table 10, Figure 12)", blocks, headline=True)]
    return out + memory_sections(runs, values, sets, config)


MB = 1e6


def _disk_read(v: dict[str, float]) -> float | None:
    """Bytes the server's processes read from storage in the run (the process
    collector's /proc/PID/io read_bytes of every role but perflab's driver)."""
    parts = [x for k, x in v.items() if k.startswith("process.") and k.endswith(".read_mib")
             and not k.startswith("process.driver.")]
    return sum(parts) * 2**20 if parts else None


def _device_read(v: dict[str, float]) -> float | None:
    """Bytes read from the machine's disks during the run (diskstats, every process)."""
    rates = [x for k, x in v.items() if k.startswith("diskstats.") and k.endswith(".read_kib_per_s")]
    return sum(rates) * 1024 * v["measured_s"] if rates and "measured_s" in v else None


def _mb(x: float | None) -> str:
    return "–" if x is None else pivot.fmt_num(x / MB)


def memory_sections(runs: list[dict[str, Any]], values: dict[int, dict[str, float]],
                    sets: list[tuple[str, list[dict[str, Any]]]], config: list[str]) -> list[Section]:
    """Per run, how much of what was served came from the disk: the server's
    own storage reads against the bytes it served, its cgroup's page cache
    and memory limit, and the disks' reads (all processes); and, per data
    set, whether it fits the server's memory limit and what the runs read."""
    rows = []
    for run in runs:
        v = values.get(run["id"], {})
        served, disk = v.get("body_bytes"), _disk_read(v)
        share = f"{100 * disk / served:.1f}" if disk is not None and served else "–"
        size = v.get("fileset_bytes")
        over = f"{disk / size:.2f}" if disk is not None and size else "–"
        sized = [f for f in run["factors"] if "fileset" in f]
        rows.append([run["id"], pivot.combo_label(sized, [run["factors"][f] for f in sized], named=False)
                     if sized else "as set",
                     pivot.combo_label(config, [run["factors"].get(f) for f in config], named=False),
                     _mb(v.get("fileset_bytes")), _mb(v.get("resources.memory_limit_bytes")),
                     _mb(v.get("resources.memory_cache_bytes")), _mb(served), _mb(disk), share, over,
                     _mb(_device_read(v))])
    if not any(row[7] != "–" or row[5] != "–" for row in rows):
        return []  # neither the process collector nor a memory cgroup: nothing to say
    lines = []
    for label, ds_runs in sets:
        sizes = [values.get(r["id"], {}).get("fileset_bytes") for r in ds_runs]
        limits = [values.get(r["id"], {}).get("resources.memory_limit_bytes") for r in ds_runs]
        size = next((x for x in sizes if x), None)
        limit = min((x for x in limits if x), default=None)
        passes = [d / size for r in ds_runs if size and (d := _disk_read(values.get(r["id"], {}))) is not None]
        fits = ("no memory limit" if limit is None or size is None else
                f"fits in the server's {limit / MB:,.0f} MB" if size <= limit else
                f"does not fit in the server's {limit / MB:,.0f} MB ({size / limit:.1f}x)")
        read = (f"its runs read {min(passes):.2f}x to {max(passes):.2f}x the file set from disk"
                if passes else "no storage reads were collected (collect.process)")
        lines.append(f"data set {label}" + (f" ({size / MB:,.0f} MB of files)" if size else "") + f": {fits}; {read}.")
    return [Section("Web servers: page cache and disk, per run", [
        Text("Where the bytes came from. The server's cgroup is charged with the pages its own processes read "
             "into the page cache, and only those: with [host] drop_caches each run starts cold, so the file "
             "set (generated outside that cgroup, by perflab) is read again by the server and held to "
             "target.resources.memory; without it, pages cached before count against no limit. 'from disk' is "
             "what the server's processes read from storage from the warm-up's start to the run's end "
             "(/proc/PID/io read_bytes, the process collector), in % of the body bytes served in the measured "
             "window and in passes over the file set: a cold set that fits is read about once (up to 1x), one "
             "that does not is read again as its pages are evicted (past 1x in a long enough run); 'page cache' "
             "is the server cgroup's at the run's end (memory.stat); 'disk reads' are the disks' own "
             "(diskstats), every process's. " + " ".join(lines)),
        Table(["run", "data set", "server", "file set MB", "memory limit MB", "page cache MB", "served MB",
               "from disk MB", "from disk %", "read ÷ set", "disk reads MB"], rows,
              "Page cache and disk per run: the server's own storage reads against the bytes it served"),
    ])]


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
