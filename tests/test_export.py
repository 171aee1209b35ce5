"""perflab export: metrics, series and per-query tables as csv, json, parquet."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from synthetic_store import build_store


def _export(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perflab.cli", "export", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 2 x 1 combinations x 2 repetitions, run 3 failed: 3 done runs
    return build_store(tmp_path_factory.mktemp("export") / "out", clients=[1, 2], sync=["on"], repetitions=2,
                       series_points=4, queries=3, fail_runs=(3,), histograms=False)


def test_series_as_csv_one_row_per_sample_with_the_factors(store_dir: Path) -> None:
    proc = _export(str(store_dir), "--table", "series")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    # per done run: 4 points x (2 sql series + 5 vmstat series)
    assert len(rows) == 3 * 4 * 7
    assert set(rows[0]) == {"run", "combination", "repetition", "status", "workload.clients",
                            "target.settings.synchronous_commit", "source", "name", "t", "value"}
    tps = [r for r in rows if r["name"] == "tps" and r["run"] == "1"]
    assert [float(r["t"]) for r in tps] == [2.5, 5.0, 7.5, 10.0]


def test_queries_as_json(store_dir: Path) -> None:
    proc = _export(str(store_dir), "--table", "queries", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == 3 * 3
    assert rows[0]["query"] == "q1" and rows[0]["text"] == "SELECT 1" and rows[0]["query_status"] == "ok"
    assert rows[0]["status"] == "done"  # the run's status, as in every table
    assert rows[0]["workload.clients"] == 1


@pytest.mark.parametrize("table", ["metrics", "series", "queries"])
def test_every_table_in_every_format_reads_back_whole(store_dir: Path, tmp_path: Path, table: str) -> None:
    """Same columns, each once, and the same rows in csv, json and parquet;
    the run's status and a query's status kept apart."""
    pq = pytest.importorskip("pyarrow.parquet")
    from perflab.store import Store

    store = Store.open(store_dir)
    runs = {r["id"]: r for r in store.runs()}
    expected_rows = {"metrics": len(store.metrics()), "queries": len(store.queries()),
                     "series": sum(len(store.series(r)) for r in runs)}[table]
    store.close()

    proc = _export(str(store_dir), "--table", table, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    header = next(csv.reader(io.StringIO(proc.stdout)))
    assert len(header) == len(set(header)), header
    csv_rows = list(csv.DictReader(io.StringIO(proc.stdout)))

    proc = _export(str(store_dir), "--table", table, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    json_rows = json.loads(proc.stdout)

    out = tmp_path / f"{table}.parquet"
    proc = _export(str(store_dir), "--table", table, "--format", "parquet", "--output", str(out))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    parquet = pq.read_table(out)

    assert len(csv_rows) == len(json_rows) == parquet.num_rows == expected_rows > 0
    assert list(json_rows[0]) == header == parquet.column_names
    assert [r["status"] for r in json_rows] == [runs[r["run"]]["status"] for r in json_rows]
    assert [r["status"] for r in csv_rows] == [r["status"] for r in json_rows] == parquet.column("status").to_pylist()
    if table == "queries":
        assert {r["query_status"] for r in json_rows} == {"ok"}
        assert parquet.column("query_status").to_pylist() == [r["query_status"] for r in csv_rows]


def test_metrics_parquet_needs_an_output_file(store_dir: Path, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    bad = _export(str(store_dir), "--format", "parquet")
    assert bad.returncode == 2
    assert "--output" in bad.stderr and "Traceback" not in bad.stderr
    out = tmp_path / "metrics.parquet"
    ok = _export(str(store_dir), "--format", "parquet", "--output", str(out))
    assert ok.returncode == 0, ok.stderr
    table = pq.read_table(out)
    csv_rows = list(csv.DictReader(io.StringIO(_export(str(store_dir)).stdout)))
    assert table.num_rows == len(csv_rows) == 3 * 5  # 5 metrics per done run
    assert table.column("metric").to_pylist() == [r["metric"] for r in csv_rows]
    assert table.column("value").to_pylist() == pytest.approx([float(r["value"]) for r in csv_rows])


def test_series_parquet_round_trips(store_dir: Path, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "series.parquet"
    assert _export(str(store_dir), "--table", "series", "--format", "parquet", "--output", str(out)).returncode == 0
    table = pq.read_table(out)
    assert table.num_rows == 3 * 4 * 7
    assert str(table.schema.field("t").type) == "double"


def test_a_version_1_store_is_upgraded_in_place_and_keeps_its_queries(tmp_path: Path) -> None:
    """Schema 2 added query.started_s, schema 3 the attempt table, schema 4
    the queries' energy; a store
    written before still opens, exports and keeps every row (its queries have
    no start time)."""
    import sqlite3

    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=1, series_points=2, queries=3,
                      fail_runs=(), histograms=False)
    db = sqlite3.connect(out / "perflab.sqlite")
    with db:
        db.execute("ALTER TABLE query DROP COLUMN started_s")
        for column in ("energy_j", "energy_above_idle_j", "energy_json", "energy_source"):  # schema 4
            db.execute(f"ALTER TABLE query DROP COLUMN {column}")
        db.execute("DROP TABLE attempt")
        db.execute("DROP TABLE leftover")  # schema 6
        db.execute("DELETE FROM meta WHERE key = 'experiment_id'")
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.close()
    proc = _export(str(out), "--table", "queries", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == 3 and all(r["started_s"] is None and r["energy_j"] is None for r in rows)
    db = sqlite3.connect(out / "perflab.sqlite")
    from perflab.store import SCHEMA_VERSION

    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    assert db.execute("SELECT count(*) FROM leftover").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM attempt").fetchone() == (0,)
    db.close()
