"""The managed `mariadb` target and the external `mysql` target, on a real
MariaDB (Debian's mariadb-server, which ./dev setup installs), with the sql
workload and the mysqlstat collector."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import _tempdir, start_run_until
from perflab.errors import UserError
from perflab.targets.mariadb import MariadbSettings, MariadbTarget, MysqlEndpoint, find_binaries

try:
    find_binaries(None)
    import pymysql
except (UserError, ImportError) as exc:
    pytest.skip(f"no MariaDB here ({exc}): apt-get install mariadb-server and pip install PyMySQL "
                "(./dev setup does both)", allow_module_level=True)


def mariadbd_under(directory: Path, serving: bool = False) -> list[int]:
    """Live mariadbd processes whose option file lies under `directory` (only
    the server, not mariadb-install-db's bootstrap, with `serving`)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if serving and "--bootstrap" in text:
            continue
        if "mariadbd" in text and f"--defaults-file={directory}" in text and state not in ("Z", "X"):
            pids.append(int(cmdline.parent.name))
    return pids


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[MariadbTarget, MysqlEndpoint]]:
    """One managed MariaDB on TCP for the module (for the external target's tests)."""
    d = _tempdir("perflab-mariadb-module-")
    target = MariadbTarget(MariadbSettings(kind="mariadb", listen="tcp",
                                           settings={"innodb_buffer_pool_size": "32M"}), d)
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, MysqlEndpoint)
        yield target, endpoint
    finally:
        target.teardown()
        subprocess.run(["rm", "-rf", str(d)], check=False)


def _sql_experiment(path: Path, target: str, duration: str = "1s", factors: str = "", setup: bool = True) -> Path:
    setup_text = ('setup = ["DROP TABLE IF EXISTS t", "CREATE TABLE t (id INT PRIMARY KEY, v INT)", '
                  '"INSERT INTO t SELECT seq, seq FROM seq_1_to_1000"]\n') if setup else ""
    path.write_text(f"""
[experiment]
name = "mariadb-test"

{target}

[workload]
kind = "sql"
{setup_text}statements = [{{ name = "one", sql = "SELECT 1" }}]
duration = "{duration}"

{factors}

[collect]
mysqlstat = {{ interval = "0.5s" }}
""")
    return path


def test_managed_server_starts_as_mysql_answers_and_stops(workdir: Path) -> None:
    target = MariadbTarget(MariadbSettings(kind="mariadb", storage={"redo_dir": str(workdir / "redo"),
                                                                    "undo_dir": str(workdir / "undo")}),
                           workdir / "target")
    try:
        endpoint = target.provision()
        pids = list(target.processes())
        assert len(pids) == 1
        uid = int(next(line for line in Path(f"/proc/{pids[0]}/status").read_text().splitlines()
                       if line.startswith("Uid:")).split()[1])
        assert uid != 0, "perflab runs no server as root"
        if os.geteuid() == 0:
            import pwd

            assert uid == pwd.getpwnam("mysql").pw_uid  # Debian's package's user, the default run_as
        with endpoint.connect() as conn:
            assert conn.execute("SELECT DATABASE()").fetchone()[0] == "perflab"
            conn.execute("CREATE TABLE t (a INT) ENGINE=InnoDB; INSERT INTO t VALUES (1)")
        # the redo log and the undo tablespaces are where target.storage put them
        assert list((workdir / "redo").glob("ib_logfile*"))
        assert list((workdir / "undo").glob("undo*"))
        described = target.describe()
        assert described["server"].startswith("MariaDB 10.") and described["version"].startswith("10.")
        # the option file is perflab's, and the server read no other
        assert "/etc/mysql" not in Path(described["option_file"]).read_text()
    finally:
        target.teardown()
    assert target.check_alive() is not None
    assert mariadbd_under(workdir) == []


