"""What an experiment needs is named at `check`: an optional library that
does not import (the extra to install), and a `process` server's program
that its user cannot run; a server that still cannot start fails with its
exit status and its output, never a Python error.

The missing library is simulated as a user without the extra would have it:
a directory first on PYTHONPATH holds a `pymysql` package that raises
ImportError, so `import pymysql` fails in the perflab under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cli_command

MARIADB = """
[experiment]
name = "needs-pymysql"
[target]
kind = "mariadb"
[workload]
kind = "sql"
statements = ["SELECT 1"]
iterations = 1
"""


@pytest.fixture
def no_pymysql(tmp_path: Path) -> dict[str, str]:
    """An environment in which `import pymysql` raises ImportError."""
    blocked = tmp_path / "blocked"
    (blocked / "pymysql").mkdir(parents=True)
    (blocked / "pymysql" / "__init__.py").write_text(
        'raise ImportError("No module named \'pymysql\' (blocked by the test)", name="pymysql")\n')
    path = os.pathsep.join([str(blocked), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path}


def _perflab(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli_command(*map(str, args)), capture_output=True, text=True, timeout=240, env=env)


def test_check_names_the_extra_of_a_missing_library(no_pymysql: dict[str, str], tmp_path: Path) -> None:
    experiment = tmp_path / "e.toml"
    experiment.write_text(MARIADB)
    proc = _perflab("check", experiment, env=no_pymysql)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "target.kind" in proc.stderr and "PyMySQL" in proc.stderr, proc.stderr
    assert "pip install 'perflab[mysql]'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    # the collector that needs it too, on a target that would serve it
    experiment.write_text(MARIADB.replace('[workload]', '[collect]\nmysqlstat = {}\n[workload]'))
    proc = _perflab("check", experiment, env=no_pymysql)
    assert proc.returncode == 2 and "pip install 'perflab[mysql]'" in proc.stderr, proc.stderr


def test_list_shows_which_kinds_cannot_run_and_the_extra(no_pymysql: dict[str, str]) -> None:
    proc = _perflab("list", env=no_pymysql)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    mariadb = next(line for line in lines if line.strip().startswith("mariadb "))
    assert "PyMySQL" in mariadb, mariadb
    pymysql = next(line for line in lines if line.strip().startswith("PyMySQL "))
    assert "missing" in pymysql and "pip install 'perflab[mysql]'" in pymysql, pymysql


def test_the_readiness_probe_lets_an_import_error_through(no_pymysql: dict[str, str], tmp_path: Path) -> None:
    """The managed MariaDB's probe ("does the server answer yet?") must not
    read a missing library as a server that is not up yet."""
    probe = (
        "from pathlib import Path\n"
        "from perflab.targets.mariadb.managed import MariadbTarget\n"
        "target = MariadbTarget.__new__(MariadbTarget)\n"
        f"target.socket_dir = Path({str(tmp_path)!r})\n"
        "try:\n"
        "    print('answers' if target._answers() else 'not up')\n"
        "except ImportError as exc:\n"
        "    print('ImportError', exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=no_pymysql)
    assert proc.stdout.startswith("ImportError"), proc.stdout + proc.stderr


def test_report_without_matplotlib_names_the_library(tmp_path: Path) -> None:
    from synthetic_store import build_store

    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=1, series_points=2, histograms=False)
    blocked = tmp_path / "blocked"
    (blocked / "matplotlib").mkdir(parents=True)
    (blocked / "matplotlib" / "__init__.py").write_text(
        'raise ImportError("No module named \'matplotlib\' (blocked by the test)", name="matplotlib")\n')
    proc = _perflab("report", out, env={**os.environ, "PYTHONPATH": str(blocked)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "matplotlib" in proc.stderr and "pip install" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# ------------------------------------------------------------ a process server nobody can run

def _root_only() -> None:
    if os.geteuid() != 0:
        pytest.skip("target.run_as applies when perflab is root")


def _private_program(tmp_path: Path, name: str) -> Path:
    """An executable script in a directory only root may enter (as a
    program under /root is to nobody)."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    program = private / name
    program.write_text(f"#!/bin/sh\nexec {sys.executable} -m http.server \"$@\"\n")
    program.chmod(0o755)
    return program


def _process_experiment(tmp_path: Path, command: str) -> Path:
    experiment = tmp_path / "p.toml"
    experiment.write_text(f"""
[experiment]
name = "process-as-nobody"
[target]
kind = "process"
command = {command!r}
[workload]
kind = "http"
clients = 1
threads = 1
duration = "1s"
root = "site"
request_mix = [{{ path = "/" }}]
""")
    (tmp_path / "site").mkdir(exist_ok=True)
    (tmp_path / "site" / "index.html").write_text("hello")
    return experiment


def test_check_refuses_a_program_run_as_cannot_run(workdir: Path) -> None:
    _root_only()
    tmp_path = workdir  # a directory nobody may enter, as the server's files must be
    program = _private_program(tmp_path, "perflab-test-server")
    experiment = _process_experiment(tmp_path, f"{program} {{port}} --bind 127.0.0.1")
    proc = _perflab("check", experiment)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "target.command" in proc.stderr and "nobody" in proc.stderr and str(program.parent) in proc.stderr
    # the same program found on PATH: PATH's entries are looked through as the user's exec would
    experiment = _process_experiment(tmp_path, "perflab-test-server {port} --bind 127.0.0.1")
    env = {**os.environ, "PATH": f"{program.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(cli_command("check", str(experiment)), capture_output=True, text=True, timeout=240,
                          env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "target.command" in proc.stderr and "perflab-test-server" in proc.stderr, proc.stderr


def test_a_server_that_cannot_start_fails_with_its_status_and_output(workdir: Path) -> None:
    """What check cannot know (the script's interpreter is out of the
    user's reach) fails the start with the exit status and the output's
    last line, never an AttributeError."""
    _root_only()
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    from perflab.errors import RunFailure
    from perflab.targets.process import ProcessSettings, ProcessTarget

    tmp_path = workdir
    interpreter = _private_program(tmp_path, "interp")
    public = tmp_path / "public"
    public.mkdir(mode=0o755)
    script = public / "server"
    script.write_text(f"#!{interpreter}\n")
    script.chmod(0o755)
    settings = ProcessSettings(kind="process", command=f"{script} {{port}}", start_timeout="20s")
    assert ProcessTarget.preflight(settings, tmp_path) == []  # runnable as far as check can see
    target = ProcessTarget(settings, tmp_path / "target", tmp_path)
    try:
        with pytest.raises(RunFailure) as failed:
            target.provision()
    finally:
        target.teardown()
    message = str(failed.value)
    assert "exited at start with status" in message and "status None" not in message, message
    assert failed.value.log_tail, "the server's output is kept with the failure"
