"""An undo acts only on what perflab proves it made (issue 50): a journal of
another experiment is left to that experiment, a mount or a loop device is
undone only when it is the one perflab recorded, a Ray cluster's undo kills
only its own processes, and giving a path to a server's user never follows a
symlink. Each test puts a decoy where the recorded name points."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perflab.store import Store

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts, loop devices and another user's files need root")

DUCK = '[experiment]\nname = "x"\n[target]\nkind = "duckdb"\n[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\niterations = 1\n'


def _start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def _experiment(out: Path) -> tuple[str, str]:
    """A store with a plan (duckdb: resume runs it in a moment); its path and experiment id."""
    from perflab import plan, spec

    store = Store.create(out, name="x", spec_text=DUCK, spec_path=None, seed=1, factors=[], host={})
    store.add_plan(plan.expand(spec.load_text(DUCK, None), 1))
    try:
        return str(store.path), store.experiment_id()
    finally:
        store.close()


def _dead_journal(path: Path, out_dir: Path, store: str | None, experiment_id: str | None, made: Path) -> None:
    """A journal a killed perflab (pid long gone) left in the state directory, naming its experiment."""
    path.write_text(json.dumps({
        "pid": 4_000_000 + len(path.name), "start": "1", "guardian": None, "out_dir": str(out_dir), "store": store,
        "experiment_id": experiment_id,
        "entries": [{"op": "add", "kind": "remove-dir", "key": f"remove-dir:{made}", "args": {"path": str(made)},
                     "module": "perflab.guardian"}]}))
    path.chmod(0o600)


@pytest.mark.parametrize("command", [["clean", "--yes"], ["resume", "--quiet", "--no-report"]])
def test_resume_and_clean_act_only_on_the_journals_of_their_own_experiment(
        workdir: Path, run_cli: Any, command: list[str]) -> None:
    ours, theirs = workdir / "ours", workdir / "theirs"
    our_store, our_id = _experiment(ours)
    their_store, their_id = _experiment(theirs)
    state = workdir / "state"
    state.mkdir(mode=0o700)
    made = {name: workdir / f"perflab-{name}" for name in ("ours", "theirs", "same-path-other-id", "none")}
    for d in made.values():
        d.mkdir()
    _dead_journal(state / "journal-1.json", ours, our_store, our_id, made["ours"])
    _dead_journal(state / "journal-22.json", theirs, their_store, their_id, made["theirs"])
    # a store made again at our path: another experiment, whose journal is not ours
    _dead_journal(state / "journal-333.json", ours, our_store, secrets.token_hex(16), made["same-path-other-id"])
    _dead_journal(state / "journal-4444.json", ours, None, None, made["none"])  # names no experiment
    proc = run_cli(command[0], ours, *command[1:], check=False, env={"PERFLAB_STATE_DIR": str(state)})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert not made["ours"].exists(), proc.stderr
    assert all(made[n].is_dir() for n in ("theirs", "same-path-other-id", "none")), proc.stderr
    assert sorted(p.name for p in state.glob("journal-*.json")) == [
        "journal-22.json", "journal-333.json", "journal-4444.json"]
    # the other experiment's own clean undoes its journal; a run or check, every orphan
    run_cli("clean", theirs, "--yes", env={"PERFLAB_STATE_DIR": str(state)})
    assert not made["theirs"].exists() and made["none"].is_dir()
    experiment = workdir / "e.toml"
    experiment.write_text(DUCK)
    run_cli("check", experiment, env={"PERFLAB_STATE_DIR": str(state)})
    assert not made["none"].exists() and not made["same-path-other-id"].exists()
    assert not list(state.glob("journal-*.json"))


def test_a_journal_names_the_store_and_id_it_was_bound_to(workdir: Path) -> None:
    from perflab.guardian import Journal

    store, experiment_id = _experiment(workdir / "out")
    made = workdir / "perflab-bound"
    made.mkdir()
    os.environ["PERFLAB_STATE_DIR"] = str(workdir / "state")
    j = Journal()
    try:
        j.bind(workdir / "out", Path(store), experiment_id)
        j.add("remove-dir", f"remove-dir:{made}", path=str(made))
        record = json.loads((workdir / "state" / f"journal-{os.getpid()}.json").read_text())
        assert (record["store"], record["experiment_id"]) == (store, experiment_id)
    finally:
        j.close()  # its guardian undoes the entry
        del os.environ["PERFLAB_STATE_DIR"]
    assert not made.exists()


def _mounted(path: Path) -> bool:
    from perflab.hostctl.mounts import mount_entry

    return mount_entry(path) is not None


@pytest.fixture
def tmpfs_mounts(workdir: Path) -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for path in made:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _tmpfs(where: Path, source: str, made: list[Path]) -> None:
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,nosuid,nodev", source, str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    made.append(where)
    (where / "precious").write_text("keep\n")


def test_a_mount_undo_unmounts_only_the_mount_perflab_recorded(workdir: Path, tmpfs_mounts: list[Path]) -> None:
    """A journal naming a decoy mount point (not perflab's), or perflab's mount
    point with something else mounted there now, unmounts nothing."""
    import perflab.hostctl.scratchfs  # noqa: F401  (registers mount)
    from perflab.guardian import UNDO

    def mount_record(mountpoint: Path, sources: list[str]) -> dict[str, Any]:  # a journal entry's arguments
        return {"mountpoint": str(mountpoint), "sources": sources}

    decoy = workdir / "decoy-fs"
    _tmpfs(decoy, "decoy", tmpfs_mounts)
    UNDO["mount"]({"mountpoint": str(decoy)})  # as journals were written before the sources were recorded
    UNDO["mount"](mount_record(decoy, ["decoy"]))
    ours_in_name = workdir / "perflab-data-fs"
    _tmpfs(ours_in_name, "someone-elses", tmpfs_mounts)
    UNDO["mount"]({"mountpoint": str(ours_in_name)})
    UNDO["mount"](mount_record(ours_in_name, ["perflab-x-data"]))
    assert _mounted(decoy) and (decoy / "precious").exists()
    assert _mounted(ours_in_name) and (ours_in_name / "precious").exists()
    # and perflab's own is unmounted
    ours = workdir / "perflab-wal-fs"
    _tmpfs(ours, "perflab-x-wal", tmpfs_mounts)
    UNDO["mount"](mount_record(ours, ["perflab-x-wal"]))
    assert not _mounted(ours)


@pytest.fixture
def loop_devices() -> Iterator[list[str]]:
    attached: list[str] = []
    yield attached
    for device in attached:
        subprocess.run(["losetup", "-d", device], capture_output=True)


def _attach(path: Path, attached: list[str]) -> str:
    with open(path, "wb") as f:
        f.truncate(2**20)
    proc = subprocess.run(["losetup", "--find", "--show", str(path)], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.startswith("/dev/"):
        pytest.skip(f"no loop device can be attached here: {proc.stderr.strip()}")
    attached.append(proc.stdout.strip())
    return attached[-1]


def _backing_file(device: str) -> str | None:
    try:
        return (Path("/sys/block") / Path(device).name / "loop" / "backing_file").read_text().strip()
    except OSError:
        return None


def test_a_loop_undo_detaches_only_a_device_on_the_file_perflab_made(workdir: Path,
                                                                     loop_devices: list[str]) -> None:
    """A journal naming a decoy image (not perflab's), or a perflab-named link
    to it, detaches nothing; perflab's own image's device is detached."""
    import perflab.hostctl.scratchfs  # noqa: F401  (registers loop)
    from perflab.guardian import UNDO

    decoy = workdir / "decoy.img"
    device = _attach(decoy, loop_devices)
    link = workdir / "perflab-link.img"
    link.symlink_to(decoy)
    UNDO["loop"]({"backing_file": str(decoy)})
    UNDO["loop"]({"backing_file": str(link)})
    assert _backing_file(device) == str(decoy)
    ours = workdir / "perflab-x-data.img"
    our_device = _attach(ours, loop_devices)
    UNDO["loop"]({"backing_file": str(ours)})
    deadline = time.monotonic() + 10  # the kernel detaches it once udev lets go
    while _backing_file(our_device) == str(ours) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _backing_file(our_device) != str(ours)
    assert _backing_file(device) == str(decoy)


def test_a_ray_cluster_undo_kills_no_process_that_only_holds_a_file_in_its_directory(workdir: Path) -> None:
    """The cluster's directory name is visible in /tmp: a process of another
    user holding a file there (made again after perflab removed it) is not
    the cluster's. Only the token, or a journaled pid and start time, prove it."""
    from perflab.drivers.ray import CLUSTER_ENV, undo_cluster

    user = pwd.getpwnam("nobody")
    token = secrets.token_hex(8)
    temp_dir = workdir / f"perflab-ray-{token}"
    temp_dir.mkdir()
    os.chown(temp_dir, user.pw_uid, user.pw_gid)
    python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
    held = temp_dir / "held"
    decoy = subprocess.Popen(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                              python, "-c", f"import time; f = open({str(held)!r}, 'w'); time.sleep(600)"],
                             env={"PATH": "/usr/bin:/bin"})
    with_token = subprocess.Popen(["sleep", "600"], env={"PATH": "/usr/bin:/bin", CLUSTER_ENV: token})
    recorded = subprocess.Popen(["sleep", "600"], env={"PATH": "/usr/bin:/bin"})
    try:
        deadline = time.monotonic() + 10
        while not any(os.readlink(fd) == str(held) for fd in Path(f"/proc/{decoy.pid}/fd").iterdir()
                      if fd.is_symlink()):
            assert decoy.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        while b"sleep" not in Path(f"/proc/{with_token.pid}/cmdline").read_bytes():
            time.sleep(0.01)
        undo_cluster({"token": token, "temp_dir": str(temp_dir),
                      "processes": [[recorded.pid, _start_time(recorded.pid)]]})
        assert with_token.wait(timeout=10) == -signal.SIGKILL
        time.sleep(0.2)  # a SIGKILL is asynchronous
        assert decoy.poll() is None
        assert recorded.wait(timeout=10) == -signal.SIGKILL
    finally:
        for p in (decoy, with_token, recorded):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_giving_a_path_to_the_servers_user_never_follows_a_symlink(workdir: Path) -> None:
    """A link the server's user planted where perflab hands a path over (a
    log, a data directory) leaves root's file root's."""
    from perflab.targets.mariadb.managed import _chown
    from perflab.targets.postgres.users import chown

    precious = workdir / "root-only"
    precious.write_text("secret\n")
    precious.chmod(0o600)
    user = pwd.getpwnam("nobody")
    for name, give in (("postgres", chown), ("mariadb", _chown)):
        link = workdir / f"{name}.log"
        link.symlink_to(precious)
        give(link, "nobody")
        assert precious.stat().st_uid == 0 and os.lstat(link).st_uid == user.pw_uid, name
