"""Values, never lines: a value of target.settings is one value in the
server's configuration file. A line break (or another control character)
that would add an option, one that would reopen the network, is refused by
`perflab check` (exit 2, the key named) on every kind that writes a file
(PostgreSQL's perflab.conf, MariaDB's option file, nginx.conf); a value with
quotes, `#` and backslashes is written by the file's own quoting rules, one
line per setting, and the real server reads it back as given."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import _tempdir
from perflab.errors import UserError
from perflab.targets.config_values import OPTION_LINE_BYTES, option_file_value, postgres_quoted

# A value that would end its line and add the options that open a server to the network.
OPEN_PG = "perflab\nlisten_addresses = '*'"
OPEN_MARIADB = "SET @a=1\nbind-address=0.0.0.0\nskip-networking=0\nskip-grant-tables"
OPEN_NGINX = "on;\n    server { listen 0.0.0.0:8080; }"
# Quotes, a comment sign and backslashes: each format's quoting must keep them in the value.
AWKWARD = "it's \"#1\" \\ a\\nb #"


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


def _check(run_cli, tmp_path: Path, target: str, name: str = "values") -> tuple[int, str]:
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
[experiment]
name = "{name}"
{target}
[workload]
kind = "sql"
statements = [{{ name = "one", sql = "SELECT 1" }}]
duration = "1s"
""")
    proc = run_cli("check", path, check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize(("kind", "key", "value"), [
    ("postgres", "application_name", OPEN_PG),
    ("postgres", "search_path", "public\rinclude '/etc/passwd'"),
    ("mariadb", "init_connect", OPEN_MARIADB),
    ("mariadb", "init_connect", "SET @a=1\x00"),
])
def test_check_refuses_a_value_that_adds_a_line(run_cli, tmp_path: Path, kind: str, key: str, value: str) -> None:
    status, text = _check(run_cli, tmp_path, f'[target]\nkind = "{kind}"\n[target.settings]\n{key} = {_toml(value)}')
    assert status == 2, text
    assert f"target.settings.{key}" in text and "Traceback" not in text


def test_check_refuses_an_injected_option_given_as_a_factor_level(run_cli, tmp_path: Path) -> None:
    status, text = _check(run_cli, tmp_path, f"""[target]\nkind = "mariadb"
[factors]
"target.settings.init_connect" = ["SET @a=1", {_toml(OPEN_MARIADB)}]""")
    assert status == 2, text
    assert "target.settings.init_connect" in text and "Traceback" not in text


def test_check_refuses_an_nginx_directive_that_adds_a_server(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "nginx.toml"
    path.write_text(f"""
[experiment]
name = "nginx-values"
[target]
kind = "nginx"
[target.settings]
sendfile = {_toml(OPEN_NGINX)}
[workload]
kind = "http"
duration = "1s"
""")
    proc = run_cli("check", path, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "target.settings" in proc.stderr and "sendfile" in proc.stderr


@pytest.mark.parametrize("name", ["skip_grant_tables", "loose-skip-grant-tables", "grant_tables"])
def test_check_refuses_a_mariadb_without_grant_tables(run_cli, tmp_path: Path, name: str) -> None:
    value = "false" if name == "grant_tables" else "true"
    status, text = _check(run_cli, tmp_path, f'[target]\nkind = "mariadb"\n[target.settings]\n"{name}" = {value}')
    assert status == 2, text
    assert name in text


def test_check_refuses_a_mariadb_line_the_option_reader_would_split(run_cli, tmp_path: Path) -> None:
    # mysys reads an option file line into 4 KiB: the rest of a longer one is an option of its own
    value = "x" * (OPTION_LINE_BYTES + 100) + "skip-grant-tables"
    status, text = _check(run_cli, tmp_path, f'[target]\nkind = "mariadb"\n[target.settings]\ninit_connect = "{value}"')
    assert status == 2, text
    assert "init_connect" in text


@pytest.mark.parametrize("name", ["include", "include_if_exists", "hba_file"])
def test_check_refuses_a_postgres_setting_that_reads_another_file(run_cli, tmp_path: Path, name: str) -> None:
    status, text = _check(run_cli, tmp_path, f'[target]\nkind = "postgres"\n[target.settings]\n{name} = "/tmp/x"')
    assert status == 2, text
    assert name in text


def test_the_option_file_reader_reads_each_quoted_value_back_as_given(tmp_path: Path) -> None:
    """MariaDB's own reader of option files (my_print_defaults, mysys) gives
    back every value as `option_file_value` wrote it."""
    reader = shutil.which("my_print_defaults")
    if reader is None:
        pytest.skip("no my_print_defaults here (apt-get install mariadb-client; ./dev setup does)")
    values = ["plain", AWKWARD, " spaces ", "'quoted'", '"', "\\", "a\\", "", "SET NAMES 'utf8' # c", "ü #é"]
    conf = tmp_path / "t.cnf"
    conf.write_text("[mysqld]\n" + "".join(f"opt{i} = {option_file_value(v)}\n" for i, v in enumerate(values)))
    out = subprocess.run([reader, f"--defaults-file={conf}", "mysqld"], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == [f"--opt{i}={v}" for i, v in enumerate(values)]


def test_a_line_break_cannot_be_quoted_into_either_format() -> None:
    for quote in (option_file_value, postgres_quoted):
        with pytest.raises(ValueError):
            quote("a\nb")


def test_postgres_writes_one_line_per_setting_and_reads_each_value_back(tmp_path: Path) -> None:
    """A managed PostgreSQL with string settings full of quotes, `#` and
    backslashes: perflab.conf holds one line per setting, and the server's
    own parse of the file (pg_file_settings) has exactly those settings, with
    the values given."""
    from perflab.targets.postgres import PostgresSettings, PostgresTarget

    settings = {"application_name": AWKWARD, "search_path": "\"$user\", public",
                "work_mem": "8MB", "jit": False}
    d = _tempdir("perflab-test-values-pg-")
    target = PostgresTarget(PostgresSettings.model_validate({"kind": "postgres", "settings": settings}), d / "t")
    try:
        try:
            endpoint = target.provision()
        except UserError as exc:
            pytest.skip(f"no PostgreSQL here: {exc}")
        assert target.data_dir is not None
        conf = target.data_dir / "perflab.conf"
        lines = [ln for ln in conf.read_text().splitlines() if ln and not ln.startswith("#")]
        written = [ln.split(" = ", 1)[0] for ln in lines]
        assert written[-len(settings):] == list(settings)
        with endpoint.connect() as conn:
            rows = conn.execute("SELECT name, setting, error FROM pg_file_settings WHERE sourcefile = %s",
                                (str(conf),)).fetchall()
        assert [r[0] for r in rows] == written and all(r[2] is None for r in rows)
        parsed = {r[0]: r[1] for r in rows}
        assert parsed["application_name"] == settings["application_name"]
        assert parsed["search_path"] == settings["search_path"]
    finally:
        target.teardown()
        shutil.rmtree(d, ignore_errors=True)


def test_mariadb_writes_one_line_per_setting_and_reads_each_value_back() -> None:
    """A managed MariaDB whose init_connect holds quotes, `#` and
    backslashes: its option file holds one line per setting, and the server
    has the value as given (and no network: listen = "unix")."""
    try:
        import pymysql  # noqa: F401

        from perflab.targets.mariadb import MariadbSettings, MariadbTarget, find_binaries

        find_binaries(None)
    except (UserError, ImportError) as exc:
        pytest.skip(f"no MariaDB here ({exc}): ./dev setup installs mariadb-server and PyMySQL")
    value = "SET @perflab_t = 'it''s \"#1\" \\\\ x' # c"
    settings = {"init_connect": value, "max_connections": 40, "innodb_buffer_pool_size": "32M"}
    d = _tempdir("perflab-test-values-my-")
    target = MariadbTarget(MariadbSettings.model_validate({"kind": "mariadb", "settings": settings}), d)
    try:
        endpoint = target.provision()
        option_file = target._option_file()
        lines = option_file.read_text().splitlines()
        assert [ln.split(" = ", 1)[0] for ln in lines[-len(settings):]] == list(settings)
        assert not [ln for ln in lines if ln.startswith(("skip-grant", "bind-address"))]
        with endpoint.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT @@init_connect, @@max_connections, @@skip_networking")
            assert cur.fetchone() == (value, 40, 1)
    finally:
        target.teardown()
        shutil.rmtree(d, ignore_errors=True)


def test_application_name_is_no_developer_option_and_trace_sort_is(run_cli, tmp_path: Path) -> None:
    """Both are absent from `postgres --describe-config`; only trace_sort is
    of PostgreSQL's developer options, and only it gets `check`'s note."""
    from perflab.targets.postgres.binaries import find_bin_dir

    try:
        find_bin_dir(None, None, None)
    except (UserError, OSError) as exc:
        pytest.skip(f"no PostgreSQL here: {exc}")
    status, text = _check(run_cli, tmp_path, '[target]\nkind = "postgres"\n[target.settings]\n'
                          'application_name = "perflab-test"\ntrace_sort = false')
    assert status == 0, text
    assert "target.settings.trace_sort" in text and "target.settings.application_name" not in text, text


def test_nginx_writes_one_line_per_directive_and_nginx_takes_it(run_cli, tmp_path: Path) -> None:
    from perflab.targets.nginx import NginxSettings, render_config

    given = {"add_header": 'X-Test "a b"', "keepalive_timeout": "5s", "sendfile": False}
    settings = NginxSettings.model_validate({"kind": "nginx", "settings": given})
    lines = render_config(settings, tmp_path, 8080, tmp_path).splitlines()
    for name in settings.directives():
        assert len([ln for ln in lines if ln.strip().startswith(f"{name} ")]) == 1, (name, lines)
    if shutil.which("nginx", path="/usr/sbin:/usr/bin") is None:
        pytest.skip("nginx is not installed (./dev setup installs it)")
    path = tmp_path / "nginx.toml"
    path.write_text(f"""
[experiment]
name = "nginx-lines"
[target]
kind = "nginx"
[target.settings]
add_header = {_toml(given["add_header"])}
keepalive_timeout = "5s"
sendfile = false
[workload]
kind = "http"
duration = "1s"
""")
    proc = run_cli("check", path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
