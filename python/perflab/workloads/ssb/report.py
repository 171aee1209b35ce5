"""The SSB workload's report section, from the store only: each run's round
times, and each query's time per run (mean over its rounds). `query_section`
serves any workload that stores named queries (ssb, queries)."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from perflab.model import fmt_factors, natural_key
from perflab.workloads.ssb.queries import NAMES
from perflab.workloads.tpch.report import bars_figure, run_labels

if TYPE_CHECKING:
    from perflab.store import Store

METRICS = (("round_mean_s", "round s (mean)"), ("query_geomean_s", "query geomean s"),
           ("load.total_s", "load s"))


def sections(store: Store, runs: list[dict[str, Any]]) -> list[Any]:
    if not runs:
        return []
    return [query_section(store, runs, "Star Schema Benchmark", list(NAMES), METRICS,
                          "SSB per run: power-style rounds of the 13 queries in flight order", "ssb-queries")]


def query_section(store: Store, runs: list[dict[str, Any]], title: str, names: list[str] | None,
                  metrics: tuple[tuple[str, str], ...], caption: str, figure: str) -> Any:
    """Metrics per run, each query's time per run (mean, min-max, n, failures)
    and bars of the means; `names` None: every query stored, in name order."""
    from perflab.section import Section, Table

    if names is None:
        names = sorted({q["query"] for r in runs for q in store.queries(r["id"])}, key=natural_key)  # Q2 before Q10
    labels = run_labels(runs)
    metric_rows = []
    query_rows: dict[str, list[Any]] = {name: [name] for name in names}
    means: dict[str, dict[str, float]] = {}
    for run in runs:
        m = {r["name"]: r["value"] for r in store.metrics(run["id"])}
        metric_rows.append([run["id"], fmt_factors(run["factors"], ", "), run["status"],
                            *[m.get(k) for k, _ in metrics], ", ".join(run["flags"])])
        times: dict[str, list[float]] = {}
        failed: dict[str, int] = {}
        for q in store.queries(run["id"]):
            if q["status"] == "ok" and q["seconds"] is not None:
                times.setdefault(q["query"], []).append(q["seconds"])
            else:
                failed[q["query"]] = failed.get(q["query"], 0) + 1
        means[labels[run["id"]]] = {name: statistics.fmean(v) for name, v in times.items()}
        for name in names:
            v = times.get(name)
            cell = f"{statistics.fmean(v):.3f} ({min(v):.3f}-{max(v):.3f}, n={len(v)})" if v else "-"
            if name in failed:
                cell += f" [{failed[name]} not ok]"
            query_rows[name].append(cell)
    blocks: list[Any] = [
        Table(["run", "factors", "status", *[label for _, label in metrics], "flags"], metric_rows, caption),
        Table(["query", *[labels[r["id"]] for r in runs]], list(query_rows.values()),
              "seconds: mean (min-max, n) over the run's executions of the query"),
        bars_figure(means, figure, "each query's mean time per run", names),
    ]
    return Section(title, blocks)
