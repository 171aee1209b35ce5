"""The tpcb workload against a real PostgreSQL, next to the real pgbench.

Scale 1 and runs of 2-3 s keep this short; the speed comparison with pgbench
is a benchmark (benchmarks/tpcb_vs_pgbench.py), not a test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import ValidationError

from conftest import postmasters_under, server_stalled
from perflab import _engine
from perflab.context import RunContext, SeriesSink
from perflab.errors import Interrupted, RunFailure
from perflab.runner import interrupt_on_signals
from perflab.store import Store
from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget
from perflab.workloads import WORKLOADS
from perflab.workloads.harness import engine_settings_of
from perflab.workloads.tpcb import TpcbSettings, TpcbWorkload

APPLICATION = "perflab-tpcb"
# Both socket I/O paths of the driver; the failure-path tests run on each.
IO_METHODS = ("epoll", "uring")


class ListSink(SeriesSink):
    def __init__(self) -> None:
        self.points: list[tuple[str, str, float, float]] = []

    def add(self, source: str, name: str, t: float, value: float) -> None:
        self.points.append((source, name, t, value))


def workload(**settings: Any) -> TpcbWorkload:
    return TpcbWorkload(TpcbSettings.model_validate({"kind": "tpcb", "scale": 1, **settings}))


def context(tmp_path: Path, sink: SeriesSink | None = None) -> RunContext:
    return RunContext(run_number=1, run_dir=tmp_path, t0_ns=time.monotonic_ns(), series=sink or ListSink())


def pgbench(target: PostgresTarget, endpoint: PostgresEndpoint, *args: str) -> subprocess.CompletedProcess[str]:
    assert target.bin_dir is not None
    return subprocess.run(
        [str(target.bin_dir / "pgbench"), "-h", endpoint.host, "-p", str(endpoint.port), "-U", endpoint.user,
         *args, endpoint.dbname],
        capture_output=True, text=True, timeout=120,
    )


def table_shapes(endpoint: PostgresEndpoint) -> list[tuple[Any, ...]]:
    """Columns, fill factors and primary keys of the pgbench tables."""
    with endpoint.connect() as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type, character_maximum_length, is_nullable"
            " FROM information_schema.columns WHERE table_name LIKE 'pgbench_%'"
            " ORDER BY table_name, ordinal_position"
        ).fetchall()
        options = conn.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname LIKE 'pgbench_%' ORDER BY relname"
        ).fetchall()
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM pgbench_branches), (SELECT count(*) FROM pgbench_tellers),"
            " (SELECT count(*) FROM pgbench_accounts), (SELECT count(*) FROM pgbench_accounts WHERE filler IS NULL),"
            " (SELECT count(*) FROM pgbench_tellers WHERE filler IS NULL)"
        ).fetchall()
    return [*columns, *options, *counts]


def test_registered_and_settings_say_what_is_allowed() -> None:
    assert WORKLOADS.get("tpcb") is TpcbWorkload
    with pytest.raises(ValidationError, match="both duration and transactions"):
        TpcbSettings.model_validate({"kind": "tpcb", "duration": "5s", "transactions": 10})
    with pytest.raises(ValidationError, match="more than clients"):
        TpcbSettings.model_validate({"kind": "tpcb", "clients": 2, "threads": 4})
    with pytest.raises(ValidationError):
        TpcbSettings.model_validate({"kind": "tpcb", "script": "tpcc"})
    with pytest.raises(ValidationError, match="'auto', 'uring' or 'epoll'"):
        TpcbSettings.model_validate({"kind": "tpcb", "io": "poll"})
    assert TpcbSettings.model_validate({"kind": "tpcb"}).io == "auto"


@pytest.mark.parametrize("script", ["select-only", "tpcb-like"])
def test_io_uring_runs_balance_the_books_and_say_so(scratch_db, tmp_path, script) -> None:
    w = workload(script=script, protocol="prepared", clients=8, threads=2, duration="2s", io="uring")
    ctx = context(tmp_path)
    w.prepare(scratch_db, ctx)
    result = w.run(scratch_db, ctx)
    m = result.metrics
    assert m["transactions"].value > 50 and m["failed"].value == 0
    assert [e.message for e in result.events if e.kind == "io"] == ["io: io_uring (batched submission)"]
    # The enters are counted. How far they batch (select-only: about 0.55
    # per transaction at 8 clients on a quiet machine) is the benchmarks'
    # figure, not this test's: a loaded CI once read 1.06 per request on
    # HTTP's ring.
    assert m["io_enters_per_tx"].value > 0
    check = w.check(scratch_db, ctx)
    assert check.passed, check.checks
    # epoll is recorded too.
    w = workload(script="select-only", clients=1, transactions=10, io="epoll")
    result = w.run(scratch_db, ctx)
    assert [e.message for e in result.events if e.kind == "io"] == ["io: epoll (requested)"]
    assert "io_enters_per_tx" not in result.metrics
    # auto, the default, takes io_uring where it works, as it just did above
    # (the soak in benchmarks/uring_soak.py made it the default).
    w = workload(script="select-only", clients=1, transactions=10)
    result = w.run(scratch_db, ctx)
    assert [e.message for e in result.events if e.kind == "io"] == ["io: io_uring (batched submission)"]


def driver_cpus() -> list[str]:
    """The CPUs each of this process's driver threads may run on
    (Cpus_allowed_list, from /proc/self/task/*/status), sorted. Their names,
    perflab-driver-N, are cut to the kernel's 15 characters: the coordinator
    is perflab-driver."""
    out = []
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            status = (task / "status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        if name == "perflab-driver-":
            out.append(next(line.split()[1] for line in status.splitlines()
                            if line.startswith("Cpus_allowed_list:")))
    return sorted(out)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs; this process may use one")
def test_auto_pins_a_read_only_run_to_one_cpu_per_thread_and_leaves_writers_alone(scratch_db, tmp_path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    threads = len(cpus)
    ctx = context(tmp_path)
    workload(script="tpcb-like").prepare(scratch_db, ctx)
    seen: list[list[str]] = []
    stop = threading.Event()

    def watch() -> None:  # the threads' masks while they run
        while not stop.is_set():
            masks = driver_cpus()
            if len(masks) == threads:
                seen.append(masks)
            time.sleep(0.05)

    for script, pinned in (("select-only", True), ("tpcb-like", False)):
        seen.clear()
        stop.clear()
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            result = workload(script=script, clients=threads * 2, duration="1s").run(scratch_db, ctx)
        finally:
            stop.set()
            watcher.join()
        [note] = [e.message for e in result.events if e.kind == "pin"]
        assert seen, "the driver threads were never seen running"
        if pinned:
            places = ", ".join(f"thread {i} on CPU {c}" for i, c in enumerate(cpus))
            assert note == (f"driver threads pinned, one per CPU: {places} "
                            '(pin = "auto": read-only transactions, one thread per CPU)')
            assert seen[-1] == sorted(str(c) for c in cpus)
        else:
            assert note.startswith('driver threads not pinned (pin = "auto" pins only runs whose SQL'), note
            assert all("," in mask or "-" in mask for mask in seen[-1]), seen[-1]
    # off is off whatever the script; a wrong word is refused by the settings.
    result = workload(script="select-only", clients=threads, duration="0.5s", pin="off").run(scratch_db, ctx)
    assert [e.message for e in result.events if e.kind == "pin"] == ['driver threads not pinned (pin = "off")']
    with pytest.raises(ValidationError, match="'auto', 'on' or 'off'"):
        TpcbSettings.model_validate({"kind": "tpcb", "pin": "always"})


@contextlib.contextmanager
def backends_confined(target: PostgresTarget, cpu: int) -> Iterator[None]:
    """The test session's own postmaster, and so the backends it forks
    meanwhile, confined to `cpu`; its CPUs given back afterwards."""
    from perflab.targets.postgres.postmaster import postmaster_pid

    pid = postmaster_pid(target.data_dir)
    assert pid is not None
    before = os.sched_getaffinity(pid)
    os.sched_setaffinity(pid, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(pid, before)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="placement needs two CPUs; this process may use one")
def test_a_run_says_when_its_backends_ran_off_their_driver_threads_cpu(pg_target, scratch_db, tmp_path) -> None:
    # The session server's postmaster (this test's own) is confined to one
    # CPU, so the backends it forks for the run are too; the run's one driver
    # thread is pinned to the first CPU. Backends on another CPU: every
    # sample finds them off, and the run says so. On the thread's CPU: none.
    cpus = sorted(os.sched_getaffinity(0))
    ctx = context(tmp_path)
    workload(script="select-only").prepare(scratch_db, ctx)
    for backends_on, off in ((cpus[-1], 1.0), (cpus[0], 0.0)):
        with backends_confined(pg_target[0], backends_on):
            result = workload(script="select-only", clients=2, threads=1, duration="3s", pin="on",
                              follow=False).run(scratch_db, ctx)
            m = result.metrics
            assert [e.message for e in result.events if e.kind == "pin"][0].startswith(
                f"driver threads pinned, one per CPU: thread 0 on CPU {cpus[0]}")
            assert m["server_off_cpu_share"].value == off
            placement = [e.message for e in result.events if e.kind == "placement"]
            if off:
                [message] = placement
                assert message.startswith("server processes off their driver thread's CPU: in 3 of 3 s"), message
                assert message.endswith("1.00 1.00 1.00"), message
            else:
                assert placement == []
    # Unpinned, nothing is sampled: no figure, no event.
    result = workload(script="select-only", clients=2, threads=1, duration="1s", pin="off").run(scratch_db, ctx)
    assert "server_off_cpu_share" not in result.metrics
    assert not [e for e in result.events if e.kind == "placement"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="following needs two CPUs; this process may use one")
@pytest.mark.parametrize("io", ["uring", "epoll"])
def test_clients_follow_their_backends_to_the_driver_thread_on_their_cpu(pg_target, scratch_db, tmp_path,
                                                                          io) -> None:
    # Every backend on the last CPU (the session postmaster confined there):
    # the clients of the thread pinned elsewhere move to the thread on that
    # CPU after two samples off, once each, and the run goes on without a
    # failed transaction. With follow = false they stay, off in every sample.
    cpus = sorted(os.sched_getaffinity(0))
    ctx = context(tmp_path)
    workload(script="select-only").prepare(scratch_db, ctx)
    with backends_confined(pg_target[0], cpus[-1]):
        followed = workload(script="select-only", clients=4, threads=2, duration="4s", pin="on",
                            io=io).run(scratch_db, ctx)
        stayed = workload(script="select-only", clients=4, threads=2, duration="4s", pin="on", io=io,
                          follow=False).run(scratch_db, ctx)
    # Thread 0 (the first CPU) had clients 0 and 2: two moves, to thread 1.
    m = followed.metrics
    assert [e.message.split(" (")[0] for e in followed.events if e.kind == "io"] == [
        "io: io_uring" if io == "uring" else "io: epoll"]
    assert m["transactions"].value > 100 and m["failed"].value == 0 and m["lost_connections"].value == 0
    assert [e.message for e in followed.events if e.kind == "follow"] == [
        "clients followed their server processes: 2 moves of a client to the driver thread on its server "
        "process's CPU (4 of 4 clients' processes known)"]
    # Off in the two samples before the moves, then at home: no placement
    # event, since those seconds are the wait a following run expects.
    assert 0 < m["server_off_cpu_share"].value < 0.5
    assert not [e for e in followed.events if e.kind == "placement"]
    m = stayed.metrics
    assert m["failed"].value == 0
    assert [e.message for e in stayed.events if e.kind == "follow"] == [
        "clients did not follow their server processes (follow = false)"]
    assert m["server_off_cpu_share"].value == 0.5


def test_perflab_load_is_pgbench_load_and_pgbench_runs_on_it(pg_target, scratch_db, tmp_path) -> None:
    target, _ = pg_target
    w = workload(fillfactor=90)
    load = w.prepare(scratch_db, context(tmp_path))
    assert list(load.steps) == ["drop_tables", "create_tables", "generate", "vacuum", "primary_keys"]
    assert load.rows["pgbench_accounts"] == 100_000
    ours = table_shapes(scratch_db)
    # pgbench itself runs on perflab's data ...
    done = pgbench(target, scratch_db, "-n", "-c", "2", "-t", "50")
    assert done.returncode == 0, done.stderr
    assert "number of transactions actually processed: 100/100" in done.stdout
    # ... and `pgbench -i` builds the same tables.
    done = pgbench(target, scratch_db, "-i", "-s", "1", "-F", "90")
    assert done.returncode == 0, done.stderr
    assert table_shapes(scratch_db) == ours


def test_perflab_runs_on_pgbench_loaded_data(pg_target, scratch_db, tmp_path) -> None:
    target, _ = pg_target
    done = pgbench(target, scratch_db, "-i", "-s", "1")
    assert done.returncode == 0, done.stderr
    w = workload(clients=2, transactions=100, protocol="prepared")
    ctx = context(tmp_path)
    result = w.run(scratch_db, ctx)
    assert result.metrics["transactions"].value == 200
    check = w.check(scratch_db, ctx)
    assert check.passed, check.checks
    with scratch_db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM pgbench_history").fetchone()[0] == 200


@pytest.mark.parametrize(
    ("script", "protocol"),
    [("tpcb-like", "simple"), ("simple-update", "extended"), ("select-only", "prepared")],
)
def test_each_script_runs_and_the_books_balance(scratch_db, tmp_path, script, protocol) -> None:
    w = workload(script=script, protocol=protocol, clients=4, threads=2, duration="2s", warmup="1s")
    ctx = context(tmp_path)
    w.prepare(scratch_db, ctx)
    sink = ListSink()
    ctx.series = sink
    result = w.run(scratch_db, ctx)
    m = result.metrics
    assert m["transactions"].value > 50
    assert m["failed"].value == 0
    # TPS is over the measured window only: 2 s, warm-up excluded.
    assert 1.9 < m["measured_s"].value < 3.0
    # The context carries the measured window for collectors: after the 1 s warm-up.
    assert ctx.measure_start_s is not None and ctx.measure_end_s is not None
    assert ctx.measure_start_s >= 1.0
    assert ctx.measure_end_s - ctx.measure_start_s == pytest.approx(m["measured_s"].value)
    assert m["tps"].value == pytest.approx(m["transactions"].value / m["measured_s"].value)
    assert m["latency_p50_ms"].value <= m["latency_p99_ms"].value <= m["latency_max_ms"].value
    assert m["driver_cpu_s"].value > 0 and m["connect_time_mean_ms"].value > 0
    assert [h.name for h in result.histograms] == [f"latency.{script}"]
    summary = _engine.hdr_summary(result.histograms[0].data)
    assert summary.count == m["transactions"].value
    # Per-second series went to the live sink, the warm-up's second too (before the measured window:
    # the export labels it warm-up, the report does not draw it).
    tps_points = [(t, v) for source, name, t, v in sink.points if (source, name) == ("tpcb", "tps")]
    assert any(t <= ctx.measure_start_s + 1e-6 for t, _ in tps_points), tps_points
    assert any(t > ctx.measure_start_s + 0.5 for t, _ in tps_points), tps_points
    check = w.check(scratch_db, ctx)
    assert check.passed, check.checks
    with scratch_db.connect() as conn:
        history = conn.execute("SELECT count(*) FROM pgbench_history").fetchone()[0]
    if script == "select-only":
        assert history == 0
    else:  # warm-up and measured transactions all wrote history
        assert history >= m["transactions"].value


def test_serialization_failures_are_retried_and_counted_by_sqlstate(scratch_db, tmp_path) -> None:
    """Under SERIALIZABLE, clients updating scale 1's single branch row collide
    (SQLSTATE 40001): with max_tries they are retried, without they fail."""
    from dataclasses import replace

    from psycopg.conninfo import make_conninfo

    serializable = replace(scratch_db, conninfo=make_conninfo(
        scratch_db.conninfo, options="-c default_transaction_isolation=serializable"))
    ctx = context(tmp_path)
    workload().prepare(scratch_db, ctx)
    once = workload(clients=4, threads=2, duration="2s", protocol="prepared").run(serializable, ctx)
    assert once.metrics["errors.40001"].value > 0
    assert once.metrics["failed"].value == once.metrics["errors.40001"].value
    assert [h.name for h in once.histograms] == ["latency.tpcb-like", "failed_latency"]
    retried = workload(clients=4, threads=2, duration="2s", protocol="prepared", max_tries=50)
    result = retried.run(serializable, ctx)
    assert result.metrics["retries"].value > 0
    assert result.metrics["failed"].value < once.metrics["failed"].value
    check = retried.check(serializable, ctx)
    assert check.passed, check.checks


def test_histograms_of_runs_merge_exactly(scratch_db, tmp_path) -> None:
    w = workload(script="select-only", protocol="prepared", clients=2, transactions=300)
    w.prepare(scratch_db, context(tmp_path))
    parts = [w.run(scratch_db, context(tmp_path)).histograms[0].data for _ in range(2)]
    merged = _engine.hdr_summary(_engine.hdr_merge(parts))
    assert merged.count == 1200
    a, b = (_engine.hdr_summary(p) for p in parts)
    assert merged.max_us == max(a.max_us, b.max_us)
    assert merged.mean_us == pytest.approx((a.mean_us + b.mean_us) / 2, rel=1e-9)
    # Merging is exact: equal to one histogram of every value.
    values = [1, 10, 100, 1000, 10_000, 100_000, 3_000_000]
    halves = [_engine.hdr_encode(values[:3]), _engine.hdr_encode(values[3:])]
    assert _engine.hdr_summary(_engine.hdr_merge(halves)) == _engine.hdr_summary(_engine.hdr_encode(values))


def _server_processes(target: PostgresTarget) -> list[int]:
    pids = list(target.processes())
    assert pids, "the server has processes"
    return pids


@pytest.mark.slow
@pytest.mark.parametrize("io", IO_METHODS)
def test_open_loop_latency_shows_a_stalled_server(pg_target, scratch_db, tmp_path, io) -> None:
    """SIGSTOP the server for 2 s under a rate: the transactions scheduled
    meanwhile are late by up to 2 s, and latency from the intended start says so."""
    target, _ = pg_target
    w = workload(script="select-only", protocol="prepared", clients=4, threads=2, duration="5s", rate=200.0,
                 io=io)
    ctx = context(tmp_path)
    w.prepare(scratch_db, ctx)
    with server_stalled(lambda: _server_processes(target)):
        result = w.run(scratch_db, ctx)
    m = result.metrics
    assert m["latency_max_ms"].value > 1500, "the stall shows in full"
    # About 2 s of the 5 s schedule is stalled: p99 sits in seconds, not milliseconds.
    assert m["latency_p99_ms"].value > 1000
    assert m["lag_max_ms"].value > 1000
    # The rate is still met on average (the backlog drains after SIGCONT).
    assert m["tps"].value == pytest.approx(200, rel=0.25)


def with_suppressed_kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("io", IO_METHODS)
def test_a_lost_connection_ends_one_client_and_flags_the_run(scratch_db, tmp_path, io) -> None:
    w = workload(script="select-only", protocol="simple", clients=3, duration="3s", io=io)
    ctx = context(tmp_path)
    w.prepare(scratch_db, ctx)

    def terminate_one() -> None:
        with psycopg.connect(scratch_db.conninfo, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s AND datname = %s LIMIT 1",
                (APPLICATION, scratch_db.dbname),
            )

    timer = threading.Timer(1.0, terminate_one)
    timer.start()
    result = w.run(scratch_db, ctx)
    timer.join()
    assert "lost-connections" in result.flags
    assert result.metrics["lost_connections"].value == 1
    # One event of its kind, about a second in; its text is the server's or
    # the socket's, whichever the io path read first (not asserted).
    [lost] = [e for e in result.events if e.kind == "lost-connection"]
    assert lost.t > 0
    assert result.metrics["transactions"].value > 10, "the other clients went on"


def test_unreachable_server_is_a_clear_run_failure(scratch_db, tmp_path) -> None:
    from dataclasses import replace

    from psycopg.conninfo import make_conninfo

    w = workload(clients=2, duration="1s")
    ctx = context(tmp_path)
    w.prepare(scratch_db, ctx)
    wrong = replace(scratch_db, conninfo=make_conninfo(scratch_db.conninfo, user="no_such_role"))
    with pytest.raises(RunFailure, match="no_such_role"):
        w.run(wrong, ctx)
    # The engine's own message names where it tried and what the server said (its SQLSTATE:
    # on the managed server's socket, peer authentication refuses a role it does not map)
    with pytest.raises(ConnectionError, match='FATAL 28000: .*"no_such_role"'):
        _engine.tpcb_run(wrong.conninfo, script="select-only", scale=1, protocol="prepared", t0_ns=ctx.t0_ns,
                         harness=engine_settings_of(clients=2, threads=1, duration=1.0, io="epoll", pin="off", follow=False))


@pytest.mark.parametrize("io", IO_METHODS)
def test_sigint_stops_the_run_within_a_second(scratch_db, tmp_path, io) -> None:
    w = workload(script="select-only", protocol="prepared", clients=2, duration="30s", io=io)
    ctx = context(tmp_path)
    w.prepare(scratch_db, ctx)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    with interrupt_on_signals(), pytest.raises(Interrupted):
        w.run(scratch_db, ctx)
    # Stopped, not run to its 30 s (how soon is the machine's: a busy one is slower).
    assert time.monotonic() - started < 15
    # the server notices the closed sockets a moment later (longer on a busy machine)
    deadline = time.monotonic() + 10
    with scratch_db.connect() as conn:
        while True:
            left = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = %s",
                (APPLICATION, scratch_db.dbname),
            ).fetchone()[0]
            if left == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert left == 0, "every client connection is closed"


@pytest.mark.slow
@pytest.mark.parametrize("io", IO_METHODS)
def test_killing_the_server_fails_the_run_quickly(workdir, io) -> None:
    target = PostgresTarget(PostgresSettings.model_validate({"kind": "postgres"}), workdir / "target")
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, PostgresEndpoint)
        w = workload(clients=4, threads=2, duration="20s", io=io)
        ctx = context(workdir)
        w.prepare(endpoint, ctx)
        pids = _server_processes(target)
        threading.Timer(1.5, lambda: [with_suppressed_kill(p, signal.SIGKILL) for p in pids]).start()
        started = time.monotonic()
        with pytest.raises(RunFailure, match="connections were lost"):
            w.run(endpoint, ctx)
        assert time.monotonic() - started < 15, "no hang on a dead server: ended long before its 20 s"
    finally:
        target.teardown()
        shutil.rmtree(workdir / "target", ignore_errors=True)


def _children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


@pytest.mark.slow
def test_the_experiment_goes_on_after_the_server_is_killed(workdir, run_cli) -> None:
    """Through the CLI: the server is killed in run 1's run phase; run 1 is
    stored failed with a clear error, run 2 gets a new server and is done."""
    experiment = workdir / "kill.toml"
    experiment.write_text(
        '[experiment]\nname = "kill"\nrepetitions = 2\norder = "sequential"\n\n'
        '[target]\nkind = "postgres"\n\n'
        '[workload]\nkind = "tpcb"\nscale = 1\nclients = 2\nduration = "4s"\n'
    )
    out = workdir / "out"
    killed: list[int] = []

    def kill_in_run_phase() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            time.sleep(0.2)
            for pid in postmasters_under(out):
                lines = (next(out.rglob("postmaster.pid"))).read_text().splitlines()
                try:
                    with psycopg.connect(host=lines[4], port=int(lines[3]), user="perflab", dbname="postgres",
                                         autocommit=True, connect_timeout=2) as conn:
                        clients = conn.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (APPLICATION,)
                        ).fetchone()[0]
                except psycopg.Error:
                    continue
                if clients >= 2:  # both clients connected: the run phase
                    time.sleep(1.0)
                    for victim in [pid, *_children_of(pid)]:
                        with_suppressed_kill(victim, signal.SIGKILL)
                    killed.append(pid)
                    return

    killer = threading.Thread(target=kill_in_run_phase)
    killer.start()
    done = run_cli("run", experiment, "--out", out, "--quiet", "--no-report", check=False, timeout=300)
    killer.join()
    assert killed, f"the server was never seen in its run phase\n{done.stdout}\n{done.stderr}"
    store = Store.open(out)
    runs = {r["id"]: r for r in store.runs()}
    assert runs[1]["status"] == "failed"
    assert "connections were lost" in runs[1]["error"]
    assert runs[2]["status"] == "done", runs[2]
    assert not postmasters_under(out), "no server left running"
