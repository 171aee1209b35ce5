"""The dead man's switch: after a SIGKILL of perflab, nothing it started or
changed remains within 5 s (a real `perflab run`, a real PostgreSQL)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import cli_command, postmasters_under

# The target: after a SIGKILL of perflab, nothing of it remains within 5 s.
GONE_WITHIN_S = 5.0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _guardians_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"perflab.guardian" in cmdline:
            found.append(int(stat.parent.name))
    return found


def test_sigkill_of_perflab_run_leaves_no_server_and_no_socket_directory(workdir: Path) -> None:
    experiment = workdir / "e.toml"
    experiment.write_text(textwrap.dedent("""
        [experiment]
        name = "dead-man"
        [target]
        kind = "postgres"
        [workload]
        kind = "sql"
        statements = ["SELECT 1"]
        duration = "120s"
        [collect]
    """))
    out = workdir / "out"
    run = subprocess.Popen(cli_command("run", experiment, "--out", out, "--quiet", "--no-report"),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert run.stdout is not None
        seen = []
        for line in run.stdout:  # "[1/1] ... running": the run has started
            seen.append(line)
            if "running" in line:
                break
        else:
            raise AssertionError("perflab run ended early:\n" + "".join(seen))
        deadline = time.monotonic() + 120
        while not (records := list(out.glob("targets/*/perflab-target.json"))):  # written once the server is up
            assert time.monotonic() < deadline and run.poll() is None, "the server did not start"
            time.sleep(0.05)
        while True:  # written whole soon after it appears
            with contextlib.suppress(ValueError):
                record = json.loads(records[0].read_text())
                break
            time.sleep(0.05)
        socket_dir = Path(record["socket_dir"])
        postmaster = record["postmaster_pid"]
        assert socket_dir.is_dir() and _alive(postmaster) and postmasters_under(out) == [postmaster]
        guardians = _guardians_of(run.pid)
        assert len(guardians) == 1
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        killed_at = time.monotonic()
        while time.monotonic() - killed_at < GONE_WITHIN_S and (
                _alive(postmaster) or socket_dir.exists() or _alive(guardians[0])):
            time.sleep(0.1)
        assert not _alive(postmaster), "the server outlived perflab"
        assert postmasters_under(out) == []
        assert not socket_dir.exists(), "the socket directory outlived perflab"
        assert not _alive(guardians[0]), "the guardian outlived its work"
    finally:
        if run.poll() is None:
            run.kill()
        run.communicate(timeout=30)
        for pid in postmasters_under(out):  # only if the test failed
            os.kill(pid, signal.SIGKILL)


JOURNAL_THEN_DIE = textwrap.dedent("""
    import os, signal, sys
    from perflab.guardian import journal
    for path in sys.argv[1:]:
        os.mkdir(path)
        journal().add("remove-dir", path, path=path)
    journal().remove(sys.argv[1])  # undone by perflab itself: the guardian must leave it
    print(journal().guardian_pid(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_the_guardian_undoes_what_is_journaled_and_nothing_else(workdir: Path) -> None:
    kept, *undone = (str(workdir / f"perflab-guarded-{i}") for i in range(3))
    proc = subprocess.run([sys.executable, "-c", JOURNAL_THEN_DIE, kept, *undone], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    guardian = int(proc.stdout)
    deadline = time.monotonic() + GONE_WITHIN_S
    while _alive(guardian) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(guardian)
    assert [Path(p).exists() for p in undone] == [False, False]
    assert Path(kept).is_dir()


def test_a_clean_exit_leaves_the_guardian_nothing_to_do(workdir: Path) -> None:
    path = workdir / "perflab-clean"
    script = ("import os, sys; from perflab.guardian import journal; os.mkdir(sys.argv[1]); "
              "journal().add('remove-dir', 'd', path=sys.argv[1]); journal().remove('d'); "
              "print(journal().guardian_pid())")
    proc = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=30)
    guardian = int(proc.stdout)
    deadline = time.monotonic() + GONE_WITHIN_S
    while _alive(guardian) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(guardian)
    assert path.is_dir()