def test_a_settings_typo_is_refused_by_check(workdir: Path, run_cli) -> None:
    experiment = _sql_experiment(workdir / "e.toml", '[target]\nkind = "mariadb"\n'
                                 '[target.settings]\ninnodb_bufer_pool_size = "64M"\n')
    proc = run_cli("check", experiment, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "target.settings.innodb_bufer_pool_size" in proc.stderr
    assert "did you mean innodb_buffer_pool_size?" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_sigkilled_perflab_leaves_no_server(workdir: Path) -> None:
    out = workdir / "out"
    experiment = _sql_experiment(workdir / "e.toml", '[target]\nkind = "mariadb"\n', duration="60s")
    run = start_run_until(experiment, out, lambda: mariadbd_under(out))
    try:
        time.sleep(0.5)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        # the guardian's promise (within 5 s) is a quiet machine's figure, timed by
        # benchmarks/host_changes.py; here the deadline only tells a hang from a busy machine
        deadline = time.monotonic() + 60
        while mariadbd_under(out) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mariadbd_under(out) == [], "the guardian did not stop the server within 60 s"
    finally:
        if run.poll() is None:
            run.kill()
        for pid in mariadbd_under(out):  # only if the test failed
            os.kill(pid, signal.SIGKILL)


def test_a_killed_server_fails_its_run_clearly_and_the_experiment_goes_on(workdir: Path) -> None:
    out = workdir / "out"
    experiment = _sql_experiment(workdir / "e.toml", '[target]\nkind = "mariadb"\n', duration="4s",
                                 factors='[factors]\n"target.settings.max_connections" = [40, 50]\n')
    run = start_run_until(experiment, out, lambda: mariadbd_under(out, serving=True))
    try:
        time.sleep(1.5)
        for pid in mariadbd_under(out):
            os.kill(pid, signal.SIGKILL)
        # exit status 1: a run failed; the experiment finished
        assert run.wait(timeout=180) == 1, (out.parent / "perflab.log").read_text()
    finally:
        if run.poll() is None:
            run.kill()
    db = sqlite3.connect(out / "perflab.sqlite")
    rows = db.execute("SELECT status, error FROM run ORDER BY id").fetchall()
    assert rows[0][0] == "failed" and rows[1][0] == "done", rows
    assert "MariaDB server is not running" in rows[0][1] or "Lost connection" in rows[0][1], rows[0][1]
    assert mariadbd_under(out) == []


def test_external_target_refuses_a_wrong_password_at_check(server, workdir: Path, run_cli) -> None:
    _, endpoint = server
    with endpoint.connect() as conn:
        conn.execute("CREATE USER IF NOT EXISTS 'perflab_pw'@'127.0.0.1' IDENTIFIED BY 'right-pw'")
    target = f'[target]\nkind = "mysql"\ndsn = "mysql://perflab_pw:wrong-pw@127.0.0.1:{endpoint.port}/"\n'
    proc = run_cli("check", _sql_experiment(workdir / "e.toml", target, setup=False), check=False)
    assert proc.returncode == 2, proc.stderr
    assert "refused the login" in proc.stderr and "wrong-pw" not in proc.stderr
    assert not (workdir / "out").exists()


def test_external_target_writes_only_in_its_own_marked_database(server, workdir: Path, run_cli) -> None:
    _, endpoint = server
    with endpoint.connect() as conn:
        conn.execute("CREATE USER IF NOT EXISTS 'perflab_ext'@'127.0.0.1' IDENTIFIED BY 'ext-pw'")
        conn.execute("GRANT ALL ON *.* TO 'perflab_ext'@'127.0.0.1'")
        conn.execute("DROP DATABASE IF EXISTS perflab_sql")
    dsn = f"mysql://perflab_ext:ext-pw@127.0.0.1:{endpoint.port}/"
    # read-only by default: a workload that writes is refused at check
    proc = run_cli("check", _sql_experiment(workdir / "ro.toml", f'[target]\nkind = "mysql"\ndsn = "{dsn}"\n'),
                   check=False)
    assert proc.returncode == 2 and "target.allow_destructive" in proc.stderr, proc.stderr
    # 2 s, so that mysqlstat's 0.5-s intervals fall inside the run on a busy machine too
    experiment = _sql_experiment(workdir / "rw.toml", f'[target]\nkind = "mysql"\ndsn = "{dsn}"\n'
                                 "allow_destructive = true\n", duration="2s")
    run_cli("run", experiment, "--out", workdir / "out", "--quiet", "--no-report")
    with endpoint.connect() as conn:
        assert conn.execute("SELECT count(*) FROM perflab_sql.t").fetchone()[0] == 1000
        marker = conn.execute("SELECT out_dir FROM perflab_sql.perflab_owner").fetchone()[0]
        assert marker == str(workdir / "out")
        assert conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'perflab' "
                            "AND table_name = 't'").fetchone()[0] == 0
    # mysqlstat gave deltas per interval: the workload's SELECTs, counted per second
    db = sqlite3.connect(workdir / "out" / "perflab.sqlite")
    selects = [v for (v,) in db.execute("SELECT value FROM series WHERE source = 'mysqlstat' "
                                        "AND name = 'com.select_per_s'")]
    assert selects and max(selects) > 10, selects
    hit = [v for (v,) in db.execute("SELECT value FROM series WHERE source = 'mysqlstat' "
                                    "AND name = 'innodb.buffer_pool_hit_pct'")]
    assert hit and all(0 <= v <= 100 for v in hit)
    target_json = json.loads(db.execute("SELECT target_json FROM run").fetchone()[0])
    assert target_json["server"].startswith("MySQL-protocol 10.")
    # `perflab clean` removes the database the experiment left, and nothing else
    proc = run_cli("clean", workdir / "out", "--yes")
    assert "removed database perflab_sql" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    with endpoint.connect() as conn:
        assert conn.execute("SELECT count(*) FROM information_schema.schemata "
                            "WHERE schema_name = 'perflab_sql'").fetchone()[0] == 0
    # a database of that name that is not perflab's is refused, and left as it is
    with endpoint.connect() as conn:
        conn.execute("CREATE DATABASE perflab_sql")
        conn.execute("CREATE TABLE perflab_sql.mine (a INT)")
    proc = run_cli("run", experiment, "--out", workdir / "out2", "--quiet", "--no-report", check=False)
    assert "is not marked as perflab's" in proc.stdout + proc.stderr
    with endpoint.connect() as conn:
        tables = [r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables "
                                             "WHERE table_schema = 'perflab_sql'").fetchall()]
        assert tables == ["mine"]
        conn.execute("DROP DATABASE perflab_sql")


