"""`/metrics`: the experiment's latest run in Prometheus's text exposition
format (version 0.0.4, which OpenMetrics parsers read too), so that a
Prometheus scrapes it into a user's Grafana beside the server's own figures.

Families (every sample labelled with the experiment, and a run's with its
number and its factor levels, a factor's path as the label's name: dots as
underscores, `workload.clients` -> `workload_clients`):

- perflab_runs{state}: the plan's runs by state (planned, running, done, failed);
- perflab_current_run: the number of the run in flight, else of the last that ran;
- perflab_run_series{source, series}: each per-second series' latest value in that run
  (its rate, p99 and errors from the driver, the collectors' figures);
- perflab_run_series_seconds{source, series}: when on the run's clock that value was taken;
- perflab_run_metric{metric, unit}: the run's figures, once it has finished.
"""

from __future__ import annotations

import math
import re
from typing import Any

from perflab.model import fmt_level
from perflab.report.data import ReportData
from perflab.store import RUN_STATUSES

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LABEL_NAME = re.compile(r"[^a-zA-Z0-9_]")
# Labels perflab sets itself: a factor never takes one of these names.
RESERVED = {"experiment", "run", "state", "source", "series", "metric", "unit"}


def label_name(path: str) -> str:
    """A factor path as a label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)."""
    name = _LABEL_NAME.sub("_", path).lstrip("_") or "factor"
    return f"factor_{name}" if name[0].isdigit() or name in RESERVED else name



def escape(value: str) -> str:
    """A label value as the text format writes it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in pairs.items()) + "}"


def number(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render(d: ReportData, run_id: int | None,
           latest: dict[tuple[str, str], tuple[float, float | None]]) -> str:
    exp = {"experiment": str(d.experiment["name"])}
    lines = ["# HELP perflab_runs Runs of the experiment's plan by state.", "# TYPE perflab_runs gauge"]
    counts = {s: 0 for s in RUN_STATUSES}
    for r in d.runs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    lines += [f"perflab_runs{labels({**exp, 'state': s})} {n}" for s, n in counts.items()]
    if run_id is None:
        return "\n".join(lines) + "\n"
    run = d.runs_by_id[run_id]
    lines += ["# HELP perflab_current_run The run in flight, else the last that ran.",
              "# TYPE perflab_current_run gauge", f"perflab_current_run{labels(exp)} {run_id}"]
    base = {**exp, "run": str(run_id)}
    for path, value in run["factors"].items():
        base.setdefault(label_name(path), fmt_level(value))
    lines += ["# HELP perflab_run_series The latest per-second value of each series of the current run.",
              "# TYPE perflab_run_series gauge"]
    lines += [f"perflab_run_series{labels({**base, 'source': s, 'series': n})} {number(v)}"
              for (s, n), (_, v) in sorted(latest.items())]
    lines += ["# HELP perflab_run_series_seconds When the latest value was taken, in seconds on the run's clock.",
              "# TYPE perflab_run_series_seconds gauge"]
    lines += [f"perflab_run_series_seconds{labels({**base, 'source': s, 'series': n})} {number(t)}"
              for (s, n), (t, _) in sorted(latest.items())]
    values: dict[str, Any] = d.values.get(run_id, {})
    lines += ["# HELP perflab_run_metric The current run's figures, once it has finished.",
              "# TYPE perflab_run_metric gauge"]
    lines += [f"perflab_run_metric{labels({**base, 'metric': m, 'unit': d.metrics[m].unit})} {number(v)}"
              for m, v in sorted(values.items())]
    return "\n".join(lines) + "\n"
