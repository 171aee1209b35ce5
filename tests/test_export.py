"""perflab export: metrics, series and per-query tables as csv, json, parquet."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    assert set(rows[0]) == {"experiment", "experiment_id", "run", "combination", "repetition", "status",
                            "workload.clients", "target.settings.synchronous_commit", "workload.clients.level",
                            "target.settings.synchronous_commit.level", "source", "name", "t", "value", "unit",
                            "phase"}
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


@pytest.fixture(scope="module")
def levels_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 x 2 combinations x 3 repetitions with histograms; the second factor's
    levels are sizes, listed largest first; run 2 flagged, run 1 with a
    warm-up and a cool-down around its measured window."""
    from perflab.model import Event
    from perflab.store import Store

    out = build_store(tmp_path_factory.mktemp("levels") / "out", clients=[4, 1], sync=["1GB", "128MB"],
                      repetitions=3, series_points=10, flag_runs={2: ["noisy-host", "client-bound"]})
    store = Store.open(out)
    store.add_event(1, Event(3.0, "measure-start", "warm-up ended"))
    store.add_event(1, Event(8.0, "measure-end", "measured window ended"))
    store.close()
    return out


def _parquet(store_dir: Path, table: str, tmp_path: Path) -> Any:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / f"{table}.parquet"
    proc = _export(str(store_dir), "--table", table, "--format", "parquet", "--output", str(out))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return pq.read_table(out)


@pytest.mark.parametrize("table", ["metrics", "series", "queries", "histograms"])
def test_every_table_names_its_experiment_and_run(levels_dir: Path, tmp_path: Path, table: str) -> None:
    from perflab.store import Store

    store = Store.open(levels_dir)
    name, exp_id = store.experiment()["name"], store.experiment_id()
    store.close()
    rows = _parquet(levels_dir, table, tmp_path).to_pylist()
    assert {(r["experiment"], r["experiment_id"]) for r in rows} <= {(name, exp_id)}
    assert table == "queries" or (rows and all(isinstance(r["run"], int) for r in rows))


def test_factors_are_typed_with_their_order_and_sizes_in_bytes(levels_dir: Path, tmp_path: Path) -> None:
    table = _parquet(levels_dir, "metrics", tmp_path)
    assert str(table.schema.field("workload.clients").type) == "int64"
    rows = table.to_pylist()
    # the file's order, not the values' (4 before 1, "1GB" before "128MB")
    assert {(r["workload.clients"], r["workload.clients.level"]) for r in rows} == {(4, 1), (1, 2)}
    sizes = {(r["target.settings.synchronous_commit"], r["target.settings.synchronous_commit.level"],
              r["target.settings.synchronous_commit.bytes"]) for r in rows}
    assert sizes == {("1GB", 1, 2**30), ("128MB", 2, 128 * 2**20)}


def test_metrics_carry_the_runs_flags_and_parquet_the_experiment(levels_dir: Path, tmp_path: Path) -> None:
    table = _parquet(levels_dir, "metrics", tmp_path)
    flags = {r["run"]: r["flags"] for r in table.to_pylist()}
    assert flags[2] == "noisy-host,client-bound" and flags[1] == ""
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert meta["perflab.experiment"] == "synthetic" and meta["perflab.seed"] == "7"
    assert "kernel" in json.loads(meta["perflab.host"]) and "[factors]" in meta["perflab.spec"]
    assert meta["perflab.file"].endswith("experiment.toml")


def test_series_carry_unit_and_phase(levels_dir: Path, tmp_path: Path) -> None:
    rows = _parquet(levels_dir, "series", tmp_path).to_pylist()
    assert {r["unit"] for r in rows if r["name"] == "latency_p99_ms"} == {"ms"}
    assert {r["unit"] for r in rows if r["name"] == "us_pct"} == {"%"}
    phases = [(r["t"], r["phase"]) for r in rows if r["run"] == 1 and r["name"] == "tps"]
    assert phases == [(1.0, "warm-up"), (2.0, "warm-up"), (3.0, "measured"), (4.0, "measured"), (5.0, "measured"),
                      (6.0, "measured"), (7.0, "measured"), (8.0, "measured"), (9.0, "cool-down"),
                      (10.0, "cool-down")]
    assert {r["phase"] for r in rows if r["run"] == 2} == {"measured"}


def test_the_reports_figures_come_back_from_the_parquet_alone(levels_dir: Path, tmp_path: Path) -> None:
    """Per-level means and the pooled p99 of every combination (all its
    repetitions' histograms merged), from the exported files alone, equal
    the report's."""
    from perflab.report import data as report_data
    from perflab.report import latency
    from perflab.store import Store

    metrics = _parquet(levels_dir, "metrics", tmp_path).to_pylist()
    buckets = _parquet(levels_dir, "histograms", tmp_path).to_pylist()
    store = Store.open(levels_dir)
    d = report_data.load(store)
    checked = 0
    for combo in d.combinations:
        runs = set(combo.run_ids)
        tps = [r["value"] for r in metrics if r["run"] in runs and r["metric"] == "tps"]
        assert sum(tps) / len(tps) == pytest.approx(sum(d.values_of(combo, "tps")) / len(d.values_of(combo, "tps")))
        # pooled p99: counts summed per bucket over the runs, the first bucket reaching 99% of them
        counts: dict[float, int] = {}
        for r in buckets:
            if r["run"] in runs and r["histogram"] == "latency":
                counts[r["value_ms"]] = counts.get(r["value_ms"], 0) + r["count"]
        total, need, running = sum(counts.values()), None, 0
        need = max(1, int(0.99 * total + 0.5))
        for value in sorted(counts):
            running += counts[value]
            if running >= need:
                break
        blobs = [bytes(h["data"]) for run_id in combo.run_ids for h in store.histograms(run_id)]
        (p99_us,), count = latency.merged_percentiles(blobs, [99.0])
        assert count == total and value == pytest.approx(p99_us / 1000.0)
        checked += 1
    store.close()
    assert checked == 4


