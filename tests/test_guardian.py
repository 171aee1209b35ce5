"""The dead man's switch: after a SIGKILL of perflab, nothing it started or
changed remains (a real `perflab run`, a real PostgreSQL; the 5 s it takes is
timed by benchmarks/host_changes.py, not here)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import cli_command, postmasters_under

# After a SIGKILL of perflab, nothing of it remains: the guardian undoes it.
# The 5 s promise is timed by benchmarks/host_changes.py; here a deadline only
# tells an undo that never comes from one a busy machine slowed.
GONE_WITHIN_S = 60.0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _children_running(pid: int, command: bytes) -> list[int]:
    """Children of `pid` whose NUL-separated command line contains `command`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and command in cmdline:
            found.append(int(stat.parent.name))
    return found


def _guardians_of(pid: int) -> list[int]:
    return _children_running(pid, b"perflab.guardian")


def _start_run(workdir: Path) -> tuple[subprocess.Popen[str], Path]:
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
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return run, out


def _wait_for(condition: Callable[[], Any], run: subprocess.Popen[str], what: str) -> Any:
    deadline = time.monotonic() + 120
    while not (found := condition()):
        assert time.monotonic() < deadline and run.poll() is None, f"perflab ended or timed out before {what}"
        time.sleep(0.01)
    return found


def _kill_and_check(run: subprocess.Popen[str], out: Path, guardian: int, socket_dir: Path | None) -> None:
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    killed_at = time.monotonic()
    while time.monotonic() - killed_at < GONE_WITHIN_S and (
            postmasters_under(out) or (socket_dir and socket_dir.exists()) or _alive(guardian)):
        time.sleep(0.1)
    assert postmasters_under(out) == [], f"the server outlived perflab by {GONE_WITHIN_S:.0f} s"
    assert socket_dir is None or not socket_dir.exists(), f"the socket directory outlived perflab by {GONE_WITHIN_S:.0f} s"
    assert not _alive(guardian), "the guardian outlived its work"


def test_sigkill_of_perflab_run_leaves_no_server_and_no_socket_directory(workdir: Path) -> None:
    run, out = _start_run(workdir)
    try:
        records = _wait_for(lambda: list(out.glob("targets/*/perflab-target.json")), run, "the server started")
        while True:  # written whole soon after it appears
            with contextlib.suppress(ValueError):
                record = json.loads(records[0].read_text())
                break
            time.sleep(0.05)
        socket_dir = Path(record["socket_dir"])
        assert socket_dir.is_dir() and postmasters_under(out) == [record["postmaster_pid"]]
        guardians = _guardians_of(run.pid)
        assert len(guardians) == 1
        time.sleep(1)  # mid-run
        _kill_and_check(run, out, guardians[0], socket_dir)
    finally:
        if run.poll() is None:
            run.kill()
        for pid in postmasters_under(out):  # only if the test failed
            os.kill(pid, signal.SIGKILL)


def test_sigkill_of_perflab_while_its_server_starts_leaves_no_server(workdir: Path) -> None:
    """Killed while pg_ctl is starting the server: pg_ctl lives on and the
    server finishes starting after perflab is gone; the guardian stops it.
    (The narrower window before the server writes its lock file, which the
    guardian waits out, is too short to hit from here reliably.)"""
    run, out = _start_run(workdir)
    try:
        guardian = _wait_for(lambda: _guardians_of(run.pid), run, "the guardian started")[0]
        _wait_for(lambda: _children_running(run.pid, b"pg_ctl\0start"), run, "pg_ctl start")
        _kill_and_check(run, out, guardian, None)
    finally:
        if run.poll() is None:
            run.kill()
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


