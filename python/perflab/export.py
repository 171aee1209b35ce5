"""Export of a store in long form, for pandas, polars or R.

Metrics: one row per (run, metric) with the run's factor values as columns:
run, combination, repetition, status, <factor paths...>, metric, value, unit.
"""

from __future__ import annotations

import csv
import json
from typing import Any, TextIO

from perflab.store import Store

FORMATS = ("csv", "json")


def metric_rows(store: Store) -> tuple[list[str], list[dict[str, Any]]]:
    factors = store.experiment()["factors"]
    runs = {r["id"]: r for r in store.runs()}
    columns = ["run", "combination", "repetition", "status", *factors, "metric", "value", "unit", "method"]
    rows = []
    for m in store.metrics():
        run = runs[m["run_id"]]
        row: dict[str, Any] = {
            "run": run["id"], "combination": run["combination"], "repetition": run["repetition"],
            "status": run["status"],
        }
        row.update({f: run["factors"].get(f) for f in factors})
        row.update(metric=m["name"], value=m["value"], unit=m["unit"], method=m["method"])
        rows.append(row)
    return columns, rows


def write(store: Store, fmt: str, out: TextIO) -> int:
    columns, rows = metric_rows(store)
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    elif fmt == "json":
        json.dump(rows, out, indent=1)
        out.write("\n")
    else:  # the CLI only offers FORMATS
        raise ValueError(fmt)
    return len(rows)