def test_a_sql_script_file_runs_whole(server) -> None:
    _, endpoint = server
    with endpoint.connect() as conn:
        rows = conn.execute("DROP TABLE IF EXISTS s; CREATE TABLE s (a INT); INSERT INTO s VALUES (1), (2); "
                            "SELECT sum(a) FROM s").fetchall()
        assert rows == [(3,)]
        conn.execute("DROP TABLE s")


@pytest.fixture(scope="module")
def traced_server() -> Iterator[tuple[MariadbTarget, MysqlEndpoint, Path]]:
    """A managed MariaDB with its redo log and undo tablespaces in directories
    of their own and the binary log on, each commit synced."""
    d = _tempdir("perflab-mariadb-traced-")
    target = MariadbTarget(MariadbSettings(
        kind="mariadb", storage={"redo_dir": str(d / "redo"), "undo_dir": str(d / "undo")},
        settings={"innodb_buffer_pool_size": "32M", "log_bin": True, "sync_binlog": 1,
                  "innodb_flush_log_at_trx_commit": 1}), d / "target")
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, MysqlEndpoint)
        yield target, endpoint, d
    finally:
        target.teardown()
        subprocess.run(["rm", "-rf", str(d)], check=False)


@pytest.mark.parametrize("mechanism", ["bpftrace", "strace"])
def test_syscalls_classifies_innodb_files(traced_server, mechanism: str) -> None:
    from perflab.collectors.base import CollectorContext
    from perflab.collectors.syscalls import (
        SyscallsCollector,
        SyscallsSettings,
        bpftrace_problem,
        strace_problem,
    )
    from perflab.context import RunContext

    problem = {"bpftrace": bpftrace_problem, "strace": strace_problem}[mechanism]()
    if os.geteuid() != 0 or problem is not None:
        pytest.skip(problem or "tracing needs root")
    target, endpoint, d = traced_server
    classes = {fc.name: fc for fc in target.file_classes()}
    assert classes["redo"].directory == (d / "redo").resolve() and classes["binlog"].prefix.endswith("-bin.")

    class Sink:
        def add(self, source: str, name: str, t: float, value: float) -> None:
            pass

    ctx = RunContext(run_number=1, run_dir=d, t0_ns=time.monotonic_ns(), series=Sink())  # type: ignore[arg-type]
    collector = SyscallsCollector("syscalls", SyscallsSettings(mechanism=mechanism, interval=0.5))
    collector.start(CollectorContext(run=ctx, endpoint=endpoint, target=target))
    try:
        with endpoint.connect() as conn:
            conn.execute(f"CREATE TABLE traced_{mechanism} (i INT PRIMARY KEY, pad VARCHAR(200)) ENGINE=InnoDB")
            for i in range(100):  # autocommit: each commit syncs the redo log and the binary log
                conn.execute(f"INSERT INTO traced_{mechanism} VALUES (%s, REPEAT('x', 200))", (i,))
        time.sleep(0.6)
    finally:
        result = collector.stop()
    m = {k: v.value for k, v in result.metrics.items()}
    syncs = {cls: sum(m.get(f"syscalls.{cls}.{call}.count", 0) for call in ("fsync", "fdatasync"))
             for cls in ("redo", "binlog")}
    assert syncs["redo"] >= 50 and syncs["binlog"] >= 50, (syncs, m)
    assert m.get("syscalls.redo.writes", 0) > 0 and m.get("syscalls.binlog.writes", 0) > 0, m
    assert m.get("syscalls.data.opens", 0) > 0, m  # the new table's .ibd


