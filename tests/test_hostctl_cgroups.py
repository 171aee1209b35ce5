"""perflab.hostctl.cgroups against the machine's real cgroups (v1 or v2,
whichever it mounts per controller): limits read back, a process tree born
inside, real throttling, removal, preflight, and the guardian's undo after a
SIGKILL. Only detection is also checked on made-up mountinfo text."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from perflab.hostctl.cgroups import (
    Hierarchy,
    ResourceSettings,
    ServerCgroup,
    cgroup_of,
    find_hierarchies,
    parent_dir,
    resource_problems,
    undo_cgroup,
)

# serial: measures the machine (timings, rates, other CPU) or changes it for everyone; runs after the parallel tests, alone
pytestmark = pytest.mark.serial

# The guardian's undo after a SIGKILL, waited for: its promise (within 5 s)
# is a quiet machine's figure, measured by benchmarks/host_changes.py.
GONE_WITHIN_S = 60.0
PYTHON_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    p for p in (str(Path(__file__).resolve().parents[1] / "python"), os.environ.get("PYTHONPATH")) if p)}


def _leftovers() -> list[Path]:
    """perflab-test* cgroups in any hierarchy, at its root or where perflab makes them."""
    found: set[Path] = set()
    for h in find_hierarchies().values():
        for base in (h.mountpoint, parent_dir(h)):
            found.update(base.glob("perflab-test*"))
    return sorted(found)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _wait(condition: Callable[[], object], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _require(*controllers: str) -> dict[str, Hierarchy]:
    if os.geteuid() != 0:
        pytest.skip("making cgroups needs root")
    found = find_hierarchies()
    missing = [c for c in controllers if c not in found]
    if missing:
        pytest.skip(f"this machine mounts no cgroup hierarchy with {', '.join(missing)}")
    return found


@pytest.fixture
def make_cgroup() -> Iterator[Callable[..., tuple[ServerCgroup, Callable[[list[str]], subprocess.Popen[bytes]]]]]:
    """Makes test cgroups and starts processes in them; all are killed and
    removed afterwards, and no perflab-test* cgroup may remain."""
    groups: list[ServerCgroup] = []
    procs: list[subprocess.Popen[bytes]] = []

    def make(**fields: object) -> tuple[ServerCgroup, Callable[[list[str]], subprocess.Popen[bytes]]]:
        group = ServerCgroup(f"perflab-test-{uuid.uuid4().hex[:8]}", ResourceSettings.model_validate(fields))
        groups.append(group)
        group.create()

        def start(argv: list[str]) -> subprocess.Popen[bytes]:
            proc = subprocess.Popen(group.wrap(argv))
            procs.append(proc)
            _wait(lambda: proc.pid in group.pids() or proc.poll() is not None, 5, "the process to join")
            return proc
        return group, start

    try:
        yield make
    finally:
        try:
            for group in groups:
                group.remove(kill=True)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        assert _leftovers() == []


# -- settings and detection (no host change)


def test_settings_take_the_documented_shapes() -> None:
    s = ResourceSettings.model_validate({"cpus": "0-1,3", "cpu_quota": 1.5, "memory": "2GB", "memory_high": "1GB",
                                         "io_read_bps": {"vda": "50MB"}, "io_write_bps": {"vda": 1048576}})
    assert (s.memory, s.memory_high) == (2 * 2**30, 2**30)
    assert s.io_read_bps == {"vda": 50 * 2**20} and s.io_write_bps == {"vda": 2**20}
    assert s.controllers() == ["cpuset", "cpu", "memory", "io"]
    assert ResourceSettings.model_validate({}).controllers() == []
    assert ResourceSettings.model_validate({"cpu_quota": 2}).cpu_quota == 2


@pytest.mark.parametrize("fields, says", [
    ({"cpus": "0-"}, "allowed: a CPU list"),
    ({"cpus": "3-1"}, "allowed: a CPU list"),
    ({"cpus": ""}, "allowed: a CPU list"),
    ({"cpus": 0}, "string"),
    ({"cpu_quota": 0}, "greater than or equal to 0.01"),
    ({"cpu_quota": -1.0}, "greater than or equal to 0.01"),
    ({"memory": "2 parsecs"}, "is not a size"),
    ({"memory": 0}, "greater than 0"),
    ({"memory": "1GB", "memory_high": "2GB"}, "memory_high at most memory"),
    ({"io_read_bps": "50MB"}, "dictionary"),
    ({"io_read_bps": {"../vda": "1MB"}}, "a block device name"),
    ({"io_write_bps": {"vda": 0}}, "above 0"),
    ({"cpu": "0"}, "Extra inputs are not permitted"),
])
def test_bad_settings_are_refused_with_what_is_allowed(fields: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        ResourceSettings.model_validate(fields)


MOUNTINFO = textwrap.dedent("""\
    22 1 0:21 / /proc rw,nosuid - proc proc rw
    31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
    32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
    34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
    35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
    38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
