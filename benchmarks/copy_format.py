"""COPY's binary format against its text format, for the engine's parallel
loader (issue 17: "binary COPY where it is faster").

    .venv/bin/python benchmarks/copy_format.py [--sf 1] [--pairs 3] [--datasets tpch ssb tpcc]
        [--warehouses 4] [--formats text binary]

TPC-C is loaded whole (its nine tables at once, as the workload loads them),
at --warehouses. Run with PYTHONPATH pointing at an older build whose
`tpcc_load` has no `copy_format` (its own loader, before the shared one), and
`--datasets tpcc --formats text` times that loader the same way: the A/B of
the old loader against the shared one.

One managed PostgreSQL 15 with tpch_load.py's settings. Each pair loads every
table of each data set once in each format, into freshly created empty
tables (unlogged is not used: the load test loads logged tables), the formats
taking turns going first, with a CHECKPOINT before each load. Per table:
wall seconds, and CPU seconds split into the client's (this process: the
engine's generator and COPY threads, getrusage) and the server's (its process
tree from /proc, as tpch_load.py counts it). Then all tables of a data set at
once, as the load test runs them, with 2 connections.

--warmup pairs (default 1) run first and are not counted: a fresh server's
first loads also create the WAL segments that later ones recycle, which
made whichever format went first look slower.

Prints a table per data set: medians over the pairs, and binary/text ratios.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _common import run_main
from perflab import _engine
from perflab.targets.postgres import PostgresSettings, PostgresTarget
from perflab.workloads.ssb import schema as ssb_schema
from perflab.workloads.tpcc import schema as tpcc_schema
from perflab.workloads.tpch import schema as tpch_schema
from tpch_load import SERVER_SETTINGS, CpuClock

SCHEMAS = {"tpch": tpch_schema, "ssb": ssb_schema, "tpcc": tpcc_schema}
FORMATS = ("text", "binary")


def tpcc_load(conninfo: str, warehouses: float, tables: list[str], connections: int, fmt: str) -> None:
    kwargs = {"warehouses": int(warehouses), "jobs": connections, "seed": 1, "c_last": 100}
    try:
        _engine.tpcc_load(conninfo, **kwargs, copy_format=fmt)
    except TypeError:  # an engine from before the shared loader: text only
        if fmt != "text":
            raise SystemExit("this engine's tpcc_load has no copy_format; use --formats text") from None
        _engine.tpcc_load(conninfo, **kwargs)


LOADERS = {"tpch": _engine.tpch_load_postgres, "ssb": _engine.ssb_load_postgres, "tpcc": tpcc_load}


def own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1,
                    help="uncounted pairs first: the server's first loads also create its WAL segments")
    ap.add_argument("--connections", type=int, default=2)
    ap.add_argument("--warehouses", type=int, default=4, help="TPC-C's scale")
    ap.add_argument("--datasets", nargs="+", default=["tpch", "ssb", "tpcc"], choices=sorted(SCHEMAS))
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    args = ap.parse_args()
    formats = tuple(f for f in FORMATS if f in args.formats)
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
        for pair in range(-args.warmup, args.pairs):
            order = formats if pair % 2 == 0 else formats[::-1]
            for dataset in args.datasets:
                schema = SCHEMAS[dataset]
                conninfo = make_conninfo(endpoint.conninfo, dbname=f"bench_{dataset}")

                def fresh(tables: tuple[str, ...], conninfo: str = conninfo, schema=schema) -> None:
                    with psycopg.connect(conninfo, autocommit=True) as c:
                        if schema is tpcc_schema:  # its nine tables, always together
                            for sql in (*schema.drop_sql(), *schema.create_sql()):
                                c.execute(sql)
                        else:
                            for table in tables:
                                c.execute(f'drop table if exists "{table}"')
                                c.execute(schema.create_table(table))
                        c.execute("checkpoint")

                groups = [("all", tuple(schema.TABLES))]
                if dataset != "tpcc":
                    groups = [(t, (t,)) for t in schema.TABLES] + groups
                for name, tables in groups:
                    for fmt in order:
                        fresh(tables)
                        clock = CpuClock(target.data_dir)
                        own = own_cpu_s()
                        t0 = time.perf_counter()
                        scale = args.warehouses if dataset == "tpcc" else args.sf
                        LOADERS[dataset](conninfo, scale, list(tables), args.connections, fmt)
                        wall = time.perf_counter() - t0
                        client = own_cpu_s() - own
                        clock.done("load")
                        total = clock.steps()["load"][1]
                        if pair >= 0:
                            figures.setdefault((dataset, name, fmt), []).append((wall, client, total - client))
            print(f"pair {pair + 1} of {args.pairs} done" if pair >= 0 else "warm-up pair done", flush=True)
    finally:
        target.teardown()
        shutil.rmtree(scratch, ignore_errors=True)  # the cluster: GBs per run

    def med(dataset: str, name: str, fmt: str, i: int) -> float:
        return statistics.median(f[i] for f in figures[(dataset, name, fmt)])

    for dataset in args.datasets:
        scale = f"{args.warehouses} warehouses" if dataset == "tpcc" else f"SF {args.sf:g}"
        print(f"\n{dataset} {scale}, {args.connections} connections, medians of {args.pairs} pairs")
        print("| table | format | s | client CPU s | server CPU s |")
        print("|---|---|---:|---:|---:|")
        names = ["all"] if dataset == "tpcc" else [*SCHEMAS[dataset].TABLES, "all"]
        for name in names:
            for fmt in formats:
                print(f"| {name} | {fmt} | {med(dataset, name, fmt, 0):.2f} | {med(dataset, name, fmt, 1):.2f} "
                      f"| {med(dataset, name, fmt, 2):.2f} |")
            if len(formats) == 2:
                w = med(dataset, name, "binary", 0) / med(dataset, name, "text", 0)
                cpu = sum(med(dataset, name, "binary", i) for i in (1, 2)) / sum(
                    med(dataset, name, "text", i) for i in (1, 2))
                print(f"| {name} | binary/text | {w:.2f} | CPU {cpu:.2f} | |")
    return 0


if __name__ == "__main__":
    run_main(main)
