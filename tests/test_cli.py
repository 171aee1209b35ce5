"""The command line: versions, listing, argument errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from perflab import __version__, _engine


def test_version_shows_package_and_engine(run_cli) -> None:
    out = run_cli("--version").stdout
    assert f"perflab {__version__}" in out and f"engine {_engine.__version__}" in out
    assert _engine.build_profile in out


def test_list_shows_every_registered_kind_with_a_description(run_cli) -> None:
    from perflab.collectors import COLLECTORS
    from perflab.targets import TARGETS
    from perflab.workloads import WORKLOADS

    out = run_cli("list").stdout
    for registry in (TARGETS, WORKLOADS, COLLECTORS):
        # a name may be a target and a workload (http): look in the registry's own part
        part = out.split(f"{registry.what}s:\n", 1)[1].split("\n\n")[0].split(":\n")[0]
        for entry in registry.entries():
            line = next(line for line in part.splitlines() if line.strip().startswith(entry.name + " "))
            assert entry.description in line
            # every registry line points at a class that imports
            assert registry.get(entry.name).__name__


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["frobnicate"],
        ["run"],
        ["export", "/nonexistent-dir", "--format", "xml"],
        ["show", "/nonexistent-dir"],
        ["resume", "/tmp"],
        ["report", "/nonexistent-dir"],
    ],
)
def test_bad_arguments_exit_2_without_a_traceback(run_cli, args: list[str]) -> None:
    proc = run_cli(*args, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "error" in proc.stderr


def test_show_of_a_directory_without_a_store(run_cli, tmp_path: Path) -> None:
    proc = run_cli("show", tmp_path, check=False)
    assert proc.returncode == 2 and "holds no perflab store" in proc.stderr and "fix:" in proc.stderr


def test_show_drops_columns_no_run_has_and_prints_no_empty_unit(run_cli, tmp_path: Path) -> None:
    import sqlite3

    from synthetic_store import build_store

    out = build_store(tmp_path / "out", clients=[1, 2], sync=["", "off"], repetitions=1, histograms=False)
    db = sqlite3.connect(out / "perflab.sqlite")
    with db:
        # a headline metric none of these runs has (a throughput test that did not run), and a unitless one
        db.execute("""UPDATE run SET headline_json = '["tps", "qphh_at_size", "score"]'""")
        db.execute("INSERT INTO metric SELECT id, 'score', 7.0, '', '', 1, 'measured' FROM run")
    db.close()
    shown = run_cli("show", out).stdout
    header = shown.splitlines()[1]
    assert "tps [tx/s]" in header and "score" in header
    assert "qphh_at_size" not in shown and "[]" not in shown and "notes" not in header
    # the default level of a factor is a word, not a blank
    assert "default" in shown.splitlines()[3]