SEARCH_SPEC = """\
[experiment]
name = "probes"
[target]
kind = "nginx"
[workload]
kind = "http"
duration = "1s"
request_mix = [{ path = "/a" }, { path = "/b", method = "HEAD" }]
[search]
over = "workload.rate"
goal = "latency_p99_ms <= 5"
from = 100
to = 800
repetitions = 1
"""


def test_probes_carry_rate_and_verdict_and_mix_entries_their_request(tmp_path: Path) -> None:
    """A search's probes are rows of their runs (rate, met or why not), and an
    http mix's r1, r2 are named by method and path, in metrics and histograms."""
    from perflab import _engine
    from perflab.host import host_facts
    from perflab.model import Event, Histogram, RunResult
    from perflab.plan import PlannedRun
    from perflab.store import Store

    out = tmp_path / "out"
    store = Store.create(out, name="probes", spec_text=SEARCH_SPEC, spec_path=str(tmp_path / "e.toml"), seed=1,
                         factors=["workload.rate"], host=host_facts())
    p99 = {100: 1.0, 200: 2.0, 400: 9.0, 300: 4.0}
    store.add_plan([PlannedRun(i, i, 1, {"workload.rate": rate}) for i, rate in enumerate(p99, start=1)])
    for i, latency in enumerate(p99.values(), start=1):
        store.start_run(i, 0)
        result = RunResult()
        result.add_metric("latency_p99_ms", latency, "ms")
        result.add_metric("requests.r1", 10, "req")
        result.add_metric("latency.r2_p99_ms", latency, "ms")
        result.histograms.append(Histogram("latency.r2", "us", "hdr-v2-deflate", bytes(_engine.hdr_encode([900]))))
        result.events.append(Event(0.0, "request-mix", json.dumps({"r1": {"method": "GET", "path": "/a"},
                                                                    "r2": {"method": "HEAD", "path": "/b"}})))
        store.finish_run(i, result, status="done", seconds=1.0, target=None)
    store.close()
    rows = json.loads(_export(str(out), "--format", "json").stdout)
    probes = [r for r in rows if r["metric"] == "search.probe"]
    assert [(r["run"], r["value"], r["method"]) for r in probes] == [
        (1, 100, "met"), (2, 200, "met"), (3, 400, "missed: latency_p99_ms 9"), (4, 300, "met")]
    assert all(r["experiment"] == "probes" and r["workload.rate"] == r["value"] for r in probes)
    request = {r["metric"]: (r["request_method"], r["request_path"]) for r in rows if r["run"] == 1}
    assert request["requests.r1"] == ("GET", "/a") and request["latency.r2_p99_ms"] == ("HEAD", "/b")
    assert request["latency_p99_ms"] == (None, None)
    hist = json.loads(_export(str(out), "--table", "histograms", "--format", "json").stdout)
    assert {(r["histogram"], r["request_method"], r["request_path"]) for r in hist} == {("latency.r2", "HEAD", "/b")}
    assert [r["value_ms"] for r in hist if r["run"] == 1] == [pytest.approx(0.9, rel=0.01)]


def test_the_reports_latency_table_in_ms_is_the_exports_pooled_p99(levels_dir: Path, tmp_path: Path) -> None:
    """The report's percentile table says ms, as every other table and the
    export do, and its p99 of each combination is the one the exported
    histograms give."""
    import re
    import shutil

    from perflab.report import write_report
    from perflab.units import format_number

    out = tmp_path / "copy"
    shutil.copytree(levels_dir, out)
    html = write_report(out).read_text()
    header = re.search(r"<th>p99 \((\w+)\)</th>", html)
    assert header is not None and header.group(1) == "ms", "no p99 column in ms"
    buckets = _parquet(levels_dir, "histograms", tmp_path).to_pylist()
    for combo in {r["combination"] for r in buckets}:
        counts: dict[float, int] = {}
        for r in buckets:
            if r["combination"] == combo:
                counts[r["value_ms"]] = counts.get(r["value_ms"], 0) + r["count"]
        need, running = max(1, int(0.99 * sum(counts.values()) + 0.5)), 0
        for value in sorted(counts):
            running += counts[value]
            if running >= need:
                break
        assert f'<td class="num">{format_number(value)}</td>' in html, (combo, value)


def test_a_real_runs_series_include_the_warm_up_labelled_as_such(workdir: Path, run_cli) -> None:
    """A tpcb run on a managed PostgreSQL: its per-second series start in the
    warm-up, and the export says which samples are warm-up and which measured."""
    f = workdir / "warm.toml"
    f.write_text('[experiment]\nname = "warm"\n[target]\nkind = "postgres"\n[workload]\nkind = "tpcb"\nscale = 1\n'
                 'clients = 1\nduration = "3s"\nwarmup = "2s"\n[collect]\nvmstat = true\n')
    out = workdir / "out"
    run_cli("run", f, "--out", out, "--quiet", "--no-report", timeout=300)
    rows = json.loads(run_cli("export", out, "--table", "series", "--format", "json").stdout)
    tps = [(r["t"], r["phase"]) for r in rows if (r["source"], r["name"]) == ("tpcb", "tps")]
    assert {phase for _, phase in tps} == {"warm-up", "measured"}, tps
    assert max(t for t, p in tps if p == "warm-up") < min(t for t, p in tps if p == "measured")
    assert {r["unit"] for r in rows if r["name"] == "latency_p99_ms"} == {"ms"}
    assert "warm-up" in {r["phase"] for r in rows if r["source"] == "vmstat"}
