"""The syscalls collector on a real managed PostgreSQL, with real bpftrace and
strace: WAL syncs by class, checkpoint fsyncs, the per-call records on the
run's clock, the cross-check with pg_stat_wal, only the server traced, and no
tracer left behind after a run, a Ctrl-C or a SIGKILL of perflab."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import cli_command
from perflab.collectors import COLLECTORS
from perflab.collectors.base import CollectorContext, CollectorUnavailable
from perflab.collectors.syscall_probes import (
    BUCKET_RELATIVE_ERROR,
    CALLS,
    SUB_BITS,
    SYNC_CALLS,
    Agg,
    bucket_bounds,
    bucket_of,
    percentile_from_buckets,
)
from perflab.collectors.syscalls import (
    CLASSES,
    SyscallsCollector,
    SyscallsSettings,
    bpftrace_problem,
    strace_problem,
)
from perflab.context import RunContext, SeriesSink

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="tracing needs root")


class ListSink(SeriesSink):
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, float, float]] = []

    def add(self, source: str, name: str, t: float, value: float) -> None:
        self.rows.append((source, name, t, value))


def _trace(mechanism: str, target: Any, endpoint: Any, work: Callable[[], Any],
           tmp: Path, keep: list[SyscallsCollector] | None = None) -> tuple[ListSink, Any, RunContext, float]:
    sink = ListSink()
    ctx = RunContext(run_number=1, run_dir=tmp, t0_ns=time.monotonic_ns(), series=sink)
    collector = SyscallsCollector("syscalls", SyscallsSettings(mechanism=mechanism, interval=0.5))
    if keep is not None:
        keep.append(collector)
    collector.start(CollectorContext(run=ctx, endpoint=endpoint, target=target))
    try:
        work()
    finally:
        result = collector.stop()
    return sink, result, ctx, ctx.now_s()


def _commits(endpoint: Any, n: int) -> None:
    with endpoint.connect() as conn:
        conn.autocommit = True
        conn.execute("SET synchronous_commit = on")
        conn.execute("CREATE TABLE IF NOT EXISTS sys_t (i int, pad text)")
        for i in range(n):
            conn.execute("INSERT INTO sys_t VALUES (%s, repeat('x', 200))", (i,))


def _tracers(parent: int | None = None) -> list[int]:
    """Live bpftrace and strace processes; with `parent`, only those it started
    (perflab starts its tracer itself): another experiment's are not a test's."""
    out = []
    for p in Path("/proc").glob("[0-9]*/comm"):
        try:
            if p.read_text().strip() in ("bpftrace", "strace"):
                fields = (p.parent / "stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] != "Z" and (parent is None or int(fields[1]) == parent):
                    out.append(int(p.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _alive(tracers: set[tuple[int, str | None]]) -> list[int]:
    """Those of `tracers` (pid, start time) still alive: the same processes, not a reused pid."""
    from perflab.guardian import start_time

    return [pid for pid, start in tracers if start is not None and start_time(pid) == start
            and pid in _tracers()]


def _server_tree(pm: int | None) -> list[int]:
    from perflab.proc import descendants

    return descendants(pm) if pm else []


def pids_gone(pids: set[int]) -> set[int]:
    """Pids that have exited since (a backend that closed): not checkable."""
    return {p for p in pids if not Path(f"/proc/{p}").exists()}


def _percentiles_in_bounds(m: dict[str, float]) -> None:
    """Every (call, class) row of a traced run: min <= p50 <= p99 <= max."""
    rows = 0
    for call in CALLS:
        for cls in CLASSES:
            p = f"syscalls.{cls}.{call}"
            if m.get(f"{p}.count"):
                rows += 1
                lo, p50, p99, hi = (m[f"{p}.{s}_us"] for s in ("min", "p50", "p99", "max"))
                assert lo <= p50 <= p99 <= hi, (p, lo, p50, p99, hi)
    assert rows > 3


def _bucketed(samples: Any) -> Agg:
    agg = Agg()
    for ns in samples:
        agg.add(int(ns))
    return agg


def test_bucket_keys_cover_every_duration_with_the_stated_width() -> None:
    import numpy as np

    rng = np.random.default_rng(26)
    values = [*range(0, 5000), *(int(v) for v in rng.integers(0, 2**40, 20000)), 2**40, 2**63 - 1]
    for ns in values:
        lo, hi = bucket_bounds(bucket_of(ns))
        assert lo <= ns < hi, ns
        assert hi - lo == 1 or (hi - lo) / lo <= BUCKET_RELATIVE_ERROR, (ns, lo, hi)
    # below 2^(SUB_BITS + 1) ns every duration is its own bucket
    assert all(bucket_bounds(bucket_of(ns)) == (ns, ns + 1) for ns in range(2 ** (SUB_BITS + 1)))
    # keys grow with the duration (the histogram is read in key order)
    keys = [bucket_of(ns) for ns in sorted(values)]
    assert keys == sorted(keys)


@pytest.mark.parametrize("distribution", ["lognormal", "exponential", "uniform", "tiny"])
@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000, 100_000])
def test_percentiles_from_buckets_are_inside_min_max_and_the_stated_error(distribution: str, n: int) -> None:
    """The same samples bucketed as the BPF program buckets them: each
    percentile from the histogram against numpy.percentile of the samples."""
    import numpy as np

    rng = np.random.default_rng(n)
    raw = {"lognormal": lambda: rng.lognormal(np.log(20_000), 1.2, n),  # ns: a read, around 20 us
           "exponential": lambda: rng.exponential(300_000, n),  # an fsync-like tail
           "uniform": lambda: rng.uniform(5_000, 9_000_000, n),
           "tiny": lambda: rng.uniform(0, 100, n)}[distribution]()  # inside the exact buckets
    samples = np.floor(raw).astype(np.int64)  # the kernel's nanoseconds are integers
    agg = _bucketed(samples)
    assert agg.count == n and agg.min_ns == samples.min() and agg.max_ns == samples.max()
    for q in (0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0):
        exact = float(np.percentile(samples, q * 100))
        got = percentile_from_buckets(agg.buckets, q, agg.min_ns, agg.max_ns)
        assert agg.min_ns <= got <= agg.max_ns, (q, got)
        assert abs(got - exact) <= BUCKET_RELATIVE_ERROR * exact + 1e-9, (distribution, n, q, got, exact)
    # one sample: every percentile is it
    if n == 1:
        assert percentile_from_buckets(agg.buckets, 0.99, agg.min_ns, agg.max_ns) == samples[0]


def test_the_old_log2_defect_is_gone() -> None:
    """The issue's row: one pwrite64 of 13.56 us read p50 12, p99 15.92 from
    its log2 bucket [8, 16) us. Now both are 13.56 us."""
    agg = _bucketed([13_560])
    for q in (0.5, 0.99):
        assert percentile_from_buckets(agg.buckets, q, agg.min_ns, agg.max_ns) == 13_560


def test_registered_and_not_default_on() -> None:
    assert "syscalls" in COLLECTORS.names()
    assert COLLECTORS.get("syscalls").default_on is False


@needs_root
@pytest.mark.skipif(bpftrace_problem() is not None, reason=str(bpftrace_problem()))
def test_bpftrace_wal_and_checkpoint_syncs_records_cross_check_and_only_the_server(pg_target, workdir: Path) -> None:
    target, endpoint = pg_target
    with endpoint.connect() as conn:
        conn.autocommit = True
        conn.execute("ALTER SYSTEM SET track_wal_io_timing = on")
        conn.execute("SELECT pg_reload_conf()")
    dd_pids: list[int] = []

    def work() -> None:
        _commits(endpoint, 400)
        with endpoint.connect() as conn:
            conn.autocommit = True
            conn.execute("CREATE TABLE IF NOT EXISTS sys_ck AS SELECT g FROM generate_series(1, 10000) g")
            conn.execute("UPDATE sys_ck SET g = g + 1")
            conn.execute("CHECKPOINT")
        # a process outside the server that fsyncs: it must not be traced
        dd = subprocess.Popen(["dd", "if=/dev/zero", f"of={workdir}/dd.out", "bs=64k", "count=16", "conv=fsync"],
                              stderr=subprocess.DEVNULL)
        dd_pids.append(dd.pid)
        dd.wait()
        time.sleep(0.6)  # an interval's print

    kept: list[SyscallsCollector] = []
    sink, result, ctx, end_s = _trace("bpftrace", target, endpoint, work, workdir, kept)
    m = {k: v.value for k, v in result.metrics.items()}
    assert m["syscalls.mechanism_strace"] == 0
    _percentiles_in_bounds(m)
    # the kernel's histogram keys are Python's bucket_of: every recorded sync
    # lands in the bucket the BPF program counted it in
    records: dict[tuple[str, str], dict[int, int]] = {}
    for call, cls, _, _, dur_ns in kept[0]._data.records:
        slot = records.setdefault((call, cls), {})
        slot[bucket_of(dur_ns)] = slot.get(bucket_of(dur_ns), 0) + 1
    kernel = {key: agg.buckets for key, agg in kept[0]._data.aggs.items() if key[0] in SYNC_CALLS and agg.count}
    assert records and records == kernel
    wal_syncs = m.get("syscalls.wal.fdatasync.count", 0) + m.get("syscalls.wal.fsync.count", 0)
    assert wal_syncs > 0, m
    assert m["syscalls.base.fsync.count"] > 0, m  # the checkpoint's
    assert m["syscalls.wal.writes"] > 0 and m["syscalls.base.opens"] >= 0
    for stat in ("mean_us", "min_us", "p50_us", "p99_us", "max_us"):
        assert m[f"syscalls.wal.fdatasync.{stat}"] > 0 or m[f"syscalls.wal.fsync.{stat}"] > 0
    # the cross-check: every commit's WAL flush is one sync PostgreSQL counts too
    assert abs(m["syscalls.wal_sync_ratio"] - 1) <= 0.10, (m["syscalls.wal_syncs"],
                                                           m["syscalls.pg.pg_stat_wal.wal_sync"])
    assert m["syscalls.pg.pg_stat_wal.wal_sync_time"] > 0
    # every sync recorded, in order, on the run's clock, inside the run
    records = [(n, t, v) for _, n, t, v in sink.rows if n.startswith("call.") and not n.endswith(".pid")]
    assert len(records) == m["syscalls.sync_records"] >= wal_syncs
    # in order per class (the seed's figure: successive calls); a class's syncs
    # come in the order they were made
    for cls in ("wal", "base"):
        times = [t for n, t, _ in records if n.split(".")[1] == cls]
        assert times == sorted(times), cls
    assert all(0 <= t <= end_s for _, t, _ in records), (records[0], records[-1], end_s)
    assert {n.split(".")[1] for n, _, _ in records} >= {"wal", "base"}
    # only the server: no record from dd, every recorded pid a server process
    pids = {int(v) for _, n, _, v in sink.rows if n.endswith(".pid")}
    assert dd_pids and not pids & set(dd_pids)
    server = {target.postmaster_pid(), *(int(p) for p in _server_tree(target.postmaster_pid()))}
    assert pids <= server | pids_gone(pids), (pids, server)
    assert any(n.endswith("_per_s") for _, n, _, _ in sink.rows)
    assert any(e.kind == "syscalls-traced" and "bpftrace" in e.message for e in result.events)
    assert any("agree" in e.message for e in result.events), [e.message for e in result.events]
    assert m["syscalls.tracer_cpu_s"] >= 0
    assert _tracers(os.getpid()) == []


@needs_root
@pytest.mark.skipif(strace_problem() is not None, reason=str(strace_problem()))
def test_strace_fallback_counts_wal_syncs(pg_target, workdir: Path) -> None:
    target, endpoint = pg_target
    sink, result, ctx, end_s = _trace("strace", target, endpoint, lambda: _commits(endpoint, 100), workdir)
    m = {k: v.value for k, v in result.metrics.items()}
    assert m["syscalls.mechanism_strace"] == 1
    _percentiles_in_bounds(m)
    assert m.get("syscalls.wal.fdatasync.count", 0) + m.get("syscalls.wal.fsync.count", 0) > 0, m
    assert m["syscalls.wal.writes"] > 0
    assert abs(m["syscalls.wal_sync_ratio"] - 1) <= 0.10, m
    records = [t for _, n, t, _ in sink.rows if n.startswith("call.") and not n.endswith(".pid")]
    assert records and records == sorted(records) and all(0 <= t <= end_s for t in records)
    assert any(e.kind == "syscalls-traced" and "strace" in e.message for e in result.events)
    assert _tracers(os.getpid()) == []


def test_unavailable_without_a_managed_server(workdir: Path) -> None:
    ctx = RunContext(run_number=1, run_dir=workdir, t0_ns=time.monotonic_ns())
    with pytest.raises(CollectorUnavailable, match="manages"):
        SyscallsCollector("syscalls", SyscallsSettings()).start(CollectorContext(run=ctx, endpoint=None,
                                                                                 target=None))


EXPERIMENT = """
[experiment]
name = "syscalls-{name}"
[target]
kind = "postgres"
[target.settings]
shared_buffers = "32MB"
[workload]
kind = "sql"
statements = ["CREATE TABLE IF NOT EXISTS t (i int)", "INSERT INTO t VALUES (1)"]
duration = "{duration}"
[collect]
syscalls = {{ interval = "1s" }}
"""


def _experiment(workdir: Path, name: str, duration: str) -> Path:
    path = workdir / f"{name}.toml"
    path.write_text(EXPERIMENT.format(name=name, duration=duration))
    return path


@needs_root
@pytest.mark.skipif(bpftrace_problem() is not None, reason=str(bpftrace_problem()))
def test_a_run_stores_the_trace_and_the_report_draws_it(workdir: Path, run_cli) -> None:
    out = workdir / "out"
    run_cli("run", _experiment(workdir, "run", "3s"), "--out", out, "--quiet")
    # the run's perflab is gone: a tracer it left would now be init's child (another
    # experiment's tracers are their live perflab's children, and not this test's)
    assert _tracers(1) == []
    conn = sqlite3.connect(out / "perflab.sqlite") if (out / "perflab.sqlite").exists() else None
    if conn is None:
        [db] = list(out.glob("*.sqlite")) or list(out.glob("*.db"))
        conn = sqlite3.connect(db)
    metrics = dict(conn.execute("SELECT name, value FROM metric WHERE name LIKE 'syscalls.%'").fetchall())
    assert metrics["syscalls.mechanism_strace"] == 0
    assert metrics["syscalls.wal.writes"] > 0
    kinds = [k for (k,) in conn.execute("SELECT kind FROM event")]
    assert "syscalls-traced" in kinds
    assert conn.execute("SELECT count(*) FROM series WHERE source = 'syscalls' AND name LIKE 'call.wal.%'"
                        ).fetchone()[0] > 0
    report = next(out.rglob("*.html")).read_text()
    assert "System calls by storage layout" in report
    assert 'id="fig-syscalls-successive"' in report


def _start_run(workdir: Path, name: str) -> tuple[subprocess.Popen[bytes], Path]:
    out = workdir / "out"
    log = workdir / "perflab.log"
    with log.open("wb") as f:
        run = subprocess.Popen(cli_command("run", _experiment(workdir, name, "120s"), "--out", out, "--quiet",
                                           "--no-report"), stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not _tracers(run.pid):
        assert run.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the tracer did not start"
        time.sleep(0.05)
    time.sleep(2)  # attached and tracing
    return run, log


@needs_root
@pytest.mark.skipif(bpftrace_problem() is not None, reason=str(bpftrace_problem()))
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_no_tracer_left_after_ctrl_c_or_sigkill(workdir: Path, sig: int) -> None:
    from perflab.guardian import start_time

    run, log = _start_run(workdir, f"sig{int(sig)}")
    mine = {(pid, start_time(pid)) for pid in _tracers(run.pid)}  # this run's, never another's
    try:
        assert _alive(mine)
        run.send_signal(sig)
        run.wait(timeout=60)
        deadline = time.monotonic() + 5  # the guardian's promise
        while _alive(mine) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(mine) == [], log.read_text()
    finally:
        if run.poll() is None:
            run.kill()
        for pid in _alive(mine):
            os.kill(pid, signal.SIGKILL)


def test_journal_kind_kill_process_is_known() -> None:
    from perflab.guardian import TOKEN_VAR, UNDO, kill_process, new_token

    assert UNDO["kill-process"] is kill_process
    # a process that is not the journaled one (start time differs) is left alone
    token = new_token()
    proc = subprocess.Popen(["sleep", "30"], env={**os.environ, TOKEN_VAR: token})
    try:
        kill_process({"pid": proc.pid, "start": "0", "token": token})
        assert proc.poll() is None
        start = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        kill_process({"pid": proc.pid, "start": start, "token": token})
        assert proc.wait(timeout=5) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()


def test_check_warns_when_neither_tracer_is_there(workdir: Path, run_cli) -> None:
    experiment = _experiment(workdir, "check", "2s")
    empty = workdir / "empty-path"
    empty.mkdir()
    proc = run_cli("check", experiment, env={"PATH": str(empty)})
    assert "collect.syscalls: a run would skip it: neither tracer works here: bpftrace is not installed; " \
           "strace is not installed" in proc.stderr + proc.stdout
