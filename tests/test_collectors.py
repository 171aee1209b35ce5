"""Collectors against the real system: vmstat and iostat over the same window,
a real PostgreSQL for process roles and statistics, a fake powercap tree for
RAPL (this machine has none), and the telemetry figure from a real store."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from perflab.collectors import COLLECTORS
from perflab.collectors.base import Collector, CollectorContext, CollectorUnavailable
from perflab.collectors.diskstats import DiskstatsCollector, DiskstatsSettings, whole_disks
from perflab.collectors.energy import EnergyCollector, EnergySettings, per_work_metrics
from perflab.collectors.pgstat import PgstatCollector, PgstatSettings
from perflab.collectors.process import ProcessCollector, ProcessSettings, role_from_title
from perflab.collectors.procfs import CLOCK_TICKS_PER_S
from perflab.collectors.vmstat import VmstatCollector, VmstatSettings
from perflab.context import RunContext, SeriesSink
from perflab.endpoints import Capability
from perflab.model import Metric, QueryTime, RunResult
from perflab.report.telemetry import build_run_figure, write_run_figure
from perflab.store import Store

Points = dict[str, list[tuple[float, float]]]


class ListSink(SeriesSink):
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, float, float]] = []

    def add(self, source: str, name: str, t: float, value: float) -> None:
        self.rows.append((source, name, t, value))

    def points(self) -> Points:
        out: Points = defaultdict(list)
        for _, name, t, value in self.rows:
            out[name].append((t, value))
        return dict(out)


def collect(collector: Collector, during: Callable[[], Any], *, target: Any = None,
            endpoint: Any = None) -> tuple[Points, RunResult]:
    """Run `collector` around `during()` on a fresh run clock."""
    sink = ListSink()
    ctx = RunContext(run_number=1, run_dir=Path("."), t0_ns=time.monotonic_ns(), series=sink)
    collector.start(CollectorContext(run=ctx, endpoint=endpoint, target=target))
    try:
        during()
    finally:
        result = collector.stop()
    return sink.points(), result


WRITER = """
import os, sys, time
chunk = os.urandom(1 << 20)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
n = 0
while True:
    os.write(fd, chunk)
    os.fsync(fd)
    n += 1
    if n % 16 == 0:  # keep the file at 16 MiB
        os.lseek(fd, 0, os.SEEK_SET)
    time.sleep(0.05)
"""


@contextmanager
def loaded_window(directory: Path) -> Iterator[None]:
    """One core burning CPU and a writer doing 1 MiB write + fsync every ~50 ms."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]),
        subprocess.Popen([sys.executable, "-c", WRITER, str(directory / "load.bin")]),
    ]
    try:
        time.sleep(0.5)  # let the load settle before the window opens
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def first_rates(points: Points, name: str, n: int) -> list[float]:
    """The first n per-interval values of a rate series (the stop sample,
    a short last interval, is not among them)."""
    values = [v for _, v in sorted(points[name])]
    assert len(values) >= n, f"{name}: {len(values)} samples, wanted {n}"
    return values[:n]


def close_to(mine: float, theirs: float, rel: float, abs_: float) -> bool:
    return abs(mine - theirs) <= max(abs_, rel * abs(theirs))


# ------------------------------------------------------------------ vmstat


