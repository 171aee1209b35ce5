"""Only perflab enters the servers it starts, and they inherit nothing of its
environment (issue 50): a local user (`nobody`) connecting over TCP to a
managed PostgreSQL or MariaDB is refused, the server's /proc/PID/environ
holds no PG* or MYSQL_* variable of perflab's and nothing else it was given,
the same for a `process` target, and `check` runs nginx as `run_as` and
refuses a directive that would make nginx (root) create a file elsewhere.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from perflab.targets.serverproc import TOKEN_VAR

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None,
                                reason="needs root and runuser, to connect as another local user (nobody)")

# What a server perflab starts may hold in its environment (serverproc.server_env) ...
SERVER_ENV = {"PATH", "LC_ALL", "TZ", "HOME", "USER", "LOGNAME", TOKEN_VAR}
# ... and what PostgreSQL's pg_ctl (and Debian's build of it) sets itself for the postmaster, with
# values of its own: the data directory, pg_ctl's pid, its locale and configuration directories;
# the shell pg_ctl starts the postmaster through sets PWD
PG_CTL_OWN = {"PGDATA", "PG_GRANDPARENT_PID", "PGLOCALEDIR", "PGSYSCONFDIR", "PWD"}


@pytest.fixture
def leaky_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """perflab's own environment holds a PostgreSQL and a MySQL password and a
    variable of this test's: none may reach a server."""
    planted = {"PGPASSWORD": f"pg-{uuid.uuid4().hex}", "MYSQL_PWD": f"my-{uuid.uuid4().hex}",
               f"PERFLAB_TEST_SECRET_{uuid.uuid4().hex[:8].upper()}": uuid.uuid4().hex}
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    return planted


def environ_of(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode(errors="replace").split("=", 1) for e in entries if b"=" in e)


