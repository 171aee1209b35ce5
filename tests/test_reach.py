"""External targets are reached before anything is made, and an output
directory where nothing was measured yet can be planned again.

`check`, `plan` and `run` connect to every distinct external target once
(Target.reach) before the output directory exists: a wrong password, a
server that is down, a missing database each get their own message and exit
2. A store holding only a plan is reused by `run --out` and by `resume` with
a changed file; one with anything measured is refused as before, unchanged.
"""

from __future__ import annotations

import shutil
import socket
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from perflab.errors import UserError
from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget

USER, RIGHT, WRONG = "reach_user", "right-pw-7151", "wrong-pw-8262"


@pytest.fixture(scope="module")
def password_server() -> Iterator[dict[str, Any]]:
    """A managed server of this test's own on 127.0.0.1 whose pg_hba.conf asks
    every TCP client for a password (scram-sha-256), with a role that has one.
    perflab's initdb trusts everyone (it reaches its own servers through a
    0700 socket directory), so the test puts its own line first and reloads."""
    d = Path(tempfile.mkdtemp(prefix="perflab-test-reach-", dir="/tmp"))
    d.chmod(0o755)  # the server runs as nobody when the tests run as root
    target = PostgresTarget(PostgresSettings.model_validate({"kind": "postgres", "listen": "tcp"}), d / "target")
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, PostgresEndpoint) and target.data_dir is not None and target.port is not None
        socket_dsn = make_conninfo(endpoint.conninfo, host=str(target.socket_dir))  # trusted: unix socket
        hba = target.data_dir / "pg_hba.conf"
        hba.write_text("host all all 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        with psycopg.connect(socket_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {USER} LOGIN PASSWORD '{RIGHT}'")
            conn.execute(f"CREATE DATABASE reach_db OWNER {USER}")
            conn.execute("SELECT pg_reload_conf()")
        tcp = f"host=127.0.0.1 port={target.port} user={USER} dbname=reach_db"
        # The server really asks: no password, no way in; the right one, in.
        deadline = time.monotonic() + 10
        while True:
            try:
                psycopg.connect(tcp + " password=", connect_timeout=5).close()
            except psycopg.OperationalError as exc:
                assert "password" in str(exc), exc
                break
            assert time.monotonic() < deadline, "pg_hba.conf's password line never took effect"
            time.sleep(0.1)
        psycopg.connect(f"{tcp} password={RIGHT}", connect_timeout=5).close()
        yield {"tcp": tcp, "port": target.port}
    finally:
        target.teardown()
        shutil.rmtree(d, ignore_errors=True)


EXPERIMENT = """[experiment]
name = "reach"

[target]
kind = "postgres"
dsn = "{dsn}"
allow_destructive = true

[workload]
kind = "sql"
setup = ["DROP TABLE IF EXISTS reach_t", "CREATE TABLE reach_t (v int)"]
statements = ["INSERT INTO reach_t VALUES (1)"]
iterations = 3

[collect]

[factors]
{factors}
"""


def experiment(path: Path, dsn: str, factors: str = "") -> Path:
    path.write_text(EXPERIMENT.format(dsn=dsn, factors=factors))
    return path


