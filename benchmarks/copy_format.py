"""COPY's binary format against its text format, for the engine's parallel
loader (issue 17: "binary COPY where it is faster").

    .venv/bin/python benchmarks/copy_format.py [--sf 1] [--pairs 3] [--datasets tpch ssb]

One managed PostgreSQL 15 with tpch_load.py's settings. Each pair loads every
table of each data set once in each format, into freshly created empty
tables (unlogged is not used: the load test loads logged tables), the formats
taking turns going first, with a CHECKPOINT before each load. Per table:
wall seconds, and CPU seconds split into the client's (this process: the
engine's generator and COPY threads, getrusage) and the server's (its process
tree from /proc, as tpch_load.py counts it). Then all tables of a data set at
once, as the load test runs them, with 2 connections.

Prints a table per data set: medians over the pairs, and binary/text ratios.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from _common import run_main
from perflab import _engine
from perflab.targets.postgres import PostgresSettings, PostgresTarget
from perflab.workloads.ssb import schema as ssb_schema
from perflab.workloads.tpch import schema as tpch_schema
from tpch_load import SERVER_SETTINGS, CpuClock

SCHEMAS = {"tpch": tpch_schema, "ssb": ssb_schema}
LOADERS = {"tpch": _engine.tpch_load_postgres, "ssb": _engine.ssb_load_postgres}
FORMATS = ("text", "binary")


def own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--connections", type=int, default=2)
    ap.add_argument("--datasets", nargs="+", default=["tpch", "ssb"], choices=sorted(SCHEMAS))
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="perflab-bench-copy-", dir="/tmp"))
    scratch.chmod(0o755)
    target = PostgresTarget(PostgresSettings.model_validate({"kind": "postgres", "settings": SERVER_SETTINGS}),
                            scratch / "pg")
    # (dataset, table or "all", format) -> [(wall, client CPU, server CPU)]
    figures: dict[tuple[str, str, str], list[tuple[float, float, float]]] = {}
    try:
        endpoint = target.provision()
        import psycopg
        from psycopg.conninfo import make_conninfo

        assert target.data_dir is not None
        with endpoint.connect() as conn:
            for dataset in [*args.datasets, "warmup"]:
                conn.execute(f"create database bench_{dataset}")
        # tpchgen builds its distributions and date tables once per process
        # (0.8 s): not the first measured load's cost.
        warmup = make_conninfo(endpoint.conninfo, dbname="bench_warmup")
        with psycopg.connect(warmup, autocommit=True) as c:
            c.execute(tpch_schema.create_table("region"))
        _engine.tpch_load_postgres(warmup, 0.01, ["region"], 1, "text")
        for pair in range(args.pairs):
            order = FORMATS if pair % 2 == 0 else FORMATS[::-1]
            for dataset in args.datasets:
                schema = SCHEMAS[dataset]
                conninfo = make_conninfo(endpoint.conninfo, dbname=f"bench_{dataset}")

                def fresh(tables: tuple[str, ...], conninfo: str = conninfo, schema=schema) -> None:
                    with psycopg.connect(conninfo, autocommit=True) as c:
                        for table in tables:
                            c.execute(f'drop table if exists "{table}"')
                            c.execute(schema.create_table(table))
                        c.execute("checkpoint")

                groups = [(t, (t,)) for t in schema.TABLES] + [("all", tuple(schema.TABLES))]
                for name, tables in groups:
                    for fmt in order:
                        fresh(tables)
                        clock = CpuClock(target.data_dir)
                        own = own_cpu_s()
                        t0 = time.perf_counter()
                        LOADERS[dataset](conninfo, args.sf, list(tables), args.connections, fmt)
                        wall = time.perf_counter() - t0
                        client = own_cpu_s() - own
                        clock.done("load")
                        total = clock.steps()["load"][1]
                        figures.setdefault((dataset, name, fmt), []).append((wall, client, total - client))
            print(f"pair {pair + 1} of {args.pairs} done", flush=True)
    finally:
        target.teardown()

    def med(dataset: str, name: str, fmt: str, i: int) -> float:
        return statistics.median(f[i] for f in figures[(dataset, name, fmt)])

    for dataset in args.datasets:
        print(f"\n{dataset} SF {args.sf:g}, {args.connections} connections, medians of {args.pairs} pairs")
        print("| table | text s | binary s | binary/text s | text client CPU s | binary client CPU s "
              "| text server CPU s | binary server CPU s | binary/text CPU |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name in [*SCHEMAS[dataset].TABLES, "all"]:
            w_t, w_b = med(dataset, name, "text", 0), med(dataset, name, "binary", 0)
            c_t, c_b = med(dataset, name, "text", 1), med(dataset, name, "binary", 1)
            s_t, s_b = med(dataset, name, "text", 2), med(dataset, name, "binary", 2)
            ratio = (c_b + s_b) / (c_t + s_t) if c_t + s_t > 0 else float("nan")
            print(f"| {name} | {w_t:.2f} | {w_b:.2f} | {w_b / w_t:.2f} | {c_t:.2f} | {c_b:.2f} | {s_t:.2f} "
                  f"| {s_b:.2f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    run_main(main)