@pytest.mark.slow
def test_vmstat_figures_match_the_systems_vmstat_over_the_same_window(tmp_path: Path) -> None:
    intervals = 6
    holder: dict[str, str] = {}
    with loaded_window(tmp_path):
        vm = subprocess.Popen(["vmstat", "-n", "1", str(intervals + 1)], stdout=subprocess.PIPE, text=True)
        points, result = collect(
            VmstatCollector("vmstat", VmstatSettings(interval=1.0)),
            lambda: holder.setdefault("out", vm.communicate(timeout=60)[0]),
        )
    assert vm.returncode == 0
    lines = [line.split() for line in holder["out"].splitlines()[1:]]
    header, rows = lines[0], [list(map(float, r)) for r in lines[2:]]  # lines[1]: averages since boot
    assert len(rows) == intervals
    theirs = {col: mean([r[i] for r in rows]) for i, col in enumerate(header)}

    def compare(mine_name: str, their_name: str, rel: float, abs_: float) -> None:
        mine = mean(first_rates(points, mine_name, intervals))
        assert close_to(mine, theirs[their_name], rel, abs_), (
            f"{mine_name}: perflab {mine:.1f}, vmstat {theirs[their_name]:.1f}"
        )

    # vmstat rounds to whole percent and its windows start a few ms apart
    # from ours; other processes on the machine move within both windows
    for col in ("us", "sy", "id", "wa"):
        compare(f"{col}_pct", col, 0, 10)
    compare("bo_kib_per_s", "bo", 0.35, 500)
    # bi is not what the window loads (the writer loads bo): a cold-cache
    # read burst of a few MB at an edge of one window and not the other (a
    # fresh clone's first imports) must not fail the comparison of the method
    compare("bi_kib_per_s", "bi", 0.5, 1024)
    compare("cs_per_s", "cs", 0.35, 200)
    compare("in_per_s", "in", 0.35, 200)
    for col in ("free", "buff", "cache"):
        compare(f"{col}_kib", col, 0.1, 50_000)
    assert theirs["bo"] > 1000  # the window was loaded
    assert result.metrics["vmstat.us_pct"].value > 20
    assert result.metrics["vmstat.sampling_cpu_s"].value < 0.5


@pytest.mark.slow
def test_diskstats_figures_match_iostat_over_the_same_window(tmp_path: Path) -> None:
    disks = whole_disks()
    if not disks:
        pytest.skip("no whole disk in /sys/block")
    device = disks[0]
    intervals = 5
    with loaded_window(tmp_path):
        iostat = subprocess.Popen(
            ["iostat", "-x", "-d", "-y", "-o", "JSON", "1", str(intervals), device],
            stdout=subprocess.PIPE, text=True,
        )
        holder: dict[str, str] = {}
        points, result = collect(
            DiskstatsCollector("diskstats", DiskstatsSettings(interval=1.0, devices=[device])),
            lambda: holder.setdefault("out", iostat.communicate(timeout=60)[0]),
        )
    assert iostat.returncode == 0
    reports = json.loads(holder["out"])["sysstat"]["hosts"][0]["statistics"]
    theirs = [next(d for d in r["disk"] if d["disk_device"] == device) for r in reports]
    assert len(theirs) == intervals

    def compare(mine_name: str, their_name: str, rel: float, abs_: float) -> None:
        mine = mean(first_rates(points, f"{device}.{mine_name}", intervals))
        their = mean([d[their_name] for d in theirs])
        assert close_to(mine, their, rel, abs_), f"{mine_name}: perflab {mine:.2f}, iostat {their:.2f}"

    # the writer makes ~10-20 MiB/s of fsynced writes: clearly above noise
    compare("write_kib_per_s", "wkB/s", 0.35, 500)
    compare("writes_per_s", "w/s", 0.35, 10)
    compare("util_pct", "util", 0.5, 10)
    compare("aqu_sz", "aqu-sz", 0.5, 0.3)
    compare("read_kib_per_s", "rkB/s", 0.5, 300)
    assert result.metrics[f"diskstats.{device}.write_kib_per_s"].value > 1000


# ------------------------------------------------------------------ process


def test_process_titles_give_roles() -> None:
    assert role_from_title("postgres: checkpointer ") == "checkpointer"
    assert role_from_title("postgres: main: background writer") == "background writer"
    assert role_from_title("postgres: walwriter") == "walwriter"
    assert role_from_title("postgres: autovacuum launcher") == "autovacuum"
    assert role_from_title("postgres: autovacuum worker bench") == "autovacuum"
    assert role_from_title("postgres: logical replication launcher") == "other"
    assert role_from_title("postgres: postgres bench [local] idle") == "backend"
    assert role_from_title("postgres: 15/main: bench bench 127.0.0.1(5432) SELECT") == "backend"
    assert role_from_title("postgres: parallel worker for PID 42") == "backend"
    assert role_from_title("/usr/bin/python3 -m something") == "other"


