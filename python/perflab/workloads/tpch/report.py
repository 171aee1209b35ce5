"""The TPC-H workload's report sections, built from the store only: the
spec's metrics per run, and each query's time per stream."""

from __future__ import annotations

import statistics
import textwrap
from typing import TYPE_CHECKING, Any

from perflab.model import fmt_factors, fmt_level

if TYPE_CHECKING:
    from perflab.store import Store

METRICS = (("power_at_size", "Power@Size"), ("throughput_at_size", "Throughput@Size"),
           ("qphh_at_size", "QphH@Size"), ("load.total_s", "load test s"), ("maintenance_s", "maintenance s"))
QUERY_NAMES = [f"Q{n}" for n in range(1, 23)] + ["RF1", "RF2"]


def sections(store: Store, runs: list[dict[str, Any]]) -> list[Any]:
    from perflab.section import Section, Table, Text

    if not runs:
        return []
    metric_rows = []
    marks = store.run_marks() if hasattr(store, "run_marks") else {}
    query_rows: dict[str, list[Any]] = {name: [name] for name in QUERY_NAMES}
    power_times: dict[int, dict[str, float]] = {}
    stream_times: dict[int, dict[int, dict[str, float]]] = {}  # run -> stream -> query -> s
    for run in runs:
        m = {r["name"]: r["value"] for r in store.metrics(run["id"])}
        factors = fmt_factors(run["factors"], ", ")
        metric_rows.append([run["id"], factors, run["status"], *[m.get(k) for k, _ in METRICS],
                            ", ".join(dict.fromkeys([*marks.get(run["id"], []), *run["flags"]]))])
        by_query: dict[str, list[float]] = {}
        for q in store.queries(run["id"]):
            if q["status"] == "ok" and q["seconds"] is not None:
                by_query.setdefault(q["query"], []).append(q["seconds"])
                if q["stream"] == 0:
                    power_times.setdefault(run["id"], {})[q["query"]] = q["seconds"]
                else:
                    per_query = stream_times.setdefault(run["id"], {}).setdefault(q["stream"], {})
                    per_query[q["query"]] = per_query.get(q["query"], 0.0) + q["seconds"]
            elif q["query"] in query_rows:
                by_query.setdefault(q["query"] + "!", []).append(0.0)
        for name in QUERY_NAMES:
            times = by_query.get(name)
            cell = f"{statistics.fmean(times):.3f} ({min(times):.3f}-{max(times):.3f}, n={len(times)})" if times else "-"
            if name + "!" in by_query:
                cell += f" [{len(by_query[name + '!'])} not ok]"
            query_rows[name].append(cell)
    blocks: list[Any] = [
        Table(["run", "factors", "status", *[label for _, label in METRICS], "flags"], metric_rows,
              "TPC-H metrics per run (clause 5.4); runs flagged invalid-metrics have none; resumed: an earlier "
              "attempt was interrupted (its refresh pairs undone first), retried: an earlier attempt failed, fresh "
              "load: the data was loaded again for it"),
    ]
    labels = run_labels(runs)
    blocks.append(Table(["query", *[labels[r["id"]] for r in runs]], list(query_rows.values()),
                        "seconds: mean (min-max, n) over every stream the query ran in; columns by factor "
                        "values (repetition after #)"))
    if power_times:
        blocks.append(bars_figure({labels[r]: power_times[r] for r in sorted(power_times)}, "tpch-power-stream",
                                   "power test (stream 0): each query's and refresh function's time"))
    else:
        blocks.append(Text("no power test in these runs"))
    if stream_times:
        last = max(stream_times)
        streams = stream_times[last]
        blocks.append(bars_figure(
            {f"stream {n}" + (" (refresh)" if set(streams[n]) <= {"RF1", "RF2"} else ""): streams[n]
             for n in sorted(streams)}, "tpch-throughput-streams",
            f"throughput test of run {last} (the last run that had one): each query's time per stream; the "
            "refresh stream (numbered S + 1) shows the sum of its RF1 and of its RF2 times"))
    return [*headline(store, runs), Section("TPC-H runs", blocks)]


def headline(store: Store, runs: list[dict[str, Any]]) -> list[Any]:
    """Power@Size, Throughput@Size and QphH@Size per factor level over the
    repetitions (one row per level, not per run); a run's change from the
    first run is the report's degradation section."""
    from perflab.analysis import pivot
    from perflab.section import Section, Table, Text

    done = pivot.done(runs)
    values = {r["id"]: {m["name"]: m["value"] for m in store.metrics(r["id"])} for r in done}
    def metric(name: str) -> Any:
        return lambda run: values.get(run["id"], {}).get(name)

    # a metric no run has (Power@Size and QphH@Size of a throughput test alone, as the durability
    # study runs) is left out, not shown as a column of dashes
    columns = [(label, metric(key)) for key, label in METRICS[:3]
               if any(values.get(r["id"], {}).get(key) is not None for r in done)]
    if not columns:
        return []
    headers, rows = pivot.per_level(done, columns)
    labels = [label for label, _ in columns]
    named = " and ".join([", ".join(labels[:-1]), labels[-1]] if len(labels) > 1 else labels)
    return [Section("TPC-H: metrics per level", [
        Text("The spec's metrics (clause 5.4) per factor level over the repetitions. "
             + pivot.INTERVAL_NOTE.format(center="mean")),
        Table(headers, rows, f"TPC-H: {named} per factor level"),
    ], headline=True)]


def run_labels(runs: list[dict[str, Any]]) -> dict[int, str]:
    """Each run by what varied: its factor levels ("postgres", "duckdb"), with
    the repetition when the experiment repeats; "run N" without factors;
    "(failed)" after a failed run's, and its marks (resumed, retried, fresh
    load: Store.run_marks, which the report's data carries in its flags)."""
    from perflab.store import RUN_MARKS

    repeated = len({r["repetition"] for r in runs}) > 1
    out = {}
    for r in runs:
        label = ", ".join(fmt_level(v) for v in r["factors"].values())
        if not label:
            out[r["id"]] = f"run {r['id']}"
        else:
            out[r["id"]] = f"{label} #{r['repetition']}" if repeated else label
        # a failed run's queries are those it completed before it failed
        notes = ["failed"] if r.get("status") == "failed" else []
        notes += [f for f in r.get("flags", []) if f in RUN_MARKS]
        if notes:
            out[r["id"]] += f" ({', '.join(notes)})"
    return out


def bars_figure(groups: dict[str, dict[str, float]], name: str, caption: str,
                 names: list[str] | None = None) -> Any:
    """Grouped bars: for each query (`names`, default TPC-H's queries and
    refresh functions), one bar per group (a run, or a stream), on a log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from perflab.section import Figure

    names = names or QUERY_NAMES
    fig, ax = plt.subplots(figsize=(10, 3.5))
    width = 0.8 / len(groups)
    for i, (label, times) in enumerate(groups.items()):
        xs = [j + i * width for j in range(len(names))]
        ax.bar(xs, [times.get(q, 0.0) for q in names], width=width, label=label)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(names))], names, fontsize=7)
    ax.set_ylabel("seconds (log)")
    ax.set_yscale("log")
    if len(groups) <= 12:  # beside the bars, never over them; long labels wrapped
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles, [textwrap.fill(label, 40) for label in labels], fontsize=7, frameon=False,
                  loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return Figure(name, fig, caption)