JOURNAL_KILL_BOTH = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from perflab.guardian import journal
    journal().bind(Path(sys.argv[1]))
    os.mkdir(sys.argv[2])
    journal().add("remove-dir", sys.argv[2], path=sys.argv[2])
    if sys.argv[3] == "both":  # the guardian dies first, then perflab: nobody undoes it now
        os.kill(journal().guardian_pid(), signal.SIGKILL)
        os.waitpid(journal().guardian_pid(), 0)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _kill_after_journaling(workdir: Path, how: str) -> tuple[Path, Path, Path]:
    state, out, made = workdir / "state", workdir / "out", workdir / "perflab-orphan"
    out.mkdir()
    env = {**os.environ, "PERFLAB_STATE_DIR": str(state)}
    proc = subprocess.run([sys.executable, "-c", JOURNAL_KILL_BOTH, str(out), str(made), how],
                          capture_output=True, text=True, timeout=30, env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return state, out, made


def test_a_journal_whose_perflab_and_guardian_were_killed_is_undone_by_the_next_perflab(
        workdir: Path, run_cli: Callable[..., Any]) -> None:
    state, out, made = _kill_after_journaling(workdir, "both")
    time.sleep(0.5)
    # Nobody undid it; the journal is on disk, in the state directory and the output directory.
    assert made.is_dir()
    [state_file] = state.glob("journal-*.json")
    copy = out / "host-journal.json"
    assert json.loads(copy.read_text())["entries"] == json.loads(state_file.read_text())["entries"]
    # Any later perflab start finds it, undoes it and says so.
    experiment = workdir / "e.toml"
    experiment.write_text('[experiment]\nname = "x"\n[target]\nkind = "postgres"\n'
                          '[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n')
    env = {**os.environ, "PERFLAB_STATE_DIR": str(state)}
    proc = subprocess.run(cli_command("check", experiment), capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "restored 1 of 1 host change(s) left by a killed perflab" in proc.stderr
    assert str(out) in proc.stderr and str(made) in proc.stderr
    assert not made.exists()
    assert not list(state.glob("journal-*.json")) and not copy.exists()
    # Once only: the next start has nothing to say.
    again = subprocess.run(cli_command("check", experiment), capture_output=True, text=True, timeout=120, env=env)
    assert "restored" not in again.stderr


def test_resume_reports_the_journal_in_its_output_directory_and_never_acts_on_it(workdir: Path) -> None:
    """The copy in an output directory is evidence, not an order (issue 50):
    with the state directory's journal lost (a reboot cleared /run), resume
    says what the copy lists and undoes none of it."""
    state, out, made = _kill_after_journaling(workdir, "both")
    for f in state.glob("journal-*.json"):  # the state directory was lost (a reboot cleared /run)
        f.unlink()
    from perflab.guardian import recover_orphans

    os.environ["PERFLAB_STATE_DIR"] = str(state)
    try:
        said = recover_orphans(out)
    finally:
        del os.environ["PERFLAB_STATE_DIR"]
    assert len(said) == 1 and str(out / "host-journal.json") in said[0] and "restored" not in said[0]
    assert made.is_dir() and (out / "host-journal.json").exists()


def test_a_guardian_that_did_its_work_deletes_the_journal_files(workdir: Path) -> None:
    state, out, made = _kill_after_journaling(workdir, "perflab")
    deadline = time.monotonic() + GONE_WITHIN_S
    while (made.exists() or list(state.glob("journal-*.json"))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not made.exists()
    assert not list(state.glob("journal-*.json")) and not (out / "host-journal.json").exists()


def test_a_live_perflabs_journal_is_left_alone(workdir: Path) -> None:
    from perflab.guardian import JOURNAL_FILE, recover_orphans

    state = workdir / "state"
    state.mkdir()
    me = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
    made = workdir / "perflab-live"
    made.mkdir()
    record = {"pid": os.getpid(), "start": me, "guardian": None, "out_dir": None,
              "entries": [{"op": "add", "kind": "remove-dir", "key": "k", "args": {"path": str(made)}}]}
    (state / "journal-1.json").write_text(json.dumps(record))
    os.environ["PERFLAB_STATE_DIR"] = str(state)
    try:
        assert recover_orphans() == []
    finally:
        del os.environ["PERFLAB_STATE_DIR"]
    assert made.is_dir() and (state / "journal-1.json").exists()
    assert JOURNAL_FILE == "host-journal.json"