def assert_nothing_leaked(env: dict[str, str], planted: dict[str, str], allowed: set[str]) -> None:
    assert not set(planted) & set(env), env
    assert not set(planted.values()) & set(env.values()), env
    assert set(env) <= allowed, sorted(set(env) - allowed)


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    """`argv` run as nobody, with no PG* or MYSQL_* variable (nothing it could know)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "MYSQL"))}
    return subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True, text=True, timeout=60,
                          env=env, cwd="/")


def files_under(d: Path) -> Iterator[Path]:
    for path in d.rglob("*"):
        if path.is_file() and not path.is_symlink():
            yield path


def test_a_managed_postgres_lets_in_only_perflab(workdir: Path, leaky_env: dict[str, str]) -> None:
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("psql is not installed")
    import psycopg

    from perflab.targets.postgres import PostgresEndpoint, PostgresSettings, PostgresTarget

    target = PostgresTarget(PostgresSettings.model_validate({"kind": "postgres", "listen": "tcp"}),
                            workdir / "target")
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, PostgresEndpoint) and target.port is not None
        # a local user over TCP is not let in (before: as superuser), whatever password it
        # tries (perflab's own PGPASSWORD too)
        query = ["-w", "-h", "127.0.0.1", "-p", str(target.port), "-U", "perflab", "-d", "postgres",
                 "-Atc", "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"]
        refused = as_nobody(psql, *query)
        assert refused.returncode != 0 and "true" not in refused.stdout, refused
        guessed = as_nobody("env", f"PGPASSWORD={leaky_env['PGPASSWORD']}", psql, *query)
        assert guessed.returncode != 0 and "password authentication failed" in guessed.stderr, guessed
        # perflab itself is, over TCP, with its password (masked wherever it is shown)
        with endpoint.connect() as conn:
            assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (True,)
        assert endpoint.password and endpoint.password not in endpoint.display()
        # the password is kept in a 0600 passfile of root's, in perflab's state, nowhere in the output
        st = os.lstat(target.passfile)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0, st
        assert endpoint.password in target.passfile.read_text()
        assert not target.passfile.is_relative_to(workdir)
        assert not [p for p in files_under(workdir) if endpoint.password.encode() in p.read_bytes()]
        # the postmaster inherited nothing of perflab's environment
        pid = target.postmaster_pid()
        assert pid is not None
        env = environ_of(pid)
        assert_nothing_leaked(env, leaky_env, SERVER_ENV | PG_CTL_OWN)
        assert env.get("PGDATA") in (None, str(target.data_dir))
        # the socket: perflab (root) by peer, with no password
        admin = psycopg.connect(host=str(target.socket_dir), port=target.port, user="perflab", dbname="postgres",
                                autocommit=True, connect_timeout=10)
        admin.close()
    finally:
        target.teardown()
    assert not target.passfile.exists()


def test_a_managed_mariadb_lets_in_only_perflab(workdir: Path, leaky_env: dict[str, str]) -> None:
    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None or not (shutil.which("mariadbd") or Path("/usr/sbin/mariadbd").exists()):
        pytest.skip("mariadbd and its client are not installed")
    from perflab.targets.mariadb.endpoint import MysqlEndpoint
    from perflab.targets.mariadb.managed import MariadbTarget
    from perflab.targets.mariadb.settings import MariadbSettings

    target = MariadbTarget(MariadbSettings(kind="mariadb", listen="tcp",
                                           settings={"innodb_buffer_pool_size": "32M"}), workdir / "target")
    try:
        endpoint = target.provision()
        assert isinstance(endpoint, MysqlEndpoint) and target.port is not None
        # no one else over TCP (before: both, with every privilege): not perflab's user without
        # its password, not root (none on TCP)
        for user in ("perflab", "root"):
            refused = as_nobody(client, "--no-defaults", "-h", "127.0.0.1", "-P", str(target.port), "-u", user,
                                "-e", "SELECT 1")
            assert refused.returncode != 0 and "Access denied" in refused.stderr, (user, refused)
        with endpoint.connect() as conn:  # perflab, over TCP with its password
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert endpoint.password and endpoint.password not in endpoint.display()
        pid = target.server_pid()
        assert pid is not None
        env = environ_of(pid)
        assert env.get(TOKEN_VAR) == target.token
        assert_nothing_leaked(env, leaky_env, SERVER_ENV)
        assert not [p for p in files_under(workdir) if endpoint.password.encode() in p.read_bytes()]
    finally:
        target.teardown()


def test_a_process_target_inherits_nothing_of_perflab(workdir: Path, leaky_env: dict[str, str]) -> None:
    from perflab.targets.process import ProcessSettings, ProcessTarget

    command = f"{sys.executable} -m http.server {{port}} --bind 127.0.0.1 --directory {{root}}"
    target = ProcessTarget(ProcessSettings(kind="process", command=command), workdir / "target")
    try:
        target.provision()
        assert target.proc is not None
        env = environ_of(target.proc.pid)
        assert env.get(TOKEN_VAR) == target.token and env.get("USER") == target.run_as
        assert_nothing_leaked(env, leaky_env, SERVER_ENV)
    finally:
        target.teardown()


NGINX_EXPERIMENT = """\
[experiment]
name = "nginx-paths"
[target]
kind = "nginx"
binary = "{binary}"
[target.settings]
{directive}
[workload]
kind = "http"
clients = 1
duration = "1s"
[workload.fileset]
size = "1MB"
"""


@pytest.mark.skipif(shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin") is None,
                    reason="nginx is not installed")
def test_nginx_check_runs_as_run_as_and_refuses_paths(workdir: Path, run_cli) -> None:
    nginx = shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin")
    assert nginx is not None
    decoy = workdir / "decoy"
    decoy.mkdir(mode=0o755)
    experiment = workdir / "e.toml"

    def check(directive: str, binary: str = nginx) -> subprocess.CompletedProcess[str]:
        experiment.write_text(NGINX_EXPERIMENT.format(binary=binary, directive=directive))
        return run_cli("check", experiment, check=False)

    # a path directive is refused, naming it, and makes nothing (before: check made a root-owned file)
    for directive in (f'access_log = "{decoy}/access.log"', f'proxy_cache_path = "{decoy}/cache keys_zone=z:1m"',
                      f'ssl_certificate = "{decoy}/cert.pem"', 'access_log = "../escaped.log"'):
        proc = check(directive)
        name = directive.split()[0]
        assert proc.returncode == 2 and "target.settings" in proc.stderr and name in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert list(decoy.iterdir()) == [] and not (workdir / "escaped.log").exists()
    # a file name alone is nginx's to write in the target's directory: accepted
    assert check('access_log = "access.log"').returncode == 0
    # and `nginx -t` runs as the workers' user, not root: an nginx that says who runs it
    spy = workdir / "spy"
    spy.mkdir(mode=0o777)
    spy.chmod(0o777)  # whoever runs it may write its uid there
    fake = spy / "nginx"
    fake.write_text(textwrap.dedent("""\
        #!/bin/sh
        id -u >> "$(dirname "$0")/uids"
    """))
    fake.chmod(0o755)
    proc = check('access_log = "access.log"', binary=str(fake))
    assert proc.returncode == 0, proc.stderr
    assert (spy / "uids").read_text().split() == [str(pwd.getpwnam("nobody").pw_uid)]


def test_the_guardians_undo_of_a_server_removes_its_passfile(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # A perflab SIGKILLed while its server ran leaves the server's passfile: the
    # guardian's undo of that server removes it, named from the data directory
    # alone (a journal cannot point it at another file).
    from perflab.targets.postgres.postmaster import passfile_of, undo_server

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("PERFLAB_STATE_DIR", str(state))
    data_dir = tmp_path / "pgdata"
    data_dir.mkdir()
    passfile = passfile_of(data_dir)
    assert passfile.parent == state
    passfile.write_text("127.0.0.1:5432:*:perflab:secret\n")
    other = state / "pgpass-someone-else"
    other.write_text("kept\n")
    undo_server({"data_dir": str(data_dir)})  # no server runs there: only the passfile goes
    assert not passfile.exists() and other.read_text() == "kept\n"