# No password from the environment or a ~/.pgpass, whatever this machine has.
NO_PASSWORD_ENV = {"PGPASSWORD": "", "PGPASSFILE": "/nonexistent/perflab-test-pgpass"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def refused(proc: Any, *words: str) -> str:
    """stderr of a command that exited 2 with one clear message holding `words`."""
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text
    assert "Traceback" not in text, text
    for w in words:
        assert w in proc.stderr, proc.stderr
    return proc.stderr


# ------------------------------------------------------------------ reaching


def test_a_wrong_password_fails_check_and_run_before_anything_is_made(password_server, workdir: Path,
                                                                        run_cli) -> None:
    tcp = password_server["tcp"]
    wrong = experiment(workdir / "e.toml", f"{tcp} password={WRONG}")
    out = workdir / "out"
    for args in (("check", wrong), ("plan", wrong), ("run", wrong, "--out", out, "--no-report")):
        stderr = refused(run_cli(*args, check=False, env=NO_PASSWORD_ENV),
                         "target.dsn", "password authentication failed", "password", "PGPASSWORD", "~/.pgpass",
                         f"host 127.0.0.1 port {password_server['port']}")
        assert WRONG not in stderr
        assert not out.exists()
    # No password at all: the same cause, said as it is.
    none = experiment(workdir / "none.toml", tcp)
    refused(run_cli("check", none, check=False, env=NO_PASSWORD_ENV), "asks for a password", "PGPASSWORD")
    # The password is what mattered: given in PGPASSWORD, check passes and run runs.
    ok = run_cli("check", none, env={**NO_PASSWORD_ENV, "PGPASSWORD": RIGHT})
    assert ok.stdout.startswith("ok: reach: 1 run ")
    run_cli("run", none, "--out", out, "--no-report", env={**NO_PASSWORD_ENV, "PGPASSWORD": RIGHT})
    status = sqlite3.connect(out / "perflab.sqlite").execute("SELECT status FROM run").fetchall()
    assert status == [("done",)]


def test_at_run_time_too_a_refused_login_names_the_password(password_server, monkeypatch) -> None:
    """The target's own connection (a resume, a run after check) says the
    same: the password, PGPASSWORD, ~/.pgpass; the password itself never."""
    for key, value in NO_PASSWORD_ENV.items():
        monkeypatch.setenv(key, value)
    dsn = f"{password_server['tcp']} password={WRONG}"
    target = PostgresTarget(PostgresSettings.model_validate({"kind": "postgres", "dsn": dsn}), Path("/nonexistent"))
    with pytest.raises(UserError) as info:
        target.provision()
    text = str(info.value)
    assert "password authentication failed" in text and "PGPASSWORD" in text and "~/.pgpass" in text
    assert WRONG not in text


def test_a_server_out_of_reach_and_a_missing_database_are_their_own_messages(password_server, workdir: Path,
                                                                            run_cli) -> None:
    port = free_port()  # closed again: nothing listens there
    out = workdir / "out"
    down = experiment(workdir / "down.toml", f"host=127.0.0.1 port={port} user={USER} dbname=reach_db")
    for args in (("check", down), ("run", down, "--out", out)):
        stderr = refused(run_cli(*args, check=False, env=NO_PASSWORD_ENV),
                         "cannot reach a PostgreSQL server", f"host 127.0.0.1 port {port}", "connection refused")
        assert "password" not in stderr.lower()
        assert not out.exists()
    gone = experiment(workdir / "gone.toml",
                      f"host=127.0.0.1 port={password_server['port']} user={USER} dbname=no_such_db")
    stderr = refused(run_cli("check", gone, check=False, env={**NO_PASSWORD_ENV, "PGPASSWORD": RIGHT}),
                     'has no database "no_such_db"', "dbname")
    assert "password" not in stderr.lower() and "cannot reach" not in stderr
    # An external web server (kind = "http") is reached too.
    web = workdir / "web.toml"
    web.write_text(f'[experiment]\nname = "w"\n[target]\nkind = "http"\nurl = "http://127.0.0.1:{port}/"\n'
                   '[workload]\nkind = "http"\n')
    refused(run_cli("check", web, check=False), "target.url", f"cannot reach a web server at host 127.0.0.1 port {port}")


def test_each_distinct_external_target_is_reached_once(workdir: Path, run_cli, scratch_db) -> None:
    """Factors that leave the target as it is cost no second connection; a
    factor over the dsn reaches each value, and names the one out of reach."""
    accepted: list[float] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(time.monotonic())
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        web = workdir / "web.toml"
        web.write_text(f'[experiment]\nname = "w"\n[target]\nkind = "http"\nurl = "http://127.0.0.1:{port}/"\n'
                       '[workload]\nkind = "http"\n[factors]\n"workload.clients" = [1, 2, 4]\n')
        proc = run_cli("check", web)
        assert proc.stdout.startswith("ok: w: 3 runs"), proc.stdout
        assert len(accepted) == 1
    finally:
        listener.close()
        thread.join(5)
    down = free_port()
    dsns = f'"target.dsn" = ["{scratch_db.conninfo}", "host=127.0.0.1 port={down} dbname=x"]'
    stderr = refused(run_cli("check", experiment(workdir / "e.toml", scratch_db.conninfo, dsns), check=False),
                     "1 problem(s)", f"host 127.0.0.1 port {down}")
    assert scratch_db.conninfo not in stderr


# ------------------------------------------------------------------ reusing a directory that holds only a plan


def planned_only(path: Path, out: Path, tried: bool = True) -> None:
    """An output directory as a first run that stopped before measuring
    leaves it (a UserError at provisioning: the run went back to planned)."""
    from perflab import runner

    session = runner.start(path, out)
    if tried:
        session.store.start_run(1, time.monotonic_ns())
        (out / "runs" / "001").mkdir(parents=True)
        (out / "runs" / "001" / "server.log").write_text("the attempt's log\n")
        session.store.interrupt_run(1, "interrupted: target.dsn: the server refused the login")
    session.store.close()


def dump(out: Path) -> list[str]:
    return list(sqlite3.connect(out / "perflab.sqlite").iterdump())


def rows(out: Path, sql: str) -> list[Any]:
    return sqlite3.connect(out / "perflab.sqlite").execute(sql).fetchall()


def test_run_out_reuses_a_directory_where_nothing_was_measured(workdir: Path, run_cli, scratch_db) -> None:
    out = workdir / "out"
    first = experiment(workdir / "e.toml", scratch_db.conninfo, '"workload.iterations" = [1, 2]')
    planned_only(first, out)
    assert rows(out, "SELECT status, attempts FROM run") == [("planned", 1), ("planned", 0)]
    # The file fixed (here: another plan), the same --out: planned again, run.
    fixed = experiment(workdir / "fixed.toml", scratch_db.conninfo, '"workload.iterations" = [1, 2, 3]')
    proc = run_cli("run", fixed, "--out", out, "--no-report")
    assert "held a plan where nothing was measured yet; planned again" in proc.stdout, proc.stdout
    assert rows(out, "SELECT status, attempts FROM run ORDER BY id") == [("done", 1)] * 3
    assert rows(out, "SELECT spec_path FROM experiment") == [(str(fixed),)]
    assert rows(out, "SELECT count(*) FROM attempt") == [(0,)]  # the replaced plan's: it measured nothing
    # The replaced plan's run files are kept aside, not written over.
    (aside,) = out.glob("runs-replaced-*")
    assert (aside / "001" / "server.log").read_text() == "the attempt's log\n"
    # Now something is measured: refused as before, and nothing in the store changes.
    before = dump(out)
    refused(run_cli("run", first, "--out", out, check=False), "already holds an experiment's store", "perflab resume")
    assert dump(out) == before


def test_run_out_refuses_a_planned_store_that_holds_measured_samples(workdir: Path, run_cli, scratch_db) -> None:
    """Every run planned again after an interrupt, but samples of the
    interrupted run were stored: that is measured, and kept."""
    from perflab.store import SeriesWriter, Store

    out = workdir / "out"
    path = experiment(workdir / "e.toml", scratch_db.conninfo)
    planned_only(path, out, tried=False)
    store = Store.open(out)
    store.start_run(1, time.monotonic_ns())
    writer = SeriesWriter(store.path, 1)
    writer.add("driver", "tps", 0.5, 123.0)
    writer.close()
    store.interrupt_run(1)
    store.close()
    before = dump(out)
    assert rows(out, "SELECT status FROM run") == [("planned",)]
    refused(run_cli("run", path, "--out", out, check=False), "already holds an experiment's store")
    assert dump(out) == before


def test_resume_plans_again_from_a_changed_file_when_nothing_was_measured(workdir: Path, run_cli,
                                                                        scratch_db) -> None:
    out = workdir / "out"
    path = workdir / "e.toml"
    # A password in the file: the store holds it masked, and resume needs the file.
    experiment(path, f"{scratch_db.conninfo} password=first-pw-5", '"workload.iterations" = [1, 2]')
    planned_only(path, out)
    experiment(path, f"{scratch_db.conninfo} password=fixed-pw-6", '"workload.iterations" = [2, 3, 4]')
    proc = run_cli("resume", out, "--no-report")
    assert "nothing was measured yet and the experiment file changed: planned again" in proc.stdout, proc.stdout
    assert rows(out, "SELECT status FROM run") == [("done",)] * 3
    stored = rows(out, "SELECT spec_text FROM experiment")[0][0]
    assert "[2, 3, 4]" in stored and "fixed-pw-6" not in stored and "first-pw-5" not in stored
    # Measured now: a changed file is refused as before, and nothing changes.
    experiment(path, f"{scratch_db.conninfo} password=third-pw-7", '"workload.iterations" = [5]')
    before = dump(out)
    refused(run_cli("resume", out, "--retry-failed", check=False), "has changed, and runs were measured")
    assert dump(out) == before
