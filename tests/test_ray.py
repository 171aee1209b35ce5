"""The distributed driver ([driver] kind = "ray") on a private Ray cluster
started here, 2 workers, against a managed PostgreSQL on TCP.

The cluster is one per module (it takes seconds to start) and is always shut
down; every one of its processes carries its token in its environment, so
the tests can say none is left. Ray workers import this checkout's perflab
(the driver puts it on their PYTHONPATH).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conftest import cli_command
from perflab import _engine
from perflab.context import RunContext, SeriesSink
from perflab.drivers import engine_run
from perflab.drivers.merge import MergedResult
from perflab.errors import RunFailure
from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget
from perflab.workloads.tpcb import TpcbSettings, TpcbWorkload
from test_guardian import _alive, _guardians_of

pytest.importorskip("ray", reason='the Ray driver needs the extra: pip install "perflab[ray]"')

from perflab.drivers.ray import CLUSTER_ENV, RayDriver, cluster_processes  # noqa: E402
from perflab.workloads.harness import engine_settings_of

pytestmark = pytest.mark.slow
APPLICATION = "perflab-tpcb"
WORKERS = 2


class ListSink(SeriesSink):
    def __init__(self) -> None:
        self.points: list[tuple[str, str, float, float]] = []

    def add(self, source: str, name: str, t: float, value: float) -> None:
        self.points.append((source, name, t, value))


def _tempdir(prefix: str) -> Path:
    import tempfile

    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o755)
    return d


@pytest.fixture(scope="module")
def tcp_pg() -> Iterator[PostgresEndpoint]:
    """A managed PostgreSQL on 127.0.0.1 with pgbench's tables at scale 1.
    No autovacuum: its transactions would count in the commit counter too."""
    d = _tempdir("perflab-ray-pg-")
    target = PostgresTarget(PostgresSettings.model_validate(
        {"kind": "postgres", "listen": "tcp", "settings": {"max_connections": 100, "autovacuum": "off"}}),
        d / "target")
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, PostgresEndpoint) and endpoint.host == "127.0.0.1"
        _engine.tpcb_load(endpoint.wire_conninfo(APPLICATION), scale=1)
        yield endpoint
    finally:
        target.teardown()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def driver() -> Iterator[RayDriver]:
    d = RayDriver("local", WORKERS, lambda text: None)
    token, temp_dir = d.token, d.temp_dir
    assert token is not None and cluster_processes(token), "the private cluster runs, marked with its token"
    assert temp_dir is not None and any(temp_dir.glob("session_*")), "its files are in a directory of its own"
    try:
        yield d
    finally:
        d.close()
    assert cluster_processes(token, str(temp_dir)) == [], "close() leaves no process of the cluster"
    assert not temp_dir.exists(), "nor its files"


def context(tmp_path: Path, driver: RayDriver, sink: SeriesSink | None = None) -> RunContext:
    return RunContext(run_number=1, run_dir=tmp_path, t0_ns=time.monotonic_ns(), series=sink or ListSink(),
                      driver=driver)


def tpcb(ctx: RunContext, endpoint: PostgresEndpoint, script: str = "select-only", **kw: Any) -> MergedResult:
    """A tpcb run on the driver; `kw`: harness settings by their names."""
    harness = engine_settings_of(**{"clients": 4, "threads": 2, "duration": 3.0, "seed": 5, "io": "epoll",
                                    "pin": "off", "follow": False} | kw)
    out = engine_run(ctx, _engine.tpcb_run, endpoint.wire_conninfo(APPLICATION), t0_ns=ctx.t0_ns,
                     script=script, scale=1, protocol="simple", harness=harness)
    assert isinstance(out, MergedResult)
    return out


def samples(encoded: bytes) -> list[int]:
    """The samples an encoded histogram holds (each its bucket's value)."""
    return [value for value, count in _engine.hdr_values(encoded) for _ in range(count)]


def sessions(endpoint: PostgresEndpoint, application: str = APPLICATION) -> int:
    # From another database: the run's database counts only the drivers' commits.
    with psycopg.connect(endpoint.conninfo, dbname="postgres", autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                           (application,)).fetchone()
    return int(row[0]) if row else 0


def wait_no_sessions(endpoint: PostgresEndpoint, within_s: float = 10.0) -> int:
    deadline = time.monotonic() + within_s
    while (n := sessions(endpoint)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return n


# ------------------------------------------------------------ results


def test_the_merged_histogram_is_the_histogram_of_the_union(driver, tcp_pg, tmp_path) -> None:
    ctx = context(tmp_path, driver)
    out = tpcb(ctx, tcp_pg)
    workers = out.workers
    assert [w.index for w in workers] == [0, 1] and [w.clients for w in workers] == [2, 2]
    assert all(w.transactions > 100 for w in workers), [w.transactions for w in workers]
    # Every sample of both workers, recorded into one histogram, is the merged histogram.
    union = samples(workers[0].latency_histogram) + samples(workers[1].latency_histogram)
    assert len(union) == out.transactions == sum(w.transactions for w in workers)
    expected = _engine.hdr_encode(union)
    assert _engine.hdr_values(out.latency_histogram) == _engine.hdr_values(expected)
    assert out.latency == _engine.hdr_summary(expected)
    for q in (0.5, 0.9, 0.99, 0.999, 1.0):
        assert _engine.hdr_quantile_us(out.latency_histogram, q) == _engine.hdr_quantile_us(expected, q)
    # Counts and errors are summed; the window is one for both.
    assert out.failed == sum(w.failed for w in workers) == 0
    assert out.clients == 4
    assert abs(workers[0].measure_start_t_s - workers[1].measure_start_t_s) < 1e-6
    assert out.tps == pytest.approx(out.transactions / out.measured_s)
    # One machine, one clock: the offset measured is zero within its uncertainty.
    figures = driver.figures().metrics
    for i in range(WORKERS):
        offset = figures[f"driver.worker.{i}.clock_offset_ms"].value
        uncertainty = figures[f"driver.worker.{i}.clock_offset_uncertainty_ms"].value
        assert 0 < uncertainty < 50 and abs(offset) <= uncertainty + 1e-3, (offset, uncertainty)
        assert figures[f"driver.worker.{i}.driver_cpu_s"].value > 0
        assert figures[f"driver.worker.{i}.client_bound"].value in (0.0, 1.0)
    assert out.client_bound == any(w.client_bound for w in workers)


def test_transactions_equal_the_servers_commit_count(driver, tcp_pg, tmp_path) -> None:
    """tpcb-like, no warm-up: every transaction the server committed in the
    database between before and after the run (its workers' sessions gone,
    the statistics flushed) is one the two workers counted, nothing more."""

    def commits() -> int:
        # From another database, so this session's own commits are not counted.
        with psycopg.connect(tcp_pg.conninfo, dbname="postgres", autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                               (tcp_pg.dbname,)).fetchone()
        assert row is not None
        return int(row[0])

    assert wait_no_sessions(tcp_pg) == 0
    before = commits()
    out = tpcb(context(tmp_path, driver), tcp_pg, script="tpcb-like", duration=3.0)
    assert wait_no_sessions(tcp_pg) == 0
    # A backend's statistics reach pg_stat_database when it exits.
    deadline = time.monotonic() + 10
    while (after := commits()) - before < out.transactions and time.monotonic() < deadline:
        time.sleep(0.2)
    assert out.transactions > 100 and out.failed == 0
    # PostgreSQL also counts one commit per session start (the transaction in
    # which a backend reads the catalogs): one per client, each connected once.
    assert after - before == out.transactions + out.clients, (after - before, out.transactions, out.clients)


def test_the_series_line_up_second_by_second(driver, tcp_pg, tmp_path) -> None:
    """Both workers cut their seconds at the same instants of the run's
    clock: each second of the run is there once, with both workers' counts
    in it, no gap, and nothing counted twice at the edges."""
    ctx = context(tmp_path, driver)
    out = tpcb(ctx, tcp_pg, duration=4.0, warmup=1.0)
    series = out.series
    start = out.measure_start_t_s  # after the 1 s warm-up, on the run's clock
    assert [round(i.t_s - start, 6) for i in series] == [1.0, 2.0, 3.0, 4.0][: len(series)]
    assert len(series) >= 3
    assert all(i.workers == WORKERS for i in series)
    for w in out.workers:
        assert [round(i.t_s - start, 6) for i in w.series] == [round(i.t_s - start, 6) for i in series]
    for k, second in enumerate(series):
        assert second.transactions == sum(w.series[k].transactions for w in out.workers)
        assert second.latency_histogram is not None
        assert _engine.hdr_summary(second.latency_histogram).count == second.transactions
        assert second.latency_p99_ms == _engine.hdr_quantile_us(second.latency_histogram, 0.99) / 1000
    # Each worker's second is in the merged series once: no second lost, none twice.
    in_seconds = sum(i.transactions for i in series)
    assert in_seconds == sum(i.transactions for w in out.workers for i in w.series)
    # A second counts what completed in it; the window's total what started in
    # it. They differ only by what straddles an edge: at most one transaction
    # per client begun in the warm-up, and the window's part after its last
    # whole second.
    assert in_seconds <= out.transactions + out.clients
    assert in_seconds >= out.transactions * (len(series) - 0.5) / out.measured_s


def test_the_rate_is_shared_and_lag_merged_in_open_loop(driver, tcp_pg, tmp_path) -> None:
    """rate = 400 tx/s over 2 workers: each schedules 200 tx/s for its
    clients (a constant schedule, so the count is exact up to the edges);
    their lag histograms merge like the latency's."""
    out = tpcb(context(tmp_path, driver), tcp_pg, duration=3.0, rate=400.0, schedule="constant")
    workers = out.workers
    for w in workers:
        assert abs(w.transactions - 200 * 3) <= 2 * w.clients + 2, w.transactions
    assert abs(out.tps - 400) < 10, out.tps
    assert out.lag_histogram is not None and all(w.lag_histogram is not None for w in workers)
    lag = samples(workers[0].lag_histogram) + samples(workers[1].lag_histogram)  # type: ignore[arg-type]
    assert _engine.hdr_values(out.lag_histogram) == _engine.hdr_values(_engine.hdr_encode(lag))
    assert all(second.lag_count > 0 for second in out.series)


def test_the_workload_runs_on_the_ray_driver_and_stores_merged_seconds(driver, tcp_pg, tmp_path) -> None:
    sink = ListSink()
    ctx = context(tmp_path, driver, sink)
    w = TpcbWorkload(TpcbSettings.model_validate({"kind": "tpcb", "scale": 1, "clients": 4, "threads": 2,
                                                  "duration": "3s", "seed": 3}))
    result = w.run(tcp_pg, ctx)
    m = {k: v.value for k, v in result.metrics.items()}
    assert m["transactions"] > 100 and m["clients"] == 4
    tps = [(t, v) for s, n, t, v in sink.points if (s, n) == ("tpcb", "tps")]
    assert len(tps) >= 2 and all(t > ctx.measure_start_s for t, _ in tps)  # type: ignore[operator]
    assert any(h.name == "latency.tpcb-like" for h in result.histograms)
    assert w.check(tcp_pg, ctx).passed
    assert driver.figures().metrics["driver.workers"].value == WORKERS


def test_tpcc_runs_on_the_ray_driver_and_counts_what_the_database_counts(driver, tcp_pg, tmp_path) -> None:
    """TPC-C, the harness's second protocol, on two workers: the driver's
    New-Orders per minute match the database's NOPM (sum(d_next_o_id) over the
    same window) within 1%, and every consistency condition holds after."""
    from dataclasses import replace

    from psycopg.conninfo import make_conninfo

    from perflab.workloads.tpcc import TpccSettings, TpccWorkload

    def tpcc(**kw: Any) -> TpccWorkload:
        return TpccWorkload(TpccSettings.model_validate({"kind": "tpcc", "warehouses": 1, **kw}))

    with psycopg.connect(tcp_pg.conninfo, dbname="postgres", autocommit=True) as conn:
        conn.execute('CREATE DATABASE "tpcc_ray"')
    db = replace(tcp_pg, dbname="tpcc_ray", conninfo=make_conninfo(tcp_pg.conninfo, dbname="tpcc_ray"))
    try:
        tpcc(load_seed=7, load_jobs=2).prepare(db, RunContext(run_number=1, run_dir=tmp_path, t0_ns=time.monotonic_ns()))
        sink = ListSink()
        ctx = context(tmp_path, driver, sink)
        w = tpcc(clients=4, threads=2, duration="5s", warmup="1s", seed=11, io="epoll")
        result = w.run(db, ctx)
        m = {k: v.value for k, v in result.metrics.items()}
        assert m["transactions"] > 300, m["transactions"]
        assert m["nopm"] == pytest.approx(m["new_orders_per_min"], rel=0.01)
        figures = driver.figures().metrics
        assert figures["driver.worker.0.transactions"].value + figures["driver.worker.1.transactions"].value \
            == m["transactions"]
        assert len([v for src, n, _, v in sink.points if (src, n) == ("tpcc", "tpmC")]) >= 4
        check = w.check(db, ctx)
        assert check.passed, check.checks
    finally:
        with psycopg.connect(tcp_pg.conninfo, dbname="postgres", autocommit=True) as conn:
            conn.execute('DROP DATABASE IF EXISTS "tpcc_ray" WITH (FORCE)')


def test_http_runs_on_the_ray_driver_and_merges_bodies_and_the_class_mix(driver, tmp_path) -> None:
    """The HTTP driver on two workers against a managed nginx: every good
    response's body counted once (the per-class bytes add up to the total,
    and each class's bytes are its files' sizes), the mix of both workers
    together within 1% of 35/50/14/1, and the workers' requests summed."""
    import shutil as _shutil

    if _shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin") is None:
        pytest.skip("nginx is not installed (./dev setup installs it)")
    from perflab.endpoints import HttpEndpoint
    from perflab.targets.nginx import NginxSettings, NginxTarget
    from perflab.workloads.http import HttpSettings, HttpWorkload

    d = _tempdir("perflab-ray-nginx-")
    target = NginxTarget(NginxSettings.model_validate({"kind": "nginx"}), d / "target")
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, HttpEndpoint) and endpoint.publish is not None
        w = HttpWorkload(HttpSettings.model_validate({
            "kind": "http", "clients": 4, "threads": 2, "requests": 2500, "seed": 9,
            "fileset": {"size": "15MB", "cache_dir": str(d / "cache")}}))
        w.prepare(endpoint, RunContext(run_number=1, run_dir=tmp_path, t0_ns=time.monotonic_ns()))
        ctx = context(tmp_path, driver)
        result = w.run(endpoint, ctx)
        m = {k: v.value for k, v in result.metrics.items()}
        assert m["requests"] == 4 * 2500 and m["errors"] == 0
        for name, share in (("class0", 0.35), ("class1", 0.50), ("class2", 0.14), ("class3", 0.01)):
            assert abs(m[f"mix.{name}"] - share) < 0.01, (name, m[f"mix.{name}"])
        per_class = [m[f"throughput_mbps.class{c}"] for c in range(4)]
        assert sum(per_class) == pytest.approx(m["throughput_mbps"], rel=1e-9)
        assert m["body_bytes"] > 4 * 2500 * 102
        figures = driver.figures().metrics
        assert figures["driver.worker.0.transactions"].value + figures["driver.worker.1.transactions"].value \
            == m["requests"]
    finally:
        target.teardown()
        shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------ failure


def test_killing_a_worker_fails_the_run_naming_it_and_leaves_nothing(driver, tcp_pg, tmp_path) -> None:
    import ray

    ctx = context(tmp_path, driver)
    outcome: dict[str, BaseException] = {}

    def run() -> None:
        try:
            tpcb(ctx, tcp_pg, duration=30.0)
        except BaseException as exc:  # the test asserts on it
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    while sessions(tcp_pg) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # mid-run, past the barrier
    victim = driver.actors[1]
    driver_nodes = list(driver.nodes)
    pids = [n["pid"] for n in driver_nodes]
    started = time.monotonic()
    ray.kill(victim, no_restart=True)
    thread.join(timeout=30)
    assert not thread.is_alive(), "the run ended"
    assert time.monotonic() - started < 25, "ended by the kill, not by its 30 s"
    error = outcome.get("error")
    assert isinstance(error, RunFailure), repr(error)
    node = driver_nodes[1]
    assert f"driver worker 1 on {node['ip']} ({node['host']}, node {node['node_id'][:12]}" in str(error), str(error)
    assert "died" in str(error), str(error)
    # Every actor stopped and killed, every connection closed.
    assert driver.actors == []
    assert wait_no_sessions(tcp_pg) == 0
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{p}").exists() for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if Path(f"/proc/{p}").exists()], "no actor process is left"
    # The next run starts new workers.
    again = tpcb(context(tmp_path, driver), tcp_pg, duration=1.0)
    assert again.transactions > 0 and len(driver.actors) == WORKERS


def test_a_worker_that_cannot_connect_fails_the_run_naming_it(driver, tcp_pg, tmp_path) -> None:
    bad = tcp_pg.wire_conninfo(APPLICATION).replace(f"port={tcp_pg.port}", "port=1")
    ctx = context(tmp_path, driver)
    with pytest.raises(_engine.EngineConnectionError, match=r"driver worker \d on \S+ \(.*node"):
        engine_run(ctx, _engine.tpcb_run, bad, t0_ns=ctx.t0_ns, script="select-only", scale=1, protocol="simple",
                   harness=engine_settings_of(clients=2, threads=2, duration=1.0, seed=1, io="epoll", pin="off",
                                              follow=False))
    assert driver.actors == []


# ------------------------------------------------------------ the command


def ray_pids_other_than(token: str | None) -> list[int]:
    """Live processes of any private perflab cluster but the module's: marked
    in their environment, or holding a file open in a cluster's directory."""
    import re

    out = []
    theirs = f"perflab-ray-{token}/"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                continue
            env = (entry / "environ").read_bytes().split(b"\0")
            marks = [e for e in env if e.startswith(CLUSTER_ENV.encode() + b"=")]
            if marks and (token is None or marks[0] != f"{CLUSTER_ENV}={token}".encode()):
                out.append(int(entry.name))
                continue
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if re.search(r"/perflab-ray-[0-9a-f]{16}/", target) and theirs not in target:
                        out.append(int(entry.name))
                        break
    return out


def cluster_of_run(proc: subprocess.Popen[Any]) -> tuple[str, str] | None:
    """(token, directory) of the private cluster a `perflab run` (still alive)
    started, from its journal of host changes: the test's own cluster, never
    another experiment's."""
    import json

    from perflab.guardian import state_dir

    try:
        record = json.loads((state_dir() / f"journal-{proc.pid}.json").read_text())
    except (OSError, ValueError):
        return None
    for entry in record.get("entries", []):
        if entry.get("kind") == "ray-cluster":
            return str(entry["args"]["token"]), str(entry["args"]["temp_dir"])
    return None


def _await_cluster(proc: subprocess.Popen[Any], ours: list[tuple[str, str]]) -> None:
    """Wait (up to 120 s) for the run's cluster to have its 4 processes; its
    token and directory are put in `ours` as soon as they are journaled."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if not ours and (found := cluster_of_run(proc)) is not None:
            ours.append(found)
        if ours and len(cluster_processes(*ours[0])) >= 4:
            return
        time.sleep(0.2)


def _cluster_pids(ours: list[tuple[str, str]]) -> list[int]:
    return cluster_processes(*ours[0]) if ours else []


def cluster_dirs_other_than(driver: RayDriver) -> list[Path]:
    """Directories of private clusters (perflab-ray-TOKEN) but the module's."""
    import re
    import tempfile

    return [d for d in Path(tempfile.gettempdir()).iterdir()
            if re.fullmatch(r"perflab-ray-[0-9a-f]{16}", d.name) and d != driver.temp_dir]


EXPERIMENT = """
[experiment]
name = "ray"
[target]
kind = "postgres"
[target.settings]
max_connections = 50
[workload]
kind = "tpcb"
script = "select-only"
clients = 4
threads = 2
duration = "{duration}"
[collect]
vmstat = {{ interval = "1s" }}
[driver]
kind = "ray"
address = "local"
workers = 2
"""


def test_perflab_run_on_ray_stores_merged_figures_and_leaves_nothing(driver, run_cli, tmp_path) -> None:
    exp = tmp_path / "ray.toml"
    exp.write_text(EXPERIMENT.format(duration="3s"))
    check = run_cli("check", exp)
    assert "target.listen: the managed server listens on TCP" in check.stderr
    out = tmp_path / "out"
    run_cli("run", exp, "--out", out, "--quiet", timeout=240)
    from perflab.store import Store

    store = Store.open(out)
    run = store.runs()[0]
    assert run["status"] == "done", run
    m = {r["name"]: r["value"] for r in store.metrics(run["id"])}
    assert m["driver.workers"] == 2 and m["clients"] == 4 and m["transactions"] > 100
    assert m["driver.worker.0.clients"] + m["driver.worker.1.clients"] == 4
    assert m["driver.worker.0.transactions"] + m["driver.worker.1.transactions"] == m["transactions"]
    assert m["driver.setup_s"] > 0
    assert {"driver.worker.1.clock_offset_uncertainty_ms", "driver.worker.0.driver_cpu_s"} <= set(m)
    assert ray_pids_other_than(driver.token) == [], "perflab stopped its cluster"
    assert cluster_dirs_other_than(driver) == [], "and removed its files"


def test_a_sigkilled_perflab_leaves_no_ray_process(driver, tmp_path) -> None:
    exp = tmp_path / "ray.toml"
    exp.write_text(EXPERIMENT.format(duration="60s"))
    proc = subprocess.Popen(cli_command("run", exp, "--out", tmp_path / "out", "--quiet"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    ours: list[tuple[str, str]] = []  # the run's cluster (token, directory): only it is looked at
    try:
        _await_cluster(proc, ours)
        assert _cluster_pids(ours), "the run started its cluster"
        [guardian] = _guardians_of(proc.pid)
        time.sleep(3)  # its actors are up and driving
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        # The guardian undoes the cluster, then exits: wait for that, not for
        # a time only a quiet machine keeps (the timing is test_guardian's).
        deadline = time.monotonic() + 120
        while _alive(guardian) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(guardian), "the guardian finished its undo"
        deadline = time.monotonic() + 30  # SIGKILLed processes are reaped a moment later
        while (_cluster_pids(ours) or Path(ours[0][1]).exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _cluster_pids(ours) == [], "the guardian killed the whole cluster"
        assert not Path(ours[0][1]).exists(), "and removed its files"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _cluster_pids(ours):  # only if the test failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_ctrl_c_stops_a_ray_run_and_leaves_nothing(driver, tmp_path) -> None:
    exp = tmp_path / "ray.toml"
    exp.write_text(EXPERIMENT.format(duration="60s"))
    proc = subprocess.Popen(cli_command("run", exp, "--out", tmp_path / "out", "--quiet"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    ours: list[tuple[str, str]] = []  # the run's cluster (token, directory): only it is looked at
    try:
        _await_cluster(proc, ours)
        assert _cluster_pids(ours), "the run started its cluster"
        time.sleep(8)  # the actors are up and driving
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr
        assert "Traceback" not in stderr, stderr
        assert _cluster_pids(ours) == [], "perflab stopped its cluster"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _cluster_pids(ours):  # only if the test failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------ check (nothing started)


def check(run_cli, tmp_path: Path, text: str, *, hide_ray: bool = False) -> subprocess.CompletedProcess[str]:
    exp = tmp_path / "e.toml"
    exp.write_text(text)
    if not hide_ray:
        return run_cli("check", exp, check=False)
    code = ("import sys; sys.modules['ray'] = None; from perflab.cli import main; "
            f"sys.exit(main(['check', {str(exp)!r}]))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def experiment(driver: str, target: str = 'kind = "postgres"', workload: str = 'kind = "tpcb"\nclients = 4') -> str:
    return (f'[experiment]\nname = "e"\n[target]\n{target}\n[workload]\n{workload}\n'
            f"[driver]\n{driver}\n")


@pytest.mark.parametrize(("driver_toml", "target", "workload", "path", "words"), [
    ('kind = "ray"\nworkers = 2', 'kind = "postgres"\ndsn = "host=/var/run/postgresql dbname=x"',
     'kind = "tpcb"\nclients = 4', "target.dsn", "unix socket"),
    ('kind = "ray"\nworkers = 2', 'kind = "postgres"\ndsn = "dbname=x"', 'kind = "tpcb"\nclients = 4',
     "target.dsn", "unix socket"),
    ('kind = "ray"\nworkers = 8', 'kind = "postgres"', 'kind = "tpcb"\nclients = 4', "driver.workers",
     "at most one worker per client"),
    ('kind = "local"\nworkers = 2', 'kind = "postgres"', 'kind = "tpcb"\nclients = 4', "driver",
     'only with kind = "ray"'),
    ('kind = "ray"', 'kind = "duckdb"', 'kind = "tpch"\nscale_factor = 0.01', "driver.kind",
     "does not run on the engine's load harness"),
    ('kind = "ray"\nworkers = 0', 'kind = "postgres"', 'kind = "tpcb"', "driver.workers", "greater than or equal to 1"),
])
def test_check_refuses_what_a_distributed_driver_cannot_do(run_cli, tmp_path, driver_toml, target, workload,
                                                           path, words) -> None:
    proc = check(run_cli, tmp_path, experiment(driver_toml, target, workload))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert path in proc.stderr and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_check_without_ray_names_the_extra(run_cli, tmp_path) -> None:
    proc = check(run_cli, tmp_path, experiment('kind = "ray"\nworkers = 2'), hide_ray=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "driver.kind" in proc.stderr and 'pip install "perflab[ray]"' in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    # The local driver needs no Ray.
    local = check(run_cli, tmp_path, experiment('kind = "local"'), hide_ray=True)
    assert local.returncode == 0, local.stderr


@pytest.mark.parametrize("target", ['kind = "postgres"', 'kind = "nginx"'])
def test_check_warns_that_a_cluster_elsewhere_cannot_reach_a_server_perflab_starts(run_cli, tmp_path,
                                                                                  target) -> None:
    """Every server perflab starts listens on 127.0.0.1 only (not PostgreSQL's alone)."""
    workload = 'kind = "http"\nclients = 4' if "nginx" in target else 'kind = "tpcb"\nclients = 4'
    proc = check(run_cli, tmp_path, experiment('kind = "ray"\nworkers = 2\naddress = "192.0.2.1:6379"', target,
                                               workload))
    assert proc.returncode == 0, proc.stderr
    assert "driver.address: workers of the cluster" in proc.stderr, proc.stderr


def test_check_does_not_warn_of_an_external_server_a_cluster_elsewhere_reaches(run_cli, tmp_path, tcp_pg) -> None:
    target = f'kind = "postgres"\ndsn = "{tcp_pg.conninfo}"\nallow_destructive = true'  # check writes nothing
    proc = check(run_cli, tmp_path, experiment('kind = "ray"\nworkers = 2\naddress = "192.0.2.1:6379"', target))
    assert proc.returncode == 0, proc.stderr
    assert "driver.address" not in proc.stderr, proc.stderr
