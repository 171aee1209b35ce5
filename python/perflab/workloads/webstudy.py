"""The web-server study's own layout, when the server is a factor (the target,
its kind, or a target setting): the Flash/DeBox paper's Table 10 and
Figure 12.

- Throughput: a row per data set, a column per server (the target's level
  label: "Apache 2.4.71 prefork", "nginx 1.22.1"), each cell the mean
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


def _server_label(config: list[str], values: Sequence[Any]) -> str:
    """A server's column: a server (a target or its kind) or a word by its
    label alone ("Apache 2.4.71 prefork"); a bare number or boolean with its
    setting's name ("sendfile=true, worker_processes=1"), which alone says nothing."""
    return ", ".join(f"{pivot.short_name(f)}={pivot.level_text(v)}"
                     if isinstance(v, bool | int | float) and f not in ("target", "target.kind")
                     else pivot.level_text(v) for f, v in zip(config, values, strict=True))


def _columns(runs: list[dict[str, Any]], config: list[str]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The servers (config's level combinations) in plan order, by their labels."""
    return [(_server_label(config, values), grp) for values, grp in pivot.group(runs, config)]


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
    return out + memory_sections(store, runs, values, sets, config)


MB = 1e6
# A run "served from memory" when its server read less than this share of the
# bytes it served from storage in the measured window: a rare file first asked
# for after the warm-up is read once, not the set.
FROM_MEMORY_SHARE = 0.01
WINDOW = ("measure-start", "measure-end")


def _overlap(a: float, b: float, lo: float, hi: float) -> float:
    """The share of the interval (a, b] that lies within [lo, hi]."""
    return max(0.0, min(b, hi) - max(a, lo)) / (b - a) if b > a else 0.0


def _integrate(series: dict[str, list[tuple[float, float]]], lo: float, hi: float) -> float:
    """Bytes over [lo, hi] from per-second KiB/s series: each sample is the
    rate over the interval since the one before it (the first: as long as the
    next), counted for the part of that interval inside [lo, hi]."""
    total = 0.0
    for points in series.values():
        for i, (t, rate) in enumerate(points):
            prev = points[i - 1][0] if i else t - (points[1][0] - t if len(points) > 1 else 1.0)
            total += rate * 1024 * (t - prev) * _overlap(prev, t, lo, hi)
    return total


def window_reads(store: Store, run_id: int) -> dict[str, float]:
    """Storage reads in the warm-up and in the measured window, split at the
    run's measure-start event (the same clock as its series):

    - server_warmup, server_window: the server's processes (the process
      collector's per-second read_kib_per_s, /proc/PID/io read_bytes, of
      every role but perflab's driver and monitor);
    - disk_warmup, disk_window: the machine's disks (diskstats, every process).

    Empty where the run has no measured window or neither collector ran."""
    t = {e["kind"]: e["t"] for e in store.events(run_id) if e["kind"] in WINDOW and e["t"] is not None}
    if set(t) != set(WINDOW):
        return {}
    start, end = t["measure-start"], t["measure-end"]
    out: dict[str, float] = {}
    for source, key in (("process", "server"), ("diskstats", "disk")):
        series: dict[str, list[tuple[float, float]]] = {}
        for p in store.series(run_id, source):
            name = p["name"]
            if (name.endswith(".read_kib_per_s") and p["value"] is not None
                    and not (source == "process" and name.startswith(("driver.", "monitor.")))):
                series.setdefault(name, []).append((p["t"], p["value"]))
        if series:
            out[f"{key}_warmup"] = _integrate(series, 0.0, start)
            out[f"{key}_window"] = _integrate(series, start, end)
    return out


# How a run's measured window was served (see _where), as the report says it.
WHERE = {"memory": "served from memory",
         "re-read": "reading evicted pages again (disk-bound)",
         "evicting": "reading from disk at the memory limit, evicting pages of the set to cache others "
                     "(disk-bound)",
         "cold": "still reading the set for the first time below the memory limit (a longer warm-up would "
                 "tell whether it stays in memory)"}


def _where(reads: dict[str, float], v: dict[str, float], limited: bool) -> tuple[str, float] | None:
    """Whether a run's measured window was served from memory (its server read
    less than FROM_MEMORY_SHARE of the bytes it served); re-read pages it had
    read before (warm-up and window together read past the file set, with 5%
    for metadata); read at the memory limit (`limited`: the run's
    memory-limited flag, the cgroup's limit hit or its memory at 90% of it),
    so each page it caches evicts another; or was still reading the set for
    the first time. And the share of the bytes served that it read."""
    window, served, size = reads.get("server_window"), v.get("body_bytes"), v.get("fileset_bytes")
    if window is None or not served:
        return None
    share = window / served
    if share < FROM_MEMORY_SHARE:
        return "memory", share
    if size and window + reads.get("server_warmup", 0.0) > 1.05 * size:
        return "re-read", share
    return ("evicting" if limited else "cold"), share


def _mb(x: float | None) -> str:
    return "–" if x is None else pivot.fmt_num(x / MB)


def memory_sections(store: Store, runs: list[dict[str, Any]], values: dict[int, dict[str, float]],
                    sets: list[tuple[str, list[dict[str, Any]]]], config: list[str]) -> list[Section]:
    """Per run, how much of what was served came from the disk in the
    measured window (the warm-up's reads apart): the server's own storage
    reads against the bytes it served, its cgroup's page cache and memory
    limit, and the disks' reads (all processes); and, per data set, whether it
    fits the server's memory limit, what its runs read, and where the data
    sets stopped fitting."""
    rows = []
    reads = {run["id"]: window_reads(store, run["id"]) for run in runs}
    for run in runs:
        v, r = values.get(run["id"], {}), reads[run["id"]]
        served, disk = v.get("body_bytes"), r.get("server_window")
        share = f"{100 * disk / served:.1f}" if disk is not None and served else "–"
        size = v.get("fileset_bytes")
        over = f"{disk / size:.2f}" if disk is not None and size else "–"
        sized = [f for f in run["factors"] if "fileset" in f]
        rows.append([run["id"], pivot.combo_label(sized, [run["factors"][f] for f in sized], named=False)
                     if sized else "as set",
                     pivot.combo_label(config, [run["factors"].get(f) for f in config], named=False),
                     _mb(size), _mb(v.get("resources.memory_limit_bytes")),
                     _mb(v.get("resources.memory_cache_bytes")), _mb(served), _mb(r.get("server_warmup")),
                     _mb(disk), share, over, _mb(r.get("disk_window"))])
    if not any(row[8] != "–" or row[5] != "–" for row in rows):
        return []  # neither the process collector nor a memory cgroup: nothing to say
    lines, stopped, first_over = [], None, None
    for label, ds_runs in sets:
        sizes = [values.get(r["id"], {}).get("fileset_bytes") for r in ds_runs]
        limits = [values.get(r["id"], {}).get("resources.memory_limit_bytes") for r in ds_runs]
        size = next((x for x in sizes if x), None)
        limit = min((x for x in limits if x), default=None)
        fits = ("no memory limit" if limit is None or size is None else
                f"fits in the server's {limit / MB:,.0f} MB" if size <= limit else
                f"does not fit in the server's {limit / MB:,.0f} MB ({size / limit:.1f}x)")
        kinds = [k for r in ds_runs if (k := _where(reads[r["id"]], values.get(r["id"], {}),
                                                    "memory-limited" in (r.get("flags") or []))) is not None]
        if not kinds:
            read = "no storage reads of the measured window were collected (collect.process)"
        else:
            shares = [share for _, share in kinds]
            low, high = 100 * min(shares), 100 * max(shares)
            span = f"{low:.1f}%" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}% to {high:.1f}%"
            read = f"after the warm-up its runs read {span} of the bytes they served from disk: " + "; ".join(
                f"{n} run{'s' if n != 1 else ''} {WHERE[kind]}" for kind in WHERE
                if (n := sum(1 for k, _ in kinds if k == kind)))
            if stopped is None and any(k in ("re-read", "evicting") for k, _ in kinds):
                stopped = label
            if first_over is None and size and limit and size > limit and any(k != "memory" for k, _ in kinds):
                first_over = label
        lines.append(f"Data set {label}" + (f" ({size / MB:,.0f} MB of files)" if size else "")
                     + f": {fits}; {read}.")
    if stopped is not None:
        lines.append(f"The data stopped fitting in memory at data set {stopped}: the first whose runs, after the "
                     "warm-up, read from disk with the server's page cache at its memory limit or read evicted "
                     "pages again.")
    elif first_over is not None:
        lines.append(f"The data stopped fitting in memory at data set {first_over}: the first larger than the "
                     "server's memory limit whose runs still read from disk after the warm-up.")
    elif any("after the warm-up" in line for line in lines):
        lines.append("No data set outgrew the server's memory in these runs.")
    return [Section("Web servers: page cache and disk, per run", [
        Text("Where the bytes came from. The server's cgroup is charged with the pages its own processes fault "
             "into the page cache, and only those: the file set is generated by perflab outside that cgroup, so "
             "its pages count against the server's limit only once the server reads them itself; with [host] "
             "drop_caches the page cache is dropped before each run, so every run starts cold and the server "
             "reads the set from disk again, held to target.resources.memory (without the drop, pages cached "
             "before count against no limit). 'warm-up reads' is what the server's processes read from storage "
             "during the warm-up (the cold first read); 'from disk' is what they read in the measured window "
             "alone (/proc/PID/io read_bytes per second, the process collector, split at the window's start), "
             "in % of the body bytes served in that window and in passes over the file set: a set that fits is "
             "read in the warm-up and then served from memory (near 0%), one that does not is read again as "
             "its pages are evicted. 'page cache' is the server cgroup's at the run's end (memory.stat); 'disk "
             "reads' are the disks' own in the measured window (diskstats), every process's on the machine."),
        Text(" ".join(lines)),
        Table(["run", "data set", "server", "file set MB", "memory limit MB", "page cache MB", "served MB",
               "warm-up reads MB", "from disk MB", "from disk %", "read ÷ set", "disk reads MB"], rows,
              "Page cache and disk per run: the server's own storage reads in the measured window against the "
              "bytes it served"),
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