def test_mysqlstat_gives_exact_deltas_without_its_own_statements(server) -> None:
    from perflab.collectors.base import CollectorContext, CollectorSettings
    from perflab.collectors.mysqlstat import MysqlstatCollector
    from perflab.context import RunContext

    _, endpoint = server
    rows: list[tuple[str, float]] = []

    class Sink:
        def add(self, source: str, name: str, t: float, value: float) -> None:
            rows.append((name, value))

    with endpoint.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS counted; CREATE TABLE counted (i INT PRIMARY KEY)")
        ctx = RunContext(run_number=1, run_dir=Path("/tmp"), t0_ns=time.monotonic_ns(), series=Sink())  # type: ignore[arg-type]
        collector = MysqlstatCollector("mysqlstat", CollectorSettings(interval=0.2))
        collector.start(CollectorContext(run=ctx, endpoint=endpoint, target=None))
        try:
            for i in range(40):
                conn.execute("INSERT INTO counted VALUES (%s)", (i,))
            for i in range(25):
                conn.execute("SELECT i FROM counted WHERE i = %s", (i,))
            time.sleep(0.5)
        finally:
            result = collector.stop()
        conn.execute("DROP TABLE counted")
    m = {k: v.value for k, v in result.metrics.items()}
    assert m["mysqlstat.com.insert"] == 40 and m["mysqlstat.com.select"] == 25, m
    assert m["mysqlstat.questions"] == 65 and m["mysqlstat.com.other"] == 0, m
    assert m["mysqlstat.innodb.buffer_pool_read_requests"] > 0
    rates = [v for n, v in rows if n == "com.insert_per_s"]
    assert len(rates) >= 2 and max(rates) > 0 and all(v >= 0 for v in rates)


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and mounts need root")
def test_managed_server_in_a_cgroup_with_its_redo_log_on_a_scratch_tmpfs(workdir: Path) -> None:
    from perflab.hostctl.mounts import mount_entry

    target = MariadbTarget(MariadbSettings(kind="mariadb", resources={"memory": "1G"},
                                           storage={"redo_fs": {"type": "tmpfs", "size": "256M"}}),
                           workdir / "target")
    try:
        target.provision()
        redo = next(fc.directory for fc in target.file_classes() if fc.name == "redo")
        entry = mount_entry(redo.parent)
        assert entry is not None and entry["type"] == "tmpfs"
        assert [p.name for p in redo.iterdir()] == ["ib_logfile0"]
        usage = target.resource_usage()
        assert usage["memory_limit_bytes"] == 2**30 and usage["memory_current_bytes"] > 0, usage
        assert target.describe()["scratch_fs"]["redo"]
    finally:
        target.teardown()
    assert mount_entry(workdir / "target" / "perflab-redo-fs") is None
    assert mariadbd_under(workdir) == []


def test_a_read_only_endpoint_refuses_writes_and_ddl(server) -> None:
    import dataclasses

    _, endpoint = server
    with endpoint.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS kept (a INT)")
    read_only = dataclasses.replace(endpoint, read_only=True)
    with read_only.connect() as conn:
        for sql in ("INSERT INTO kept VALUES (1)", "DROP TABLE kept", "CREATE DATABASE perflab_never"):
            with pytest.raises(pymysql.err.MySQLError, match="READ ONLY"):
                conn.execute(sql)
    with endpoint.connect() as conn:
        assert conn.execute("SELECT count(*) FROM kept").fetchone()[0] == 0
        conn.execute("DROP TABLE kept")


def test_queries_workload_with_params_streams_and_a_timeout(server, workdir: Path, run_cli) -> None:
    _, endpoint = server
    with endpoint.connect() as conn:
        conn.execute("CREATE USER IF NOT EXISTS 'perflab_q'@'127.0.0.1' IDENTIFIED BY 'q-pw'")
        conn.execute("GRANT ALL ON *.* TO 'perflab_q'@'127.0.0.1'")
    (workdir / "prep.sql").write_text("DROP TABLE IF EXISTS t;\nCREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB;\n"
                                      "INSERT INTO t SELECT seq FROM seq_1_to_1000;\n")
    experiment = workdir / "q.toml"
    experiment.write_text(f"""
[experiment]
name = "q"
[target]
kind = "mysql"
dsn = "mysql://perflab_q:q-pw@127.0.0.1:{endpoint.port}/"
allow_destructive = true
[workload]
kind = "queries"
prepare = "prep.sql"
queries = {{ point = "SELECT * FROM t WHERE id = $id", slow = "SELECT SLEEP(10)" }}
params = {{ point = {{ id = {{ min = 1, max = 1000 }} }} }}
streams = 2
repetitions = 3
query_timeout = "2s"
""")
    out = workdir / "out"
    run_cli("run", experiment, "--out", out, "--quiet", "--no-report")
    db = sqlite3.connect(out / "perflab.sqlite")
    rows = dict(((q, s), n) for q, s, n in db.execute("SELECT query, status, count(*) FROM query GROUP BY 1, 2"))
    # a point query that timed out shows its time and error: under a loaded CI a
    # 1-s limit once ended one (hence 2 s, still a fifth of the sleep it cuts short)
    assert rows == {("point", "ok"): 6, ("slow", "timeout"): 6}, (
        rows, list(db.execute("SELECT query, status, seconds, error FROM query WHERE status != 'ok'")))
    assert max(s for (s,) in db.execute("SELECT seconds FROM query WHERE query = 'slow'")) < 5
    run_cli("clean", out, "--yes")


