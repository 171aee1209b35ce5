"""Export of a store in long form, for pandas, polars, DuckDB or R: each
table stands on its own.

Every table starts with the run columns: experiment (its name), experiment_id,
run, combination, repetition, status, then each factor path with its level
(numbers as numbers; a table level as its label), `<path>.level` (the level's
place in the file's order, 1-based: the order the report uses) and, for a
factor whose levels are sizes ("128MB"), `<path>.bytes`.

Metrics: one row per (run, metric): the run columns, flags (the run's, comma
separated: noisy-host, client-bound, ...), metric, value, unit, method,
request_method and request_path (a request mix's entry the metric is of: an
http run's requests.r2, latency.r2_p99_ms), description; a
search's probes as `search.probe` rows (value: the rate, method: met or why
not) and its answer as rows of no run. Series (`--table series`): one row per
sample: the run columns, then source, name, t (seconds on the run's clock),
value, unit (from the name's suffix: _ms, _s, _pct, ...; "" when it has none)
and phase (warm-up, measured or cool-down, from the run's measured window).
Histograms (`--table histograms`): every stored HDR histogram, one row per
bucket: the run columns, histogram, value_ms (the bucket's value, as the
engine's percentiles report it), count; merge runs by summing counts per
value (the histograms share one bucket layout), so any percentile the report
prints can be recomputed. Parquet files carry the experiment in their
key-value metadata (perflab.experiment, .experiment_id, .file, .seed, .host,
.spec). Queries (`--table queries`): one
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

from perflab import search, tomldoc
from perflab.errors import UserError
from perflab.extras import install_hint
from perflab.model import fmt_level, without_label
from perflab.store import Store
from perflab.units import parse_size_bytes

FORMATS = ("csv", "json", "parquet")
TABLES = ("metrics", "series", "queries", "histograms")
# A series' unit from its name's suffix (perflab's naming: latency_p99_ms, cpu_pct).
SERIES_UNITS = (("_ms", "ms"), ("_us", "us"), ("_s", "s"), ("_pct", "%"), ("_mbps", "Mb/s"), ("_kbps", "kB/s"),
                ("_per_s", "1/s"), ("_bytes", "B"), ("_kb", "kB"), ("_mb", "MB"), ("_j", "J"), ("_w", "W"),
                ("_watts", "W"))


def metric_rows(store: Store) -> tuple[list[str], list[dict[str, Any]]]:
    columns, run_part = _run_columns(store)
    runs = {r["id"]: run_part(r) | {"flags": ",".join(r["flags"])} for r in store.runs()}
    mixes = request_mixes(store)
    rows = [
        runs[m["run_id"]] | {"metric": m["name"], "value": m["value"], "unit": m["unit"], "method": m["method"]}
        | _request(mixes.get(m["run_id"]), m["name"]) | {"description": m["description"]}
        for m in store.metrics()
    ]
    # a search's probes (their run's rate and verdict), and its answer, which belongs to no one run
    experiment = {c: runs[next(iter(runs))][c] for c in ("experiment", "experiment_id")} if runs else {}
    columns = [*columns, "flags", "metric", "value", "unit", "method", "request_method", "request_path",
               "description"]
    rows += [dict.fromkeys(columns) | experiment | (runs.get(row.get("run"), {}) if row.get("run") else {}) | row
             for row in search.export_rows(store)]
    return columns, rows


def request_mixes(store: Store) -> dict[int, dict[str, dict[str, Any]]]:
    """Each run's request mix as its workload recorded it (an http run's
    "request-mix" event): request type (r1, r2, ...) -> method, path, weight."""
    out = {}
    for e in store.events():
        if e["kind"] == "request-mix" and e["run_id"] is not None:
            try:
                out[e["run_id"]] = json.loads(e["message"])
            except ValueError:
                continue
    return out


def _request(mix: dict[str, dict[str, Any]] | None, name: str) -> dict[str, Any]:
    """The method and path of the mix entry a metric or histogram is of
    ("requests.r2", "latency.r2_p99_ms", "latency.r2"); none for the others."""
    part = name.split(".", 1)[1] if "." in name else ""
    entry = next((v for k, v in (mix or {}).items() if part == k or part.startswith(k + "_")), None)
    return {"request_method": entry.get("method"), "request_path": entry.get("path")} if entry else \
        {"request_method": None, "request_path": None}


def _run_columns(store: Store) -> tuple[list[str], Callable[[dict[str, Any]], dict[str, Any]]]:
    info = store.experiment()
    factors = info["factors"]
    head = {"experiment": info["name"], "experiment_id": store.experiment_id()}
    runs = store.runs()
    order = _level_order(info["spec_text"], factors, runs)
    sizes = [f for f in factors if _sizes({_level(r["factors"].get(f)) for r in runs})]

    def run_part(run: dict[str, Any]) -> dict[str, Any]:
        row = head | {"run": run["id"], "combination": run["combination"], "repetition": run["repetition"],
                      "status": run["status"]}
        # a table level as its label (the one the report and `show` print); other levels as they are
        row.update({f: _level(run["factors"].get(f)) for f in factors})
        row.update({f"{f}.level": order[f].get(_key(run["factors"].get(f))) for f in factors})
        row.update({f"{f}.bytes": _bytes(run["factors"].get(f)) for f in sizes})
        return row

    columns = [*head, "run", "combination", "repetition", "status", *factors, *(f"{f}.level" for f in factors),
               *(f"{f}.bytes" for f in sizes)]
    return columns, run_part


def _level(value: object) -> object:
    return fmt_level(value) if isinstance(value, dict) else value


def _key(value: object) -> str:
    return json.dumps(without_label(value), sort_keys=True, default=str)


def _level_order(spec_text: str, factors: list[str], runs: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Each factor's levels -> their place in the file's list (1-based); a
    path the file does not list (a search's rate): by value."""
    try:
        listed = tomldoc.parse(spec_text)[0].get("factors") or {}
    except tomldoc.TomlProblem:
        listed = {}
    out = {}
    for f in factors:
        levels = listed.get(f) if isinstance(listed, dict) and isinstance(listed.get(f), list) else None
        if levels is None:
            seen = {_key(r["factors"].get(f)): r["factors"].get(f) for r in runs if f in r["factors"]}
            levels = sorted(seen.values(), key=lambda v: (not isinstance(v, int | float), v if isinstance(
                v, int | float) else str(v)))
        out[f] = {_key(v): i for i, v in enumerate(levels, start=1)}
    return out


