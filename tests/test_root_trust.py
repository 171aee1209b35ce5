"""Files perflab reads back are evidence, not orders (issue 50): a journal in
an output directory, an edited store, a results directory of another user,
or a process that names a target's directory never make perflab delete,
overwrite or kill what it did not make. Each test puts decoys where the
forged file points and checks they are untouched."""

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

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="decoys of another user (nobody) need root")

TOKEN_VAR = "PERFLAB_SERVER_TOKEN"
PASSWD = "root:x:0:0:root:/root:/bin/bash\n"
DUCK = '[experiment]\nname = "x"\n[target]\nkind = "duckdb"\n[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n'


def _nobody() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


def _start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def _alive(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None


@pytest.fixture
def decoy_process() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process of another user: `sleep` as nobody."""
    user = _nobody()
    proc = subprocess.Popen(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                             "sleep", "600"])
    deadline = time.monotonic() + 10
    while b"sleep" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)  # setpriv has exec'd sleep: the start time is the decoy's
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _decoys(where: Path) -> tuple[Path, Path]:
    """A directory with a file in it, and a passwd-like file."""
    directory = where / "perflab-decoy-dir"
    directory.mkdir()
    (directory / "file").write_text("keep\n")
    passwd = where / "passwd-decoy"
    passwd.write_text(PASSWD)
    return directory, passwd


def _forged_journal(path: Path, out_dir: Path, directory: Path, passwd: Path, victim: int) -> None:
    """A journal as a killed perflab would leave it (its pid long gone), naming the decoys."""
    entries = [
        {"op": "add", "kind": "remove-dir", "key": "a", "args": {"path": str(directory)},
         "module": "perflab.guardian"},
        {"op": "add", "kind": "host-file", "key": "b", "args": {"path": str(passwd), "value": "toor::0:0"},
         "module": "perflab.hostctl.knobs"},
        {"op": "add", "kind": "kill-process", "key": "c",
         "args": {"pid": victim, "start": _start_time(victim), "what": "sleep"}, "module": "perflab.guardian"},
    ]
    path.write_text(json.dumps({"pid": 4_000_000, "start": "1", "guardian": None, "out_dir": str(out_dir),
                                "entries": entries}))


def _assert_decoys_untouched(directory: Path, passwd: Path, victim: subprocess.Popen[bytes]) -> None:
    time.sleep(0.2)  # a SIGKILL is asynchronous
    assert (directory / "file").read_text() == "keep\n"
    assert passwd.read_text() == PASSWD
    assert _alive(victim)


@pytest.mark.parametrize("command", [["clean"], ["clean", "--yes"], ["resume"]])
def test_a_forged_journal_in_an_output_directory_is_never_acted_on(
        workdir: Path, run_cli: Any, decoy_process: subprocess.Popen[bytes], command: list[str]) -> None:
    directory, passwd = _decoys(workdir)
    out = workdir / "out"
    if "--yes" in command:  # a real store: clean gets as far as it can
        Store.create(out, name="x", spec_text=DUCK, spec_path=None, seed=1, factors=[], host={}).close()
    else:  # `resume` and `clean` of a directory that holds no store
        out.mkdir()
    copy = out / "host-journal.json"
    _forged_journal(copy, out, directory, passwd, decoy_process.pid)
    state = workdir / "state"
    proc = run_cli(command[0], out, *command[1:], check=False, env={"PERFLAB_STATE_DIR": str(state)})
    assert "Traceback" not in proc.stderr
    _assert_decoys_untouched(directory, passwd, decoy_process)
    assert copy.exists()  # the evidence stays
    if "--yes" in command:
        assert proc.returncode == 0 and str(copy) in proc.stderr, proc.stderr  # said, not acted on
    else:
        assert proc.returncode == 2, proc.stderr


@pytest.mark.parametrize("how", ["directory-writable-by-others", "file-of-another-user"])
def test_a_journal_in_the_state_directory_that_another_user_could_write_is_not_acted_on(
        workdir: Path, decoy_process: subprocess.Popen[bytes], how: str) -> None:
    from perflab.guardian import recover_orphans

    directory, passwd = _decoys(workdir)
    state = workdir / "state"
    state.mkdir(mode=0o700)
    journal = state / "journal-4000000.json"
    _forged_journal(journal, workdir / "out", directory, passwd, decoy_process.pid)
    journal.chmod(0o600)
    if how == "directory-writable-by-others":
        state.chmod(0o777)
    else:
        os.chown(journal, _nobody().pw_uid, _nobody().pw_gid)
    os.environ["PERFLAB_STATE_DIR"] = str(state)
    try:
        said = recover_orphans()
    finally:
        del os.environ["PERFLAB_STATE_DIR"]
    _assert_decoys_untouched(directory, passwd, decoy_process)
    assert len(said) == 1 and str(journal) in said[0] and "restored" not in said[0]
    assert journal.exists()


def test_each_undo_acts_only_on_what_perflab_could_have_made(
        workdir: Path, decoy_process: subprocess.Popen[bytes]) -> None:
    """Even from a journal perflab trusts: a directory not named perflab-*, a
    file outside /proc/sys and /sys, a process without perflab's token."""
    import perflab.hostctl.knobs  # noqa: F401  (registers host-file)
    from perflab.guardian import UNDO

    other = workdir / "not-perflabs"
    other.mkdir()
    (other / "file").write_text("keep\n")
    link = workdir / "perflab-link"
    link.symlink_to(other)
    _, passwd = _decoys(workdir)
    UNDO["remove-dir"]({"path": str(other)})
    UNDO["remove-dir"]({"path": str(link)})
    UNDO["remove-dir"]({"path": f"{workdir}/perflab-x/../not-perflabs"})
    UNDO["host-file"]({"path": str(passwd), "value": "toor::0:0"})
    UNDO["host-file"]({"path": f"/proc/sys/../../{passwd}", "value": "toor::0:0"})
    UNDO["kill-process"]({"pid": decoy_process.pid, "start": _start_time(decoy_process.pid)})
    UNDO["kill-process"]({"pid": decoy_process.pid, "start": _start_time(decoy_process.pid),
                          "token": secrets.token_hex(8)})
    time.sleep(0.2)
    assert (other / "file").read_text() == "keep\n" and link.is_symlink()
    assert passwd.read_text() == PASSWD
    assert _alive(decoy_process)
    # and what perflab made is still undone
    made = workdir / "perflab-made"
    made.mkdir()
    UNDO["remove-dir"]({"path": str(made)})
    token = secrets.token_hex(8)
    tracer = subprocess.Popen(["sleep", "600"], env={**os.environ, TOKEN_VAR: token})
    try:
        UNDO["kill-process"]({"pid": tracer.pid, "start": _start_time(tracer.pid), "token": token})
        assert tracer.wait(timeout=5) == -signal.SIGKILL
    finally:
        if tracer.poll() is None:
            tracer.kill()
    assert not made.exists()


def _store(out: Path, spec: str) -> None:
    Store.create(out, name="edited", spec_text=spec, spec_path=None, seed=1, factors=[], host={}).close()


def _edited_postgres_store(workdir: Path, wal_line: str) -> tuple[Path, Path]:
    data, decoy = workdir / "pgdata", workdir / "decoy-wal"
    data.mkdir()
    decoy.mkdir()
    (decoy / "precious").write_text("not perflab's\n")
    (data / "PG_VERSION").write_text("17\n")
    (data / "perflab-created").write_text("created by perflab initdb; perflab may drop and recreate it\n"
                                          + wal_line)
    _store(workdir / "out", f'[experiment]\nname = "edited"\n[target]\nkind = "postgres"\n[target.storage]\n'
           f'data_dir = "{data}"\nwal_dir = "{decoy}"\n[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n')
    return data, decoy


def test_clean_takes_the_wal_directory_from_the_clusters_mark_not_from_the_stored_experiment(
        workdir: Path, run_cli: Any) -> None:
    """A cluster perflab made with its WAL in `wal` (its mark says so, its
    pg_wal leads there); the store's experiment, edited, says the decoy."""
    wal = workdir / "wal"
    wal.mkdir()
    (wal / "000000010000000000000001").write_text("wal\n")
    data, decoy = _edited_postgres_store(workdir, f"wal_dir created: {wal}\n")
    (data / "pg_wal").symlink_to(wal)
    proc = run_cli("clean", workdir / "out", "--yes", check=False)
    assert (decoy / "precious").read_text() == "not perflab's\n", proc.stdout + proc.stderr
    assert proc.returncode == 0 and not data.exists() and not wal.exists(), proc.stdout + proc.stderr


@pytest.mark.parametrize("forged", ["mark-without-wal", "mark-of-another-user"])
def test_clean_of_an_edited_store_leaves_a_decoy_wal_directory(workdir: Path, run_cli: Any, forged: str) -> None:
    data, decoy = _edited_postgres_store(workdir, "")
    if forged == "mark-of-another-user":  # planted by the server's user, say: not perflab's
        os.chown(data / "perflab-created", _nobody().pw_uid, _nobody().pw_gid)
    proc = run_cli("clean", workdir / "out", "--yes", check=False)
    assert "Traceback" not in proc.stderr
    assert (decoy / "precious").read_text() == "not perflab's\n", proc.stdout + proc.stderr
    assert (data / "PG_VERSION").exists() == (forged == "mark-of-another-user")


def test_clean_of_an_edited_store_leaves_decoy_mariadb_redo_and_undo_directories(workdir: Path,
                                                                                 run_cli: Any) -> None:
    data = workdir / "mydata"
    data.mkdir()
    (data / "perflab-created").write_text("created by perflab (mariadb-install-db); perflab may remove it\n"
                                          "installed: complete\n")
    decoys = [workdir / "decoy-redo", workdir / "decoy-undo"]
    for d in decoys:
        d.mkdir()
        (d / "precious").write_text("not perflab's\n")
    _store(workdir / "out", f'[experiment]\nname = "edited"\n[target]\nkind = "mariadb"\n[target.storage]\n'
           f'data_dir = "{data}"\nredo_dir = "{decoys[0]}"\nundo_dir = "{decoys[1]}"\n'
           '[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n')
    proc = run_cli("clean", workdir / "out", "--yes", check=False)
    assert "Traceback" not in proc.stderr
    assert all((d / "precious").exists() for d in decoys), proc.stdout + proc.stderr
    assert not data.exists(), proc.stdout + proc.stderr


@pytest.mark.parametrize("command", [["clean", "--yes"], ["resume", "--quiet", "--no-report"]])
def test_clean_and_resume_refuse_an_output_directory_of_another_user(
        workdir: Path, run_cli: Any, command: list[str]) -> None:
    from perflab import plan, spec

    out = workdir / "out"
    store = Store.create(out, name="x", spec_text=DUCK, spec_path=None, seed=1, factors=[], host={})
    store.add_plan(plan.expand(spec.load_text(DUCK, None), 1))
    store.close()
    user = _nobody()
    for p in [out, *out.rglob("*")]:
        os.chown(p, user.pw_uid, user.pw_gid)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    proc = run_cli(command[0], out, *command[1:], check=False)
    assert proc.returncode == 2 and str(out) in proc.stderr and "Traceback" not in proc.stderr, \
        proc.stdout + proc.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert all(p.stat().st_uid == user.pw_uid for p in out.rglob("*"))  # nothing of root's made there


def test_stopping_a_server_never_signals_a_process_that_only_names_its_directory(workdir: Path) -> None:
    """A server is found by its token or its session, never by a command line:
    any user may start a process whose arguments name the target's directory."""
    import perflab.targets.serverproc  # noqa: F401  (registers web-server, server-process)
    from perflab.guardian import UNDO

    target_dir = workdir / "target"
    target_dir.mkdir()
    user = _nobody()
    python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
    decoy = subprocess.Popen(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                              python, "-c", "import time; time.sleep(600)", str(target_dir)])
    try:
        deadline = time.monotonic() + 10
        while str(target_dir).encode() not in Path(f"/proc/{decoy.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for kind in ("web-server", "server-process"):
            UNDO[kind]({"token": secrets.token_hex(8), "marker": str(target_dir)})
        time.sleep(0.2)
        assert decoy.poll() is None
    finally:
        decoy.kill()
        decoy.wait()


@pytest.mark.parametrize("owner", ["root", "nobody"])
def test_a_forged_server_record_in_a_target_directory_stops_nothing_and_removes_nothing(
        workdir: Path, owner: str) -> None:
    """The record a managed PostgreSQL leaves in its target directory (for the
    next start to stop a server a killed perflab left) names a decoy
    directory as its socket directory and a decoy process, whose command
    line says "postgres", as its postmaster: neither is touched."""
    from perflab.targets.postgres.managed import PIDFILE, ManagedPostgres
    from perflab.targets.postgres.settings import PostgresSettings

    user = _nobody()
    decoy_dir = workdir / "decoy-socket-dir"
    decoy_dir.mkdir()
    (decoy_dir / "file").write_text("keep\n")
    data = workdir / "somebody-elses"
    data.mkdir()
    python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
    decoy = subprocess.Popen(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                              python, "-c", "import time; time.sleep(600)", "postgres"])
    try:
        deadline = time.monotonic() + 10
        while b"postgres" not in Path(f"/proc/{decoy.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        target_dir = workdir / "target"
        target_dir.mkdir()
        record = target_dir / PIDFILE
        record.write_text(json.dumps({"postmaster_pid": decoy.pid, "data_dir": str(data),
                                      "socket_dir": str(decoy_dir), "perflab_pid": 4_000_000}))
        if owner == "nobody":
            os.chown(record, user.pw_uid, user.pw_gid)
        target = ManagedPostgres(PostgresSettings.model_validate({"kind": "postgres"}), target_dir)
        target._cleanup_leftover()
        time.sleep(0.2)
        assert decoy.poll() is None
        assert (decoy_dir / "file").read_text() == "keep\n"
    finally:
        decoy.kill()
        decoy.wait()


def test_network_and_cgroup_undos_leave_what_perflab_could_not_have_made(workdir: Path) -> None:
    """A journal naming another program's namespace, network device or cgroup
    (with a process in each) is not obeyed: perflab's own are named perflab*."""
    import perflab.hostctl.netns  # noqa: F401  (registers netns, link)
    from perflab.guardian import UNDO
    from perflab.hostctl.cgroups import find_hierarchies, parent_dir

    tag = secrets.token_hex(4)
    ns, dev = f"decoy-{tag}-ns", f"dcy{tag}"
    hierarchies = find_hierarchies()
    hierarchy = hierarchies.get("cpu") or next(iter(hierarchies.values()), None)
    group = parent_dir(hierarchy) / f"decoy-{tag}" if hierarchy is not None else Path("/nonexistent")
    made: list[str] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode == 0:
            made.append("netns")
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "600"]))
        if subprocess.run(["ip", "link", "add", dev, "type", "veth", "peer", "name", f"{dev}p"],
                          capture_output=True).returncode == 0:
            made.append("link")
        if (group.parent / "cgroup.procs").exists():
            group.mkdir()
            made.append("cgroup")
            procs.append(subprocess.Popen(["sleep", "600"]))
            (group / "cgroup.procs").write_text(str(procs[-1].pid))
        if not made:
            pytest.skip("no network namespace, dummy device or cgroup v2 can be made here")
        time.sleep(0.3)  # `ip netns exec` has entered the namespace and exec'd sleep
        UNDO["netns"]({"name": ns})
        UNDO["link"]({"name": dev})
        UNDO["cgroup"]({"dirs": [str(group)]})
        time.sleep(0.2)
        assert all(p.poll() is None for p in procs)
        assert ("netns" not in made or (Path("/run/netns") / ns).exists())
        assert ("link" not in made or (Path("/sys/class/net") / dev).exists())
        assert ("cgroup" not in made or group.is_dir())
    finally:
        for p in procs:
            p.kill()
            p.wait()
        if "netns" in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if "link" in made:
            subprocess.run(["ip", "link", "del", dev], capture_output=True)
        if "cgroup" in made:
            deadline = time.monotonic() + 5
            while group.exists() and time.monotonic() < deadline:
                try:
                    group.rmdir()
                except OSError:
                    time.sleep(0.05)