# ---- the oltp workload (sysbench's scripts) on MariaDB, through the engine's own MySQL client

OLTP_TABLES, OLTP_ROWS = 2, 2000


def _oltp(**settings: Any) -> Any:
    from perflab.workloads.oltp import OltpSettings, OltpWorkload

    return OltpWorkload(OltpSettings.model_validate(
        {"kind": "oltp", "tables": OLTP_TABLES, "table_size": OLTP_ROWS, "io": "epoll", **settings}))


def _ctx(tmp_path: Path) -> Any:
    from perflab.context import RunContext

    return RunContext(run_number=1, run_dir=tmp_path, t0_ns=time.monotonic_ns())


def _own_database(endpoint: MysqlEndpoint, name: str) -> MysqlEndpoint:
    with endpoint.connect() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return dataclasses.replace(endpoint, database=name)


COM = ("Com_select", "Com_update", "Com_delete", "Com_insert", "Com_begin", "Com_commit")


def _com(endpoint: MysqlEndpoint) -> dict[str, int]:
    with endpoint.connect() as conn:
        marks = ", ".join(["%s"] * len(COM))
        rows = conn.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({marks})", COM).fetchall()
    return {k: int(v) for k, v in rows}


def test_oltp_loads_sysbenchs_tables_and_its_statements_match_the_servers_counters(server, tmp_path) -> None:
    from perflab.workloads.oltp import MYSQL_THREADS_WHY, STATEMENTS

    _, endpoint = server
    db = _own_database(endpoint, "t_oltp")
    load = _oltp().prepare(db, _ctx(tmp_path))
    assert load.rows == {"sbtest1": OLTP_ROWS, "sbtest2": OLTP_ROWS}
    with db.connect() as conn:
        count, low, high, kmin, kmax = conn.execute("SELECT count(*), min(id), max(id), min(k), max(k) FROM sbtest2"
                                                    ).fetchone()
        assert (count, low, high) == (OLTP_ROWS, 1, OLTP_ROWS) and 1 <= kmin <= kmax <= OLTP_ROWS
        ddl = conn.execute("SHOW CREATE TABLE sbtest1").fetchone()[1]
        assert "AUTO_INCREMENT" in ddl and "ENGINE=InnoDB" in ddl and "KEY `k_1` (`k`)" in ddl, ddl
        assert "`c` char(120) NOT NULL DEFAULT ''" in ddl, ddl
    events = 40
    before = _com(db)
    w = _oltp(script="read_write", clients=2, transactions=events // 2)
    result = w.run(db, _ctx(tmp_path))
    after = _com(db)
    metrics = {k: m.value for k, m in result.metrics.items()}
    assert metrics["transactions"] == events and metrics["failed"] == 0
    mix = STATEMENTS["read_write"]
    change = {k: after[k] - before[k] for k in COM}
    # run() counts each table's rows first (one SELECT per table), through its own session
    assert change == {"Com_select": (mix["point_selects"] + mix["range_selects"]) * events + OLTP_TABLES,
                      "Com_update": mix["updates"] * events, "Com_delete": mix["deletes"] * events,
                      "Com_insert": mix["inserts"] * events, "Com_begin": events, "Com_commit": events}, change
    assert w.check(db, _ctx(tmp_path)).passed
    from test_oltp import assert_statement_histograms

    assert_statement_histograms(result, "read_write", committed=events)
    # without `threads`, a driver thread drives at most 2 MySQL connections, and the run says so
    from perflab.workloads.harness import cores

    plain = min(8, cores())
    spread_out = _oltp(script="point_select", clients=8, transactions=40).run(db, _ctx(tmp_path))
    assert spread_out.metrics["threads"].value == max(plain, 4)
    said = [e.message for e in spread_out.events if e.kind == "threads"]
    assert said == ([] if plain >= 4 else [f"8 clients on 4 driver threads, at most 2 per thread (threads not set): "
                                           f"{MYSQL_THREADS_WHY}"]), said
    given = _oltp(script="point_select", clients=8, threads=2, transactions=40).run(db, _ctx(tmp_path))
    assert given.metrics["threads"].value == 2 and not [e for e in given.events if e.kind == "threads"]
    # the insert script, on io_uring: AUTO_INCREMENT ids after the loaded ones
    _oltp(script="insert", clients=1, transactions=5, io="uring").run(db, _ctx(tmp_path))
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM sbtest1 WHERE id > %s", (OLTP_ROWS,)).fetchone()[0] + \
            conn.execute("SELECT count(*) FROM sbtest2 WHERE id > %s", (OLTP_ROWS,)).fetchone()[0] == 5
    # read-only: the sessions are, and writing scripts are refused before they start
    read_only = dataclasses.replace(db, read_only=True)
    assert _oltp(script="read_only", clients=1, transactions=3).run(read_only, _ctx(tmp_path)).metrics[
        "transactions"].value == 3
    with pytest.raises(UserError, match="writes and the target is read-only"):
        _oltp(script="write_only", clients=1, transactions=1).run(read_only, _ctx(tmp_path))
    with pytest.raises(UserError, match="no sbtest3"):
        _oltp(tables=3).prepare(read_only, _ctx(tmp_path))
    with endpoint.connect() as conn:
        conn.execute("DROP DATABASE t_oltp")


def test_oltp_retries_a_lock_wait_timeout_and_names_other_errors(server, tmp_path) -> None:
    """One row, its lock held by another session for longer than the lock wait
    timeout: the update waits, fails with 1205, and is tried again until it commits."""
    import threading

    _, endpoint = server
    db = _own_database(endpoint, "t_oltp_lock")
    _oltp(tables=1, table_size=1).prepare(db, _ctx(tmp_path))
    with endpoint.connect() as conn:
        conn.execute("SET GLOBAL innodb_lock_wait_timeout = 1")
    holder = db.connect()
    try:
        holder.execute("BEGIN")
        holder.execute("SELECT k FROM sbtest1 WHERE id = 1 FOR UPDATE")
        release = threading.Timer(2.5, holder.execute, ("ROLLBACK",))
        release.start()
        result = _oltp(script="update_index", tables=1, table_size=1, clients=1, transactions=2,
                       max_tries=10).run(db, _ctx(tmp_path))
        release.join()
    finally:
        holder.close()
        with endpoint.connect() as conn:
            conn.execute("SET GLOBAL innodb_lock_wait_timeout = DEFAULT")
    metrics = {k: m.value for k, m in result.metrics.items()}
    assert metrics["transactions"] == 2 and metrics["failed"] == 0
    assert metrics["retries"] >= 1, metrics
    # without retries the same wait is a failed event, counted under its code
    holder = db.connect()
    try:
        with endpoint.connect() as conn:
            conn.execute("SET GLOBAL innodb_lock_wait_timeout = 1")
        holder.execute("BEGIN")
        holder.execute("SELECT k FROM sbtest1 WHERE id = 1 FOR UPDATE")
        result = _oltp(script="update_index", tables=1, table_size=1, clients=1, transactions=1,
                       max_tries=1).run(db, _ctx(tmp_path))
    finally:
        holder.close()
        with endpoint.connect() as conn:
            conn.execute("SET GLOBAL innodb_lock_wait_timeout = DEFAULT")
            conn.execute("DROP DATABASE t_oltp_lock")
    metrics = {k: m.value for k, m in result.metrics.items()}
    assert metrics["failed"] == 1 and metrics["errors.1205"] == 1, metrics


@contextlib.contextmanager
def threads_confined(target: MariadbTarget, cpu: int) -> Iterator[None]:
    """Every thread of the module's server confined to `cpu` (a connection's
    thread, made or taken from the cache meanwhile, with them); the CPUs they
    had given back afterwards, also to threads born meanwhile."""
    [pid] = target.processes()
    before = os.sched_getaffinity(pid)

    def every_thread(cpus: set[int]) -> None:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(task.name), cpus)

    every_thread({cpu})
    try:
        yield
    finally:
        every_thread(before)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="placement needs two CPUs; this process may use one")
