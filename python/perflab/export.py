"""Export of a store in long form, for pandas, polars or R.

Metrics: one row per (run, metric) with the run's factor values as columns:
run, combination, repetition, status, <factor paths...>, metric, value, unit.
Series (`--table series`): one row per sample: the run columns, then source,
name, t (seconds on the run's clock), value. Queries (`--table queries`): one
row per statement or query execution: stream, seq, query, started_s, seconds,
query_status, error, text, and the query's energy when collected (energy_j,
energy_above_idle_j, energy_json by component, energy_source) (`status` is
the run's, as in every table). Formats: csv and json to stdout, or to --output; parquet (binary,
through pyarrow) only to --output.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from perflab import search
from perflab.errors import UserError
from perflab.extras import install_hint
from perflab.model import fmt_level
from perflab.store import Store

FORMATS = ("csv", "json", "parquet")
TABLES = ("metrics", "series", "queries")


def metric_rows(store: Store) -> tuple[list[str], list[dict[str, Any]]]:
    columns, run_part = _run_columns(store)
    runs = {r["id"]: run_part(r) for r in store.runs()}
    rows = [
        runs[m["run_id"]] | {"metric": m["name"], "value": m["value"], "unit": m["unit"], "method": m["method"]}
        for m in store.metrics()
    ]
    # a search's answer belongs to no one run: its row has the run columns empty
    rows += [dict.fromkeys(columns) | row for row in search.export_rows(store)]
    return [*columns, "metric", "value", "unit", "method"], rows


def _run_columns(store: Store) -> tuple[list[str], Callable[[dict[str, Any]], dict[str, Any]]]:
    factors = store.experiment()["factors"]

    def run_part(run: dict[str, Any]) -> dict[str, Any]:
        row = {"run": run["id"], "combination": run["combination"], "repetition": run["repetition"],
               "status": run["status"]}
        # a table level as its label (the one the report and `show` print); other levels as they are
        row.update({f: fmt_level(v) if isinstance(v := run["factors"].get(f), dict) else v for f in factors})
        return row

    return ["run", "combination", "repetition", "status", *factors], run_part


def series_rows(store: Store) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """Every sample, run by run (a generator: a long run holds millions)."""
    columns, run_part = _run_columns(store)

    def rows() -> Iterator[dict[str, Any]]:
        for run in store.runs():
            head = run_part(run)
            for s in store.series(run["id"]):
                yield head | {"source": s["source"], "name": s["name"], "t": s["t"], "value": s["value"]}

    return [*columns, "source", "name", "t", "value"], rows()


def query_rows(store: Store) -> tuple[list[str], Iterator[dict[str, Any]]]:
    columns, run_part = _run_columns(store)
    runs = {r["id"]: run_part(r) for r in store.runs()}
    # the store's column name -> the export's: the run columns already hold a `status`
    fields = {"stream": "stream", "seq": "seq", "query": "query", "started_s": "started_s", "seconds": "seconds",
              "status": "query_status", "error": "error", "text": "text", "energy_j": "energy_j",
              "energy_above_idle_j": "energy_above_idle_j", "energy_json": "energy_json",
              "energy_source": "energy_source"}
    rows = (runs[q["run_id"]] | {name: q[f] for f, name in fields.items()} for q in store.queries())
    return [*columns, *fields.values()], rows


def table_rows(store: Store, table: str) -> tuple[list[str], Iterable[dict[str, Any]]]:
    rows: Iterable[dict[str, Any]]
    if table == "metrics":
        columns, rows = metric_rows(store)
    elif table == "series":
        columns, rows = series_rows(store)
    elif table == "queries":
        columns, rows = query_rows(store)
    else:
        raise UserError(f"--table {table}: no such table", f"choose one of: {', '.join(TABLES)}")
    # a name twice would lose one column in csv and json and break parquet
    twice = sorted({c for c in columns if columns.count(c) > 1})
    assert not twice, f"export of {table}: column names twice: {twice}"
    return columns, rows


def write_parquet(columns: list[str], rows: Iterable[dict[str, Any]], path: Path) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise UserError(f"--format parquet needs the Python library pyarrow, which does not import here ({exc})",
                        f"{install_hint('pyarrow')}, or export --format csv") from None
    data: dict[str, list[Any]] = {c: [] for c in columns}
    count = 0
    for row in rows:
        for c in columns:
            data[c].append(row.get(c))
        count += 1
    # factor values may mix types (1 and "auto"): such a column is written as text
    arrays = {}
    for c, values in data.items():
        try:
            arrays[c] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays[c] = pa.array([None if v is None else json.dumps(v) if not isinstance(v, str) else v
                                  for v in values], type=pa.string())
    pq.write_table(pa.table(arrays), path)
    return count


def export(store: Store, fmt: str, out: TextIO, table: str = "metrics", output: Path | None = None) -> int:
    """Write one table in one format to `output`, or to `out` (text formats only)."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt}: not a format", f"choose one of: {', '.join(FORMATS)}")
    columns, rows = table_rows(store, table)
    if fmt == "parquet":
        if output is None:
            raise UserError("--format parquet writes a binary file, not text to stdout",
                            "give --output FILE.parquet")
        return write_parquet(columns, rows, output)
    if output is None:
        return write(fmt, out, columns, rows)
    try:
        with open(output, "w", newline="", encoding="utf-8") as f:
            return write(fmt, f, columns, rows)
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror}", "give --output a writable path") from None


def write(fmt: str, out: TextIO, columns: list[str], rows: Iterable[dict[str, Any]]) -> int:
    """Rows as csv or json (streamed: `rows` may be a generator)."""
    count = 0
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
            count += 1
    elif fmt == "json":
        # one object per line inside one array: valid JSON, streamed row by row
        out.write("[")
        for row in rows:
            out.write(("\n" if count == 0 else ",\n") + json.dumps(row, default=str))
            count += 1
        out.write("\n]\n")
    else:  # the CLI only offers FORMATS
        raise ValueError(fmt)
    return count