def _cpu_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    fields = stat[stat.rindex(b")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def test_process_roles_of_a_real_server_and_cpu_of_a_backend_that_exited(pg_target: Any) -> None:
    target, endpoint = pg_target
    truth: dict[str, float] = {}

    def work() -> None:
        idle = [endpoint.connect() for _ in range(3)]
        time.sleep(1.3)
        conn = endpoint.connect()
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.execute("SELECT count(*) FROM generate_series(1, 3000000)")
        truth["cpu_s"] = _cpu_ticks(pid) / CLOCK_TICKS_PER_S
        conn.close()  # it exits before the next sample: only the postmaster's cutime knows the rest
        time.sleep(1.5)
        for c in idle:
            c.close()

    # pgstat's own session is perflab's, not the workload's: role "monitor"
    monitor = PgstatCollector("pgstat", PgstatSettings(wait_event_hz=0.0))
    monitor.start(CollectorContext(run=RunContext(run_number=1, run_dir=Path("."), t0_ns=time.monotonic_ns()),
                                   endpoint=endpoint, target=target))
    try:
        points, result = collect(ProcessCollector("process", ProcessSettings(interval=1.0)), work,
                                 target=target, endpoint=endpoint)
    finally:
        monitor.stop()
    for role in ("postmaster", "checkpointer", "walwriter", "background_writer", "autovacuum", "driver"):
        assert max(v for _, v in points[f"{role}.count"]) >= 1, role
    assert [v for _, v in points["monitor.count"]] == [1.0] * len(points["monitor.count"])
    assert max(v for _, v in points["backend.count"]) in (3, 4), points["backend.count"]
    backend_cpu_s = result.metrics["process.backend.cpu_s"].value
    # all of the exited backend's CPU is counted (to the clock tick), and
    # not twice: the idle backends and connection set-up add little
    assert backend_cpu_s >= truth["cpu_s"] - 2 / CLOCK_TICKS_PER_S, (backend_cpu_s, truth)
    assert backend_cpu_s <= truth["cpu_s"] + 0.25, (backend_cpu_s, truth)
    assert result.metrics["process.driver.cpu_s"].value >= 0
    assert points["driver.rss_anon_mib"][0][1] > 1


# ------------------------------------------------------------------ pgstat


def test_pgstat_counts_commits_and_samples_lock_waits(scratch_db: Any) -> None:
    updates = 60

    def work() -> None:
        with scratch_db.connect() as conn:
            conn.execute("CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)")
            conn.execute("INSERT INTO counter VALUES (1, 0)")
            for _ in range(updates):
                conn.execute("UPDATE counter SET n = n + 1 WHERE id = 1")
        holder = scratch_db.connect()
        holder.autocommit = False
        holder.execute("UPDATE counter SET n = n + 1 WHERE id = 1")  # holds the row lock
        waiter = scratch_db.connect()
        blocked = threading.Thread(target=lambda: waiter.execute("UPDATE counter SET n = n + 1 WHERE id = 1"))
        blocked.start()
        time.sleep(1.2)
        holder.commit()
        blocked.join(timeout=10)
        holder.close()
        waiter.close()
        time.sleep(1.2)  # exiting backends flush their statistics

    points, result = collect(PgstatCollector("pgstat", PgstatSettings(interval=0.5, wait_event_hz=20.0)), work,
                             endpoint=scratch_db)
    commits = result.metrics["pgstat.db.xact_commit"].value
    # CREATE, INSERT, the updates, the holder's and the waiter's transactions
    expected = updates + 4
    assert expected <= commits <= expected + 5, commits
    assert result.metrics["pgstat.db.tup_updated"].value >= updates + 2
    assert max(v for _, v in points["db.xact_commit_per_s"]) > 0
    # the waiter sat on the holder's transaction id for ~1.2 s, sampled at 20 Hz
    lock_wait = result.metrics["pgstat.wait.Lock.transactionid"].value
    assert lock_wait > 0
    assert result.metrics["pgstat.wait_samples"].value >= 40
    assert max(v for _, v in points["wait.Lock.transactionid"]) >= 0.5
    assert "pgstat.wal.wal_bytes" in result.metrics
    assert result.metrics["pgstat.sampling_cpu_s"].value >= 0


def _pg16_bin_dir(workdir: Path) -> Path:
    """PostgreSQL 16 from the pgserver wheel that ./dev installs into the venv
    (Debian 12 ships only 15), copied where the server's user can reach it when
    the tests run as root (the server then runs as `nobody`, and /root is 0700)."""
    from perflab.targets.postgres import pypi_bin_dir

    bin_dir = pypi_bin_dir()
    if bin_dir is None:
        pytest.fail("the pgserver wheel is missing from the venv: run ./dev setup")
    if os.geteuid() != 0:
        return bin_dir
    # the wheel's binaries find their libraries at $ORIGIN/../../../pgserver.libs
    site = bin_dir.parents[2]
    copy = workdir / "site-packages"
    for part in ("pgserver/pginstall", "pgserver.libs"):
        shutil.copytree(site / part, copy / part, symlinks=True)
    for path in [copy, *copy.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | (0o055 if path.is_dir() else 0o044))
    return copy / "pgserver" / "pginstall" / "bin"


@pytest.mark.slow
def test_pgstat_reads_pg_stat_io_on_a_server_that_has_it(workdir: Path) -> None:
    """pg_stat_io exists from PostgreSQL 16: its per-backend-type counters
    become series, and the earlier views are still read beside it."""
    from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget

    settings = PostgresSettings.model_validate({"kind": "postgres", "bin_dir": str(_pg16_bin_dir(workdir)),
                                                "settings": {"shared_buffers": "16MB"}})
    target = PostgresTarget(settings, workdir / "target")
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, PostgresEndpoint)
        with endpoint.connect() as conn:
            assert conn.info.server_version >= 160000

        def work() -> None:
            with endpoint.connect() as conn:
                conn.execute("CREATE TABLE filler AS SELECT g AS id, repeat('x', 200) AS pad "
                             "FROM generate_series(1, 200000) g")  # ~50 MB through 16 MB of buffers
                conn.execute("CHECKPOINT")
                conn.execute("SELECT count(*) FROM filler").fetchone()
            time.sleep(1.2)

        points, result = collect(PgstatCollector("pgstat", PgstatSettings(interval=0.5, wait_event_hz=0)), work,
                                 endpoint=endpoint)
    finally:
        target.teardown()
    io_series = {name for name in points if name.startswith("io.")}
    assert any(name.startswith("io.client_backend.") for name in io_series), sorted(io_series)
    assert any(name.endswith(("writes_per_s", "extends_per_s")) and max(v for _, v in points[name]) > 0
               for name in io_series), sorted(io_series)
    assert any(name.startswith("io.checkpointer.") for name in io_series), sorted(io_series)
    assert "pgstat.bgwriter.buffers_clean" in result.metrics or "pgstat.bgwriter.maxwritten_clean" in result.metrics
    assert result.metrics["pgstat.wal.wal_bytes"].value > 10e6
    assert not [e for e in result.events if "not sampled" in e.message], result.events


def test_pgstat_is_unavailable_without_a_postgres_endpoint() -> None:
    collector = PgstatCollector("pgstat", PgstatSettings())
    ctx = RunContext(run_number=1, run_dir=Path("."), t0_ns=time.monotonic_ns())
    with pytest.raises(CollectorUnavailable, match="not a PostgreSQL server"):
        collector.start(CollectorContext(run=ctx, endpoint=None, target=None))


# ------------------------------------------------------------------ energy

RANGE_UJ = 262143328850  # a real package's max_energy_range_uj


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _zone(root: Path, zone: str, name: str, energy_uj: int) -> Path:
    d = root / zone
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    (d / "max_energy_range_uj").write_text(f"{RANGE_UJ}\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    return d / "energy_uj"


def test_energy_from_rapl_counts_joules_across_a_counter_wrap(tmp_path: Path) -> None:
    root = tmp_path / "powercap"
    package = _zone(root, "intel-rapl:0", "package-0", RANGE_UJ - 2_000_000)
    _zone(root, "intel-rapl:0:0", "core", 1_000)  # inside the package: not added
    dram = _zone(root, "intel-rapl:0:1", "dram", 5_000_000)
    psys = _zone(root, "intel-rapl:1", "psys", 10_000_000)
    collector = EnergyCollector("energy", EnergySettings(interval=0.1, rapl_root=str(root), idle_baseline=0))

    def work() -> None:
        deadline = time.monotonic() + 10
        while collector.samples < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        _write_atomic(package, "3000000\n")  # wrapped: 2 J to the top, 3 J after
        _write_atomic(dram, "6500000\n")
        _write_atomic(psys, "19000000\n")
        time.sleep(0.3)

    points, result = collect(collector, work)
    m = result.metrics
    assert m["energy.joules"].value == pytest.approx(6.5)
    assert m["energy.package-0.joules"].value == pytest.approx(5.0)
    assert m["energy.dram-0.joules"].value == pytest.approx(1.5)
    assert m["energy.psys.joules"].value == pytest.approx(9.0)
    assert m["energy.joules"].method == "rapl"
    assert 0 < m["energy.watts_mean"].value < 6.5 / 0.3
    assert max(v for _, v in points["watts"]) > 0
    assert "energy.core.joules" not in m
    # by component: sockets summed, core inside the package (not in the total)
    assert m["energy.component.package.joules"].value == pytest.approx(5.0)
    assert m["energy.component.dram.joules"].value == pytest.approx(1.5)
    assert m["energy.component.core.joules"].value == pytest.approx(0.0)


def test_fake_powercap_wraps_and_queries_share_the_rapl_energy(tmp_path: Path) -> None:
    """Arithmetic only: a fake powercap tree whose package counter wraps at
    its max_energy_range_uj during a query; the machine has no RAPL."""
    root = tmp_path / "powercap"
    package = _zone(root, "intel-rapl:0", "package-0", RANGE_UJ - 1_000_000)
    uncore = _zone(root, "intel-rapl:0:1", "uncore", 0)
    dram = _zone(root, "intel-rapl:0:2", "dram", 0)
    collector = EnergyCollector("energy", EnergySettings(interval=0.05, rapl_root=str(root), idle_baseline=0.2))
    ctx = RunContext(run_number=1, run_dir=Path("."), t0_ns=time.monotonic_ns())
    collector.start(CollectorContext(run=ctx, endpoint=None, target=None))
    queries = []
    for i in range(3):
        start = ctx.now_s()
        time.sleep(0.15)
        queries.append(QueryTime(0, i + 1, f"q{i}", ctx.now_s() - start, started_s=start))
        if i == 1:  # package: 1 J to the top, then 2 J past the wrap; dram 0.5 J; uncore 0.25 J
            _write_atomic(package, "2000000\n")
            _write_atomic(dram, "500000\n")
            _write_atomic(uncore, "250000\n")
        time.sleep(0.1)
    result = collector.stop()
    result.queries = queries
    collector.annotate(result)
    m = result.metrics
    assert m["energy.joules"].value == pytest.approx(3.5)  # package 3 J + dram 0.5 J; uncore inside the package
    assert m["energy.component.uncore.joules"].value == pytest.approx(0.25)
    assert m["energy.idle_watts"].value == pytest.approx(0.0)  # no counter moved during the baseline
    in_queries = sum(q.energy_j or 0.0 for q in queries)
    assert in_queries + m["energy.gaps.joules"].value == pytest.approx(3.5)
    assert all(q.energy_source == "rapl" and set(q.energy or {}) == {"package", "uncore", "dram"} for q in queries)


def test_energy_without_rapl_is_estimated_and_says_how(tmp_path: Path) -> None:
    # neither RAPL nor perf's power PMU (a VM may have energy-psys: not here)
    collector = EnergyCollector("energy", EnergySettings(interval=0.2, rapl_root=str(tmp_path), tdp_watts=100.0,
                                                         idle_baseline=0, perf_events=str(tmp_path / "no-pmu")))
    points, result = collect(collector, lambda: time.sleep(1.0))
    joules, watts = result.metrics["energy.joules"], result.metrics["energy.watts_mean"]
    assert joules.method.startswith("model: ") and "TDP 100 W (given)" in joules.method
    assert watts.method == joules.method
    cpu = result.metrics["energy.component.cpu.joules"].value
    assert 30.0 * 0.9 <= cpu <= 100.0 * 1.5  # P_idle = 0.3 x TDP up to the TDP, over about 1 s
    assert joules.value == pytest.approx(watts.value * 1.0, rel=0.3)
    assert all(30.0 <= v <= 100.0 for _, v in points["cpu.watts"])
    assert any(e.kind == "collector-info" and str(tmp_path) in e.message for e in result.events)


def test_energy_rapl_required_but_missing_is_unavailable(tmp_path: Path) -> None:
    collector = EnergyCollector("energy", EnergySettings(source="rapl", rapl_root=str(tmp_path)))
    ctx = RunContext(run_number=1, run_dir=Path("."), t0_ns=time.monotonic_ns())
    with pytest.raises(CollectorUnavailable, match="no RAPL package zone"):
        collector.start(CollectorContext(run=ctx, endpoint=None, target=None))


def test_joules_per_transaction_and_query() -> None:
    energy = {
        "energy.joules": Metric("energy.joules", 600.0, "J", method="rapl"),
        "energy.watts_mean": Metric("energy.watts_mean", 50.0, "W", method="rapl"),
    }
    per_tx = per_work_metrics(energy | {"tps": Metric("tps", 1000.0, "1/s")})
    assert per_tx["energy.joules_per_transaction"].value == pytest.approx(0.05)
    assert per_tx["energy.joules_per_transaction"].method == "rapl"
    per_q = per_work_metrics(energy | {"queries": Metric("queries", 22.0, "queries")})
    assert per_q["energy.joules_per_query"].value == pytest.approx(600.0 / 22)
    assert per_work_metrics({"tps": Metric("tps", 1.0, "1/s")}) == {}
    collector = COLLECTORS.get("energy")("energy", EnergySettings())
    assert set(collector.derive(energy | {"tps": Metric("tps", 10.0, "1/s")})) == {"energy.joules_per_transaction"}


# ------------------------------------------------------------------ defaults and the figure


def test_default_collectors() -> None:
    defaults = {name for name in COLLECTORS.names() if COLLECTORS.get(name).default_on}
    assert defaults == {"vmstat", "diskstats", "process", "pgstat", "mysqlstat"}
    assert COLLECTORS.get("pgstat").needs == {Capability.POSTGRES_WIRE}
    assert COLLECTORS.get("mysqlstat").needs == {Capability.MYSQL_WIRE}
    assert COLLECTORS.get("vmstat").needs == frozenset()


class _PlannedRun:
    number, combination, repetition = 1, 0, 1
    factors = {"workload.clients": 8}


def _store_with_telemetry(tmp_path: Path) -> Store:
    """A store holding what a 2-minute run's collectors and driver write."""
    store = Store.create(tmp_path / "out", name="figure-test", spec_text="", spec_path=None, seed=1,
                         factors=["workload.clients"], host={})
    store.add_plan([_PlannedRun()])
    store.start_run(1, time.monotonic_ns())
    writer = store.series_writer(1)
    for i in range(120):
        t = float(i)
        busy = 60 + 20 * (i > 60)
        for name, value in (("us_pct", busy * 0.7), ("sy_pct", busy * 0.2), ("wa_pct", busy * 0.1),
                            ("st_pct", 0.0), ("id_pct", 100.0 - busy), ("used_kib", 2e6), ("buff_kib", 1e5),
                            ("cache_kib", 4e6 + i * 1e4), ("free_kib", 9e6 - i * 1e4),
                            ("bi_kib_per_s", 500.0), ("bo_kib_per_s", 8000.0 + 4000 * (i % 30 == 0))):
            writer.add("vmstat", name, t, value)
        writer.add("diskstats", "vda.util_pct", t, 30.0 + i % 7)
        writer.add("pgstat", "wait.LWLock.WALWrite", t, 1.5)
        writer.add("pgstat", "wait.Client.ClientRead", t + 0.5, 3.0)
        writer.add("tpcb", "tps", t + 0.2, 1200.0 - 300 * (i > 60))
    writer.close()
    return store


def test_telemetry_figure_has_its_panels_and_is_written(tmp_path: Path) -> None:
    store = _store_with_telemetry(tmp_path)
    fig = build_run_figure(store, 1)
    assert fig is not None
    titles = [ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left")]
    assert [t.split(" ")[0] for t in titles] == ["throughput", "CPU", "memory", "block", "disk", "PostgreSQL"]
    throughput = fig.axes[0]
    assert [line.get_label() for line in throughput.get_lines()] == ["tpcb tps"]
    path = write_run_figure(store, 1, tmp_path / "runs" / "001" / "telemetry.png")
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 40_000


def test_a_run_shorter_than_the_interval_still_shows_its_one_sample(tmp_path: Path) -> None:
    """One vmstat sample at t = 4 s covers the run from its start: the CPU
    stack must fill 0..4 s, not vanish as a zero-width area."""
    store = Store.create(tmp_path / "out", name="short", spec_text="", spec_path=None, seed=1, factors=[], host={})
    store.add_plan([_PlannedRun()])
    store.start_run(1, time.monotonic_ns())
    writer = store.series_writer(1)
    for name, value in (("us_pct", 70.0), ("sy_pct", 20.0), ("wa_pct", 0.0), ("st_pct", 0.0), ("id_pct", 10.0)):
        writer.add("vmstat", name, 4.0, value)
    writer.close()
    fig = build_run_figure(store, 1)
    assert fig is not None
    cpu = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("CPU"))
    (x0, y0), (x1, y1) = cpu.collections[0].get_datalim(cpu.transData).get_points()
    assert (x0, x1) == pytest.approx((0.0, 4.0)) and (y0, y1) == pytest.approx((0.0, 70.0))


def test_telemetry_figure_is_not_written_for_a_run_without_series(tmp_path: Path) -> None:
    store = Store.create(tmp_path / "out", name="empty", spec_text="", spec_path=None, seed=1, factors=[], host={})
    store.add_plan([_PlannedRun()])
    assert write_run_figure(store, 1, tmp_path / "telemetry.png") is None
    assert not (tmp_path / "telemetry.png").exists()


# ------------------------------------------------------------------ through the runner

EXPERIMENT = """
[experiment]
name = "telemetry"
repetitions = 2
order = "sequential"

[target]
kind = "postgres"

[workload]
kind = "sql"
setup = ["CREATE TABLE IF NOT EXISTS t (id bigserial PRIMARY KEY, v text)"]
statements = [{{ name = "insert", sql = "INSERT INTO t (v) VALUES ('x')" }}]
duration = "2s"
{collect}
"""


@pytest.mark.slow
def test_runner_skips_an_unavailable_collector_once_and_draws_each_run(workdir: Path, run_cli: Any) -> None:
    no_rapl = workdir / "no-powercap"
    no_rapl.mkdir()
    spec = workdir / "telemetry.toml"
    spec.write_text(EXPERIMENT.format(collect=f"""
[collect]
vmstat = {{ interval = "500ms" }}
diskstats = {{ interval = "500ms" }}
process = {{ interval = "500ms" }}
pgstat = {{ interval = "500ms" }}
energy = {{ source = "rapl", rapl_root = "{no_rapl}" }}
"""))
    out = workdir / "out"
    proc = run_cli("run", spec, "--out", out, "--quiet", "--no-report")
    said = (proc.stdout + proc.stderr).count("no RAPL package zone")
    assert said == 1, proc.stdout + proc.stderr
    store = Store.open(out)
    try:
        assert [r["status"] for r in store.runs()] == ["done", "done"]
        skipped = [e for e in store.events() if e["kind"] == "collector-skipped"]
        assert len(skipped) == 2 and all("energy" in e["message"] for e in skipped)
        for run_id in (1, 2):
            sources = {s["source"] for s in store.series(run_id)}
            assert {"vmstat", "diskstats", "process", "pgstat"} <= sources
            assert (out / "runs" / f"{run_id:03d}" / "telemetry.png").stat().st_size > 20_000
        names = {m["name"] for m in store.metrics(1)}
        assert {"vmstat.us_pct", "process.backend.cpu_s", "pgstat.db.xact_commit"} <= names
    finally:
        store.close()


def test_collector_tools_are_installed() -> None:
    for tool in ("vmstat", "iostat"):
        assert shutil.which(tool), f"{tool} missing: .ci/apt-packages lists procps and sysstat"


def test_a_collector_that_fails_to_open_is_unavailable_not_an_error() -> None:
    class Broken(VmstatCollector):
        def open(self, ctx: CollectorContext) -> None:
            raise OSError(5, "Input/output error", "/proc/stat")

    ctx = RunContext(run_number=1, run_dir=Path("."), t0_ns=time.monotonic_ns())
    with pytest.raises(CollectorUnavailable, match="could not start: OSError"):
        Broken("vmstat", VmstatSettings()).start(CollectorContext(run=ctx, endpoint=None, target=None))


def test_energy_mean_power_is_over_the_measured_window_only(tmp_path: Path) -> None:
    """A hot warm-up must not inflate the watts (and joules per transaction) of
    the measured window that follows it."""
    root = tmp_path / "powercap"
    package = _zone(root, "intel-rapl:0", "package-0", 0)
    collector = EnergyCollector("energy", EnergySettings(interval=0.05, rapl_root=str(root)))
    ctx = RunContext(run_number=1, run_dir=Path("."), t0_ns=time.monotonic_ns(), series=ListSink())
    collector.start(CollectorContext(run=ctx, endpoint=None, target=None))
    try:
        energy_uj = 0
        for _ in range(10):  # warm-up: 1 J every 50 ms, about 20 W
            energy_uj += 1_000_000
            _write_atomic(package, f"{energy_uj}\n")
            time.sleep(0.05)
        time.sleep(0.06)
        ctx.measure_start_s = ctx.now_s()
        for _ in range(20):  # measured: 0.05 J every 50 ms, about 1 W
            energy_uj += 50_000
            _write_atomic(package, f"{energy_uj}\n")
            time.sleep(0.05)
        ctx.measure_end_s = ctx.now_s()
    finally:
        result = collector.stop()
    watts = result.metrics["energy.watts_mean"]
    assert "measured window" in watts.description
    assert 0.3 < watts.value < 3.0, watts.value
    assert result.metrics["energy.joules"].value == pytest.approx(11.0, rel=0.01)