""")


def test_detection_prefers_v2_per_controller_and_falls_back_to_v1() -> None:
    # a cgroup2 mount without controllers (this VM's case): every controller is v1
    v1 = find_hierarchies(MOUNTINFO, lambda mountpoint: set())
    assert {c: (h.version, str(h.mountpoint)) for c, h in v1.items()} == {
        "cpuset": (1, "/sys/fs/cgroup/cpuset"), "cpu": (1, "/sys/fs/cgroup/cpu,cpuacct"),
        "memory": (1, "/sys/fs/cgroup/memory"), "io": (1, "/sys/fs/cgroup/blkio")}
    assert v1["memory"].mount_root == "/docker/abc" and v1["io"].kernel_name == "blkio"
    # the cgroup2 mount has cpu and io: those two are v2, the rest stay v1
    mixed = find_hierarchies(MOUNTINFO, lambda mountpoint: {"cpu", "io", "pids"})
    assert {c: h.version for c, h in mixed.items()} == {"cpuset": 1, "cpu": 2, "memory": 1, "io": 2}
    assert mixed["io"].mountpoint == Path("/sys/fs/cgroup/unified") and mixed["io"].kernel_name == "io"
    # a unified-only machine
    unified = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    v2 = find_hierarchies(unified, lambda mountpoint: {"cpuset", "cpu", "io", "memory", "pids"})
    assert {c: (h.version, str(h.mountpoint)) for c, h in v2.items()} == {
        c: (2, "/sys/fs/cgroup") for c in ("cpuset", "cpu", "memory", "io")}
    assert find_hierarchies(unified, lambda mountpoint: set()) == {}
    assert find_hierarchies("22 1 0:21 / /proc rw - proc proc rw\n") == {}


def test_cgroup_of_reads_proc_pid_cgroup() -> None:
    text = Path("/proc/self/cgroup").read_text()
    mine = cgroup_of(os.getpid())
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            assert mine[controller] == path


def test_names_must_start_with_perflab() -> None:
    for name in ("server", "perflab/../x", "perflab x", ""):
        with pytest.raises(ValueError, match="must start with 'perflab'"):
            ServerCgroup(name, ResourceSettings())


def test_undo_of_a_cgroup_that_is_gone_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing to kill and nothing to remove: no wait at all (a wait for
    tasks to leave is the undo's only sleep; a clock bound would fail on a
    busy machine)."""
    import perflab.hostctl.cgroups as cgroups

    def no_wait(seconds: float) -> None:
        raise AssertionError(f"undo of a cgroup that is gone waited ({seconds} s)")

    monkeypatch.setattr(cgroups.time, "sleep", no_wait)
    undo_cgroup({"dirs": ["/sys/fs/cgroup/cpuset/perflab-test-never-made", "/nonexistent/perflab-x"]})
    undo_cgroup({})


# -- preflight


def test_preflight_names_the_problem_and_what_is_allowed() -> None:
    found = _require("cpuset", "cpu")
    online = os.sched_getaffinity(0) | {0}
    too_many = max(len(online), os.cpu_count() or 1) + 5
    problems = dict(resource_problems(ResourceSettings.model_validate(
        {"cpus": str(too_many), "cpu_quota": float(too_many), "io_read_bps": {"perflabnodisk": "1MB"}})))
    assert f"got '{too_many}'" in problems["target.resources.cpus"]
    assert "not online; allowed: CPUs of" in problems["target.resources.cpus"]
    assert "online CPUs" in problems["target.resources.cpu_quota"]
    missing = problems["target.resources.io_read_bps.perflabnodisk"]
    assert "not in /sys/block" in missing and all(d in missing for d in os.listdir("/sys/block"))
    # nothing was made
    assert _leftovers() == []
    memory = found.get("memory")
    high = dict(resource_problems(ResourceSettings.model_validate({"memory_high": "1GB"})))
    if memory is not None and memory.version == 1:
        assert "no memory.high" in high["target.resources.memory_high"]
        assert "use memory instead" in high["target.resources.memory_high"]
    elif memory is not None:
        assert "target.resources.memory_high" not in high
    assert resource_problems(ResourceSettings.model_validate({"cpus": "0", "cpu_quota": 0.5})) == []


