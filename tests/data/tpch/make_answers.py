"""Make the TPC-H reference answers kept in tests/data/tpch/answers/.

    .venv/bin/python tests/data/tpch/make_answers.py SF POSTGRES_CONNINFO

loads the data at SF into DuckDB (a temporary file) and into the PostgreSQL
database named by the conninfo (tables are dropped and created there), runs
the 22 queries with the spec's validation parameters on each, and writes
answers/sf<SF>/duckdb/qNN.out and answers/sf<SF>/postgres/qNN.out.

Each engine's answers are the reference for the *other* engine's runs
(tests/test_tpch.py), so a perflab bug that hits one dialect's execution or
loading path shows up as a mismatch. Before writing, the two engines' answers
are compared with each other under the spec's tolerances, and the script
refuses to write answers they disagree on.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from perflab.context import RunContext
from perflab.targets.duckdb import DuckDbSettings, DuckDbTarget
from perflab.targets.postgres import PostgresEndpoint
from perflab.workloads.tpch import TpchSettings, TpchWorkload, answers

HERE = Path(__file__).resolve().parent


def validation_answers(endpoint, sf: float, out: Path) -> None:
    workload = TpchWorkload(TpchSettings(kind="tpch", scale_factor=sf, seed=1, tests=["power"], validation=True))
    with tempfile.TemporaryDirectory() as d:
        ctx = RunContext(run_number=1, run_dir=Path(d), t0_ns=time.monotonic_ns())
        workload.prepare(endpoint, ctx)
        workload.run(endpoint, ctx)
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted((Path(d) / "answers").glob("q*.out")):
            (out / f.name).write_text(f.read_text())


def main() -> int:
    sf, conninfo = float(sys.argv[1]), sys.argv[2]
    base = HERE / "answers" / f"sf{sf:g}"
    with tempfile.TemporaryDirectory() as d:
        target = DuckDbTarget(DuckDbSettings(kind="duckdb"), Path(d))
        try:
            validation_answers(target.provision(), sf, Path(d) / "duckdb")
        finally:
            target.teardown()
        pg = PostgresEndpoint(conninfo=conninfo, host="", port=0, user="", dbname="")
        validation_answers(pg, sf, Path(d) / "postgres")
        disagree = []
        for q in range(1, 23):
            duck = (Path(d) / "duckdb" / f"q{q:02d}.out").read_text()
            pg_rows = [tuple(r) for r in answers.parse_answer((Path(d) / "postgres" / f"q{q:02d}.out").read_text())[1]]
            check = answers.compare(q, pg_rows, duck)
            if not check.passed:
                disagree.append(f"Q{q}: {check.detail}")
        if disagree:
            print("the engines disagree; nothing written:\n  " + "\n  ".join(disagree))
            return 1
        for engine in ("duckdb", "postgres"):
            (base / engine).mkdir(parents=True, exist_ok=True)
            for f in sorted((Path(d) / engine).glob("q*.out")):
                (base / engine / f.name).write_text(f.read_text())
    print(f"wrote {base}/duckdb and {base}/postgres")
    return 0


if __name__ == "__main__":
    sys.exit(main())