def _sizes(levels: set[object]) -> bool:
    """Levels that are all sizes with a unit ("128MB", "1GB")."""
    if not levels or not all(isinstance(v, str) and any(c.isalpha() for c in v) for v in levels):
        return False
    return all(_bytes(v) is not None for v in levels)


def _bytes(value: object) -> int | None:
    try:
        return parse_size_bytes(value)
    except ValueError:
        return None


def series_rows(store: Store) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """Every sample, run by run (a generator: a long run holds millions)."""
    columns, run_part = _run_columns(store)
    windows: dict[int, dict[str, float]] = {}
    for e in store.events():
        if e["kind"] in ("measure-start", "measure-end") and e["run_id"] is not None and e["t"] is not None:
            windows.setdefault(e["run_id"], {})[e["kind"]] = e["t"]

    def rows() -> Iterator[dict[str, Any]]:
        for run in store.runs():
            head = run_part(run)
            window = windows.get(run["id"], {})
            for s in store.series(run["id"]):
                yield head | {"source": s["source"], "name": s["name"], "t": s["t"], "value": s["value"],
                              "unit": series_unit(s["name"]), "phase": _phase(s["t"], window)}

    return [*columns, "source", "name", "t", "value", "unit", "phase"], rows()


def series_unit(name: str) -> str:
    last = name.rsplit(".", 1)[-1].lower()
    return next((unit for suffix, unit in SERIES_UNITS if last.endswith(suffix)), "")


def _phase(t: float, window: dict[str, float]) -> str:
    """A sample's phase in its run: before the measured window (warm-up),
    in it, or after it (cool-down); a run that stored no window: measured."""
    start, end = window.get("measure-start"), window.get("measure-end")
    if start is not None and t < start - 1e-6:
        return "warm-up"
    if end is not None and t > end + 1e-6:
        return "cool-down"
    return "measured"


def histogram_rows(store: Store) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """Every stored HDR histogram, a row per bucket that holds values."""
    from perflab import _engine

    columns, run_part = _run_columns(store)
    mixes = request_mixes(store)

    def rows() -> Iterator[dict[str, Any]]:
        for run in store.runs():
            head = run_part(run)
            for h in store.histograms(run["id"]):
                scale = {"us": 1e-3, "ms": 1.0, "s": 1e3, "ns": 1e-6}.get(h["unit"])
                if h["encoding"] != "hdr-v2-deflate" or scale is None:
                    continue  # an encoding or unit this engine does not read (the report skips it too)
                request = _request(mixes.get(run["id"]), h["name"])
                for value, count in _engine.hdr_values(bytes(h["data"])):
                    yield head | {"histogram": h["name"], **request, "value_ms": value * scale, "count": count}

    return [*columns, "histogram", "request_method", "request_path", "value_ms", "count"], rows()


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
    elif table == "histograms":
        columns, rows = histogram_rows(store)
    else:
        raise UserError(f"--table {table}: no such table", f"choose one of: {', '.join(TABLES)}")
    # a name twice would lose one column in csv and json and break parquet
    twice = sorted({c for c in columns if columns.count(c) > 1})
    assert not twice, f"export of {table}: column names twice: {twice}"
    return columns, rows


def parquet_metadata(store: Store) -> dict[str, str]:
    """The experiment, in a Parquet file's key-value metadata: the file
    stands on its own."""
    info = store.experiment()
    return {"perflab.experiment": info["name"], "perflab.experiment_id": store.experiment_id(),
            "perflab.file": info.get("spec_path") or "", "perflab.seed": str(info["seed"]),
            "perflab.created_at": info["created_at"], "perflab.host": json.dumps(info["host"], default=str),
            "perflab.factors": json.dumps(info["factors"]), "perflab.spec": info["spec_text"]}


def write_parquet(columns: list[str], rows: Iterable[dict[str, Any]], path: Path,
                  metadata: dict[str, str] | None = None) -> int:
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
    table = pa.table(arrays)
    if metadata:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    pq.write_table(table, path)
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
        return write_parquet(columns, rows, output, parquet_metadata(store))
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
