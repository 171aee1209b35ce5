"""Which bulk path loads TPC-H into DuckDB fastest, generation included.

    .venv/bin/python benchmarks/duckdb_load_paths.py [--sf 1] [--repeat 2]

Issue 5 asks for DuckDB's fastest bulk path. Each path starts from nothing
and ends with the eight tables filled (row counts checked equal), in a fresh
database file, with the same CREATE TABLEs (perflab's schema.py):

- arrow: perflab's own load: the engine's tpchgen Arrow stream per table,
  registered with DuckDB and inserted (no text, no files). This is what the
  tpch workload does.
- tbl + COPY: tpchgen-cli (PyPI, the same generator) writes dbgen's .tbl
  files, then DuckDB's `COPY table FROM 'x.tbl' (DELIMITER '|')`, the
  DBT-3-style route.
- parquet + INSERT: tpchgen-cli writes Parquet (its default Snappy), then
  `INSERT INTO table SELECT * FROM read_parquet(...)`.

Each measurement runs in a new Python process, so every path pays the
generator's one-time set-up (tpchgen builds its text pool on first use, about
a second) as a user's first load does. Times are wall clock, best of
--repeat, with generation and load split where the path has two steps. Both
generators use every core; DuckDB uses its default threads.

Also tried for the arrow path, and not kept: inserting the stream as
in-memory Arrow tables of 1M rows instead of scanning the stream (three
alternating pairs at SF 1 and at SF 0.1: no difference beyond 3%).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from perflab.targets.duckdb import DuckDbEndpoint
from perflab.workloads.tpch import schema

TPCHGEN_CLI = Path(sys.executable).parent / "tpchgen-cli"


def fresh(db_path: Path) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect(str(db_path))
    for table in schema.TABLES:
        conn.execute(schema.create_table(table))
    return conn


def counts(conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    return {t: int(conn.execute(f"select count(*) from {t}").fetchall()[0][0]) for t in schema.TABLES}


def path_arrow(sf: float, scratch: Path) -> tuple[dict[str, float], dict[str, int]]:
    conn = fresh(scratch / "arrow.duckdb")
    t = time.perf_counter()
    DuckDbEndpoint(path=str(scratch / "arrow.duckdb"), database=conn).bulk_load(
        schema.DATA, sf, list(schema.TABLES), os.cpu_count() or 1)
    steps = {"generate + load": time.perf_counter() - t}
    return steps, counts(conn)


def _files_then_load(fmt: str, load_sql: str, sf: float, scratch: Path) -> tuple[dict[str, float], dict[str, int]]:
    """tpchgen-cli writes `fmt` files, then `load_sql` (with {table} and
    {file}) loads each table from its file."""
    files = scratch / fmt
    t = time.perf_counter()
    subprocess.run([str(TPCHGEN_CLI), fmt, "-s", f"{sf:g}", "--output-dir", str(files)], check=True,
                   capture_output=True)
    generate_s = time.perf_counter() - t
    conn = fresh(scratch / f"{fmt}.duckdb")
    t = time.perf_counter()
    for table in schema.TABLES:
        conn.execute(load_sql.format(table=table, file=files / f"{table}.{fmt}"))
    return {"generate": generate_s, "load": time.perf_counter() - t}, counts(conn)


def path_tbl(sf: float, scratch: Path) -> tuple[dict[str, float], dict[str, int]]:
    # dbgen's lines end with '|'; DuckDB's CSV reader accepts that as it is
    # (no sed pass as PostgreSQL's COPY needs), and the row counts are checked
    return _files_then_load("tbl", "copy {table} from '{file}' (delimiter '|', header false)", sf, scratch)


def path_parquet(sf: float, scratch: Path) -> tuple[dict[str, float], dict[str, int]]:
    return _files_then_load("parquet", "insert into {table} select * from read_parquet('{file}')", sf, scratch)


PATHS: dict[str, Callable[[float, Path], tuple[dict[str, float], dict[str, int]]]] = {
    "arrow (perflab)": path_arrow,
    "tbl + COPY": path_tbl,
    "parquet + INSERT": path_parquet,
}


def measure(name: str, sf: float) -> tuple[dict[str, float], dict[str, int]]:
    """One path in a new process; (steps, row counts)."""
    proc = subprocess.run([sys.executable, __file__, "--sf", f"{sf:g}", "--one", name], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["steps"], out["rows"]


def one(name: str, sf: float) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="perflab-duckdb-paths-"))
    try:
        steps, rows = PATHS[name](sf, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps({"steps": steps, "rows": rows}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--one", choices=list(PATHS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not TPCHGEN_CLI.exists():
        print(f"{TPCHGEN_CLI} is missing: install tpchgen-cli into the venv (pip install tpchgen-cli)",
              file=sys.stderr)
        return 2
    if args.one:
        return one(args.one, args.sf)
    best: dict[str, tuple[float, dict[str, float]]] = {}
    expected: dict[str, int] | None = None
    load_avg = os.getloadavg()[0]
    for rep in range(args.repeat):
        for name in PATHS:
            try:
                steps, rows = measure(name, args.sf)
            except RuntimeError as exc:
                print(f"failed: {exc}", file=sys.stderr)
                return 1
            if expected is None:
                expected = rows
            elif rows != expected:
                print(f"{name}: row counts differ: {rows} vs {expected}", file=sys.stderr)
                return 1
            total = sum(steps.values())
            print(f"rep {rep + 1} {name}: {total:.2f} s {steps}", flush=True)
            if name not in best or total < best[name][0]:
                best[name] = (total, steps)
    assert expected is not None
    print(f"\nSF {args.sf:g}, best of {args.repeat}, {sum(expected.values()):,} rows, load average "
          f"{load_avg:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print("| path | generate (s) | load (s) | total (s) | vs arrow |")
    print("| --- | ---: | ---: | ---: | ---: |")
    base = best["arrow (perflab)"][0]
    for name, (total, steps) in best.items():
        gen = steps.get("generate")
        load = steps.get("load")
        cells = [f"{gen:.2f}" if gen is not None else "-", f"{load:.2f}" if load is not None else "(streamed)"]
        print(f"| {name} | {cells[0]} | {cells[1]} | {total:.2f} | {total / base:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