def test_oltp_samples_where_each_connections_server_thread_ran_over_the_unix_socket(server, tmp_path) -> None:
    # MariaDB names no OS thread for a connection: the engine finds each by
    # which server thread ran for its round trips (over the unix socket).
    # Every server thread on the last CPU: thread 0's two clients (of 4) are
    # off their driver thread's CPU in every sample, thread 1's never. They
    # do not move (MariaDB's threads do not stay put; the engine's comment
    # on MysqlOltpProtocol). Over TCP nothing is known, so nothing is sampled.
    target, endpoint = server
    assert target.socket_dir is not None
    tcp = _own_database(endpoint, "t_oltp_place")
    db = dataclasses.replace(tcp, unix_socket=str(target.socket_dir / "mysqld.sock"))
    small = {"tables": 1, "table_size": 200}
    _oltp(**small).prepare(db, _ctx(tmp_path))
    cpus = sorted(os.sched_getaffinity(0))
    run = {"script": "point_select", "clients": 4, "threads": 2, "duration": "3s", "pin": "on", **small}

    def com_do() -> int:
        with endpoint.connect() as conn:
            return int(conn.execute("SHOW GLOBAL STATUS LIKE 'Com_do'").fetchone()[1])

    looks = [com_do()]
    with threads_confined(target, cpus[-1]):
        on_socket = _oltp(**run).run(db, _ctx(tmp_path))
        looks.append(com_do())
        over_tcp = _oltp(**{**run, "duration": "1s"}).run(tcp, _ctx(tmp_path))
        looks.append(com_do())
        unpinned = _oltp(**{**run, "duration": "1s", "pin": "off"}).run(db, _ctx(tmp_path))
        looks.append(com_do())
    # The look costs 8 DO 0 round trips per client, only where it can tell
    # (the unix socket) and only in a pinned run, which samples.
    assert [b - a for a, b in itertools.pairwise(looks)] == [4 * 8, 0, 0]
    assert "server_off_cpu_share" not in unpinned.metrics
    m = on_socket.metrics
    assert m["transactions"].value > 100 and m["failed"].value == 0
    assert m["server_off_cpu_share"].value == 0.5
    [placement] = [e.message for e in on_socket.events if e.kind == "placement"]
    assert placement.startswith("server processes off their driver thread's CPU: in 3 of 3 s"), placement
    assert placement.endswith("0.50 0.50 0.50"), placement
    assert [e.message for e in on_socket.events if e.kind == "follow"] == [
        "clients did not follow their server processes (this protocol's clients do not move between threads)"]
    assert "server_off_cpu_share" not in over_tcp.metrics
    assert not [e for e in over_tcp.events if e.kind == "placement"]
    with endpoint.connect() as conn:
        conn.execute("DROP DATABASE t_oltp_place")