def test_preflight_as_a_user_who_cannot_write_the_hierarchy() -> None:
    _require("cpuset", "memory")
    settings = ResourceSettings.model_validate({"cpus": "0", "memory": "256MB"})
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody, run the preflight, report it
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(write_end, json.dumps(resource_problems(settings)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        output = f.read()
    os.waitpid(pid, 0)
    problems = dict(map(tuple, json.loads(output)))
    for key in ("target.resources.cpus", "target.resources.memory"):
        assert "(uid 65534) cannot write" in problems[key] and "run perflab as root" in problems[key]


# -- real cgroups


def test_a_process_tree_is_born_inside_with_the_limits_read_back(make_cgroup) -> None:
    found = _require("cpuset", "cpu", "memory")
    group, start = make_cgroup(cpus="0", memory="256MB", cpu_quota=0.5)
    described = group.describe()["controllers"]
    assert {c: d["version"] for c, d in described.items()} == {c: found[c].version for c in ("cpuset", "cpu", "memory")}
    paths = {c: Path(d["path"]) for c, d in described.items()}
    assert all(p.is_dir() and p.name == group.name for p in paths.values())
    # the limits, as the kernel reads them back
    if found["cpuset"].version == 1:
        assert (paths["cpuset"] / "cpuset.cpus").read_text().strip() == "0"
        assert (paths["cpuset"] / "cpuset.mems").read_text().strip() != ""
    else:
        assert (paths["cpuset"] / "cpuset.cpus").read_text().strip() == "0"
    if found["cpu"].version == 1:
        assert (paths["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert (paths["cpu"] / "cpu.cfs_period_us").read_text().strip() == "100000"
    else:
        assert (paths["cpu"] / "cpu.max").read_text().split() == ["50000", "100000"]
    memory_file = "memory.limit_in_bytes" if found["memory"].version == 1 else "memory.max"
    assert int((paths["memory"] / memory_file).read_text()) == 256 * 2**20

    shell = start(["sh", "-c", "sleep 30 & wait"])
    _wait(lambda: _children(shell.pid), 5, "the shell's child")
    (child,) = _children(shell.pid)
    for pid in (shell.pid, child):  # the wrapped process and what it forks
        where = cgroup_of(pid)
        for controller in ("cpuset", "memory", "cpu"):
            assert where[found[controller].kernel_name].endswith(f"/{group.name}"), (pid, controller, where)
        assert os.sched_getaffinity(pid) == {0}
    assert sorted(group.pids()) == sorted([shell.pid, child])

    group.remove()  # moves the tasks out, to the cgroup they would have been in
    assert all(not p.exists() for p in paths.values())
    assert _alive(shell.pid) and _alive(child)
    for controller in ("cpuset", "memory"):
        h = found[controller]
        assert cgroup_of(child)[h.kernel_name] == cgroup_of(os.getpid())[h.kernel_name] or h.version == 2
    assert _leftovers() == []


def test_the_cpu_quota_throttles_a_busy_loop(make_cgroup) -> None:
    _require("cpu")
    group, start = make_cgroup(cpu_quota=0.2)
    began = time.monotonic()
    loop = start([sys.executable, "-c", "while True: pass"])
    # On a busy machine the loop gets less than its quota for a while and is
    # not held back: wait (bounded) until it has been, rather than a fixed 1.5 s.
    deadline = began + 60
    while True:
        time.sleep(0.5)
        stats = group.stats()
        if (stats["cpu_throttled_s"] > 0.5 and stats["cpu_nr_throttled"] >= 5) or time.monotonic() > deadline:
            break
    fields = Path(f"/proc/{loop.pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    elapsed = time.monotonic() - began
    assert stats["cpu_throttled_s"] > 0.5, stats  # held back most of the time
    assert stats["cpu_nr_throttled"] >= 5 and stats["cpu_nr_periods"] >= stats["cpu_nr_throttled"], stats
    assert cpu_s <= 0.2 * elapsed + 0.15, (cpu_s, elapsed)  # 20% of a core, not a whole one


def test_the_memory_limit_holds_a_process_allocating_past_it(make_cgroup) -> None:
    _require("memory")
    limit = 64 * 2**20
    group, start = make_cgroup(memory=limit)
    hog = start([sys.executable, "-c", "b = bytearray(256 * 2**20); b[::4096] = b'x' * len(b[::4096]); print(len(b))"])
    hog.wait(timeout=60)
    stats = group.stats()
    # Past the limit the kernel reclaims into swap if there is some, else the OOM killer ends it.
    assert stats["memory_peak_bytes"] <= limit, stats
    assert stats["memory_failcnt"] > 0, stats
    if hog.returncode != 0:
        assert hog.returncode == -signal.SIGKILL and stats["memory_oom_kills"] >= 1, (hog.returncode, stats)


def test_remove_with_kill_ends_the_whole_tree(make_cgroup) -> None:
    _require("cpuset")
    group, start = make_cgroup(cpus="0")
    shell = start(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    _wait(lambda: len(_children(shell.pid)) == 2, 5, "the shell's children")
    children = _children(shell.pid)
    paths = group.directories()
    group.remove(kill=True)
    shell.wait(timeout=5)
    assert shell.returncode == -signal.SIGKILL
    _wait(lambda: not any(_alive(c) for c in children), 5, "the children to die")
    assert all(not p.exists() for p in paths)
    group.remove()  # idempotent


def test_a_wrapped_command_that_cannot_join_does_not_run(make_cgroup, tmp_path: Path) -> None:
    _require("cpuset")
    group, _ = make_cgroup(cpus="0")
    marker = tmp_path / "ran"
    argv = group.wrap(["touch", str(marker)])
    group.remove()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert proc.returncode != 0 and "cgroup.procs" in proc.stderr
    assert not marker.exists(), "the command ran outside its cgroup"


SERVER_THEN_DIE = textwrap.dedent("""
    import json, os, signal, subprocess, sys, time
    from perflab.guardian import journal
    from perflab.hostctl.cgroups import ResourceSettings, ServerCgroup
    group = ServerCgroup(sys.argv[1], ResourceSettings.model_validate(json.loads(sys.argv[2])))
    group.create()
    sleep = subprocess.Popen(group.wrap(["sh", "-c", "sleep 60 & exec sleep 60"]))
    while len(group.pids()) < 2:
        time.sleep(0.01)
    print(json.dumps({"guardian": journal().guardian_pid(), "pids": group.pids(),
                      "dirs": [str(d) for d in group.directories()]}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_after_a_sigkill_the_guardian_kills_the_tasks_and_removes_the_cgroup() -> None:
    found = _require("cpuset", "memory")
    fields: dict[str, object] = {"cpus": "0", "memory": "128MB"}
    if "cpu" in found:
        fields["cpu_quota"] = 0.5
    name = f"perflab-test-{uuid.uuid4().hex[:8]}"
    proc = subprocess.run([sys.executable, "-c", SERVER_THEN_DIE, name, json.dumps(fields)], capture_output=True,
                          text=True, timeout=30, env=PYTHON_ENV)
    report = json.loads(proc.stdout) if proc.stdout else {}
    try:
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        killed_at = time.monotonic()
        dirs, pids = [Path(d) for d in report["dirs"]], report["pids"]
        used = ["cpuset", "memory"] + (["cpu"] if "cpu_quota" in fields else [])
        assert set(dirs) == {parent_dir(found[c]) / name for c in used}
        while time.monotonic() - killed_at < GONE_WITHIN_S and (
                any(map(_alive, pids)) or any(d.exists() for d in dirs) or _alive(report["guardian"])):
            time.sleep(0.05)
        assert not any(map(_alive, pids)), "a task in the cgroup outlived perflab"
        assert not any(d.exists() for d in dirs), "the cgroup outlived perflab"
        assert not _alive(report["guardian"]), "the guardian outlived its work"
    finally:  # only if the test failed
        undo_cgroup({"dirs": report.get("dirs", [])})
        assert _leftovers() == []