@pytest.mark.slow
def test_oltp_open_loop_latency_shows_a_stalled_mariadb(server, tmp_path) -> None:
    """SIGSTOP the server for 2 s under a rate: the events scheduled meanwhile
    are late by up to 2 s, and latency from the intended start says so."""
    from conftest import server_stalled

    target, endpoint = server
    db = _own_database(endpoint, "t_oltp_stall")
    w = _oltp(script="point_select", clients=4, threads=2, duration="5s", rate=200.0)
    w.prepare(db, _ctx(tmp_path))
    with server_stalled(lambda: list(target.processes())):
        result = w.run(db, _ctx(tmp_path))
    m = result.metrics
    assert m["latency_max_ms"].value > 1500, "the stall shows in full"
    assert m["latency_p99_ms"].value > 1000
    assert m["tps"].value == pytest.approx(200, rel=0.25)
    with endpoint.connect() as conn:
        conn.execute("DROP DATABASE t_oltp_stall")


def test_oltp_on_a_killed_mariadb_fails_its_run_clearly_and_the_experiment_goes_on(workdir: Path) -> None:
    out = workdir / "out"
    experiment = workdir / "e.toml"
    experiment.write_text(f"""
[experiment]
name = "oltp-killed"
[target]
kind = "mariadb"
[workload]
kind = "oltp"
script = "point_select"
tables = 1
table_size = {OLTP_ROWS}
clients = 2
duration = "4s"
[factors]
"target.settings.max_connections" = [40, 50]
""")
    run = start_run_until(experiment, out, lambda: mariadbd_under(out, serving=True))
    try:
        # kill the server once the run's clients are connected (after the load)
        deadline = time.monotonic() + 60
        while _sessions_of(out) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        for pid in mariadbd_under(out):
            os.kill(pid, signal.SIGKILL)
        assert run.wait(timeout=180) == 1, (out.parent / "perflab.log").read_text()
    finally:
        if run.poll() is None:
            run.kill()
    db = sqlite3.connect(out / "perflab.sqlite")
    rows = db.execute("SELECT status, error FROM run ORDER BY id").fetchall()
    assert rows[0][0] == "failed" and rows[1][0] == "done", rows
    # the engine's clients lost their connections (not the load, not a connect)
    assert "connection" in rows[0][1] and "Traceback" not in rows[0][1], rows[0][1]
    assert not rows[0][1].startswith("oltp load failed"), rows[0][1]
    assert mariadbd_under(out) == []


def _sessions_of(out: Path) -> int:
    """Sessions of perflab's user on the managed server under `out` (asked as
    root over its socket, found in its option file); 0 while there is none."""
    import socket as sock

    for pid in mariadbd_under(out, serving=True):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            option_file = next(a.split("=", 1)[1] for a in args if a.startswith("--defaults-file="))
            socket = next(line.split("=", 1)[1].strip() for line in Path(option_file).read_text().splitlines()
                          if line.replace(" ", "").startswith("socket="))
            with sock.socket(sock.AF_UNIX) as probe:
                probe.connect(socket)  # PyMySQL leaks its socket when this fails
            conn = pymysql.connect(unix_socket=socket, user="root", connect_timeout=2)
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT count(*) FROM information_schema.processlist WHERE user = 'perflab'")
                    return int(cur.fetchone()[0])
            finally:
                conn.close()
        except (OSError, StopIteration, pymysql.err.MySQLError):
            continue
    return 0


def test_oltp_on_an_external_mysql_target_writes_only_where_allowed(server, workdir: Path, run_cli) -> None:
    _, endpoint = server
    dsn = f"mysql://perflab:{endpoint.password}@127.0.0.1:{endpoint.port}/"  # the managed server's own user

    def experiment(name: str, script: str, extra: str = "") -> Path:
        path = workdir / f"{name}.toml"
        path.write_text(f'[experiment]\nname = "{name}"\n[target]\nkind = "mysql"\ndsn = "{dsn}"\n{extra}'
                        f'[workload]\nkind = "oltp"\nscript = "{script}"\ntables = 1\ntable_size = 100\n'
                        'clients = 1\ntransactions = 5\n')
        return path

    refused = run_cli("check", experiment("rw", "read_write"), check=False)
    assert refused.returncode == 2 and "allow_destructive" in refused.stderr and "Traceback" not in refused.stderr
    assert run_cli("check", experiment("ro", "point_select"), check=False).returncode == 0
    # allowed, it loads and runs only inside perflab's own database there
    run_cli("run", experiment("ok", "read_write", "allow_destructive = true\n"), "--out", workdir / "out",
            "--quiet", "--no-report")
    with endpoint.connect() as conn:
        where = {r[0] for r in conn.execute("SELECT table_schema FROM information_schema.tables "
                                            "WHERE table_name = 'sbtest1'").fetchall()}
        assert "perflab_oltp" in where and "perflab" not in where, where
    run_cli("clean", workdir / "out", "--yes")


OLTP_BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "oltp_vs_sysbench.py"


def _oltp_bench(*args: str) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run([sys.executable, str(OLTP_BENCH), *args], capture_output=True, text=True, timeout=300,
                          cwd=OLTP_BENCH.parent)


def test_the_sysbench_benchmark_refuses_a_bad_thread_count() -> None:
    proc = _oltp_bench("--perflab-threads", "default", "two")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "--perflab-threads two: allowed: default or a whole number of at least 1" in proc.stderr, proc.stderr


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v sysbench"], capture_output=True).returncode != 0,
                    reason="sysbench is not installed (./dev setup installs it)")
def test_the_sysbench_benchmark_runs_the_default_threads_beside_a_given_count() -> None:
    # oltp_vs_sysbench.py in small on MariaDB: 8 connections, perflab on its default
    # threads (at most 2 connections each) and on 1, each run and row labelled, and
    # the floors beside them
    from perflab.workloads.harness import cores

    proc = _oltp_bench("--server", "mariadb", "--tables", "1", "--table-size", "1000", "--threads", "8",
                       "--scripts", "point_select", "--pairs", "1", "--seconds", "1",
                       "--perflab-threads", "default", "1", "--floor")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    default = next(line for line in out.splitlines() if line.lstrip().startswith("point_select/t=default t=8"))
    given = next(line for line in out.splitlines() if line.lstrip().startswith("point_select/t1 t=8"))
    expected = max(min(8, cores()), 4)
    assert f"; {expected} threads;" in default and "; 1 threads;" in given, (default, given)
    assert "| point_select/t=default | 8 |" in out and "| point_select/t1 | 8 |" in out, out
    assert "floor epoll:" in out and "floor uring:" in out, out
    # each row's TPS ratio taken apart (driver, server, busy), from /proc/stat, and the
    # floors' driver factor: the most a driver as cheap gains at sysbench's server cost
    assert "the TPS ratio taken apart" in out, out
    factors = out.split("the TPS ratio taken apart", 1)[1].split("\n\n", 1)[0]
    assert "| point_select/t=default | 8 | " in factors and "| point_select/t1 | 8 | " in factors, out
    floor_rows = [line for line in out.splitlines() if line.startswith("| point_select | 8 | ")]
    assert len(floor_rows) == 2 and all(re.search(r"\| \d\.\d{3} \([\d.-]+\) \|$", row) for row in floor_rows), floor_rows
