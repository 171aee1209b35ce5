"""Two experiments side by side on one machine, each a managed PostgreSQL in a
cgroup of its own ([target.resources]) with a small tpcb workload. While both
run, perflab's own sweeps (a `perflab check`, which recovers what dead
perflabs left, and the sweep of orphaned cluster homes) and the test suite's
cleanup logic run beside them and touch neither. Then one experiment's
perflab is SIGKILLed mid-run: its guardian removes its server and its cgroup,
and only those; the other finishes every run with its server never restarted.

benchmarks/side_by_side.py is the long version (with tests/test_host_runs.py
beside the two experiments, and a timeline)."""

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

import pytest

from conftest import cli_command, postmasters_under, remove_test_cluster_homes
from perflab.guardian import journal, recover_orphans, start_time
from perflab.hostctl.cgroups import cgroup_of, find_hierarchies, resource_problems
from perflab.store import Store
from perflab.targets.postgres import server_cgroup_name, sweep_orphan_homes
from perflab.targets.postgres.postmaster import postmaster_pid

# serial: measures the machine (timings, rates, other CPU) or changes it for everyone; runs after the parallel tests, alone
pytestmark = [pytest.mark.serial, pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")]

# The guardian's undo after a SIGKILL, waited for: its promise (within 5 s)
# is a quiet machine's figure, measured by benchmarks/host_changes.py.
GONE_WITHIN_S = 60.0

EXPERIMENT = """
    [experiment]
    name = "side-{name}"
    repetitions = {runs}
    [target]
    kind = "postgres"
    [target.settings]
    shared_buffers = "32MB"
    [target.resources]
    cpus = "{cpus}"
    memory = "512MB"
    [workload]
    kind = "tpcb"
    scale = 1
    clients = 2
    duration = "{duration}"
    [collect]
"""


class Experiment:
    """One `perflab run` in the background, and what it made, found from its
    own output directory only."""

    def __init__(self, workdir: Path, name: str, runs: int, duration: str, cpus: str) -> None:
        self.dir = workdir / name
        self.dir.mkdir()
        self.file = self.dir / "e.toml"
        self.file.write_text(textwrap.dedent(EXPERIMENT.format(name=name, runs=runs, duration=duration,
                                                                cpus=cpus)))
        self.out = self.dir / "out"
        self.runs = runs
        self.log = self.dir / "perflab.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("wb") as f:
            self.proc = subprocess.Popen(cli_command("run", self.file, "--out", self.out, "--quiet", "--no-report"),
                                         stdout=f, stderr=subprocess.STDOUT)

    def record(self) -> dict[str, object] | None:
        for path in self.out.glob("targets/*/perflab-target.json"):
            try:
                return dict(json.loads(path.read_text()))
            except (OSError, ValueError):
                return None
        return None

    def postmaster(self) -> tuple[int, str | None] | None:
        """The server's postmaster, read from its cluster (postmaster.pid), with its start time."""
        record = self.record()
        if record is None:
            return None
        pid = postmaster_pid(Path(str(record["data_dir"])))
        return None if pid is None else (pid, start_time(pid))

    def cgroups(self) -> list[Path]:
        """Its server's cgroup directories that exist now (one per hierarchy)."""
        record = self.record()
        if record is None:
            return []
        name = server_cgroup_name(Path(str(record["data_dir"])))
        return [parent / name for parent in _cgroup_parents() if (parent / name).is_dir()]

    def ready(self) -> bool:
        pm = self.postmaster()
        return pm is not None and pm[1] is not None and bool(self.cgroups())

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def _cgroup_parents() -> list[Path]:
    """Where perflab makes its cgroups, in each hierarchy (see hostctl.cgroups.parent_dir)."""
    from perflab.hostctl.cgroups import parent_dir

    return sorted({parent_dir(h) for h in find_hierarchies().values()})


def _wait(what: str, condition, timeout_s: float, *running: Experiment) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        for e in running:
            assert e.proc is not None and e.proc.poll() is None, f"{e.dir.name} exited first:\n{e.text()}"
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.1)


def test_two_experiments_side_by_side_and_one_killed(workdir: Path) -> None:
    from perflab.hostctl.cgroups import ResourceSettings

    problems = resource_problems(ResourceSettings(cpus="0", memory=512 * 2**20))
    if problems:
        pytest.skip(f"cgroups: {problems}")
    cpus = sorted(os.sched_getaffinity(0))
    a = Experiment(workdir, "a", runs=20, duration="3s", cpus=str(cpus[0]))
    b = Experiment(workdir, "b", runs=4, duration="3s", cpus=str(cpus[-1]))
    try:
        a.start()
        b.start()
        _wait("both servers up, each in its cgroup", lambda: a.ready() and b.ready(), 90, a, b)
        a_pm, b_pm = a.postmaster(), b.postmaster()
        a_groups, b_groups = a.cgroups(), b.cgroups()
        assert a_pm and b_pm and a_groups and b_groups
        assert not set(a_groups) & set(b_groups)
        for pid, groups in ((a_pm[0], a_groups), (b_pm[0], b_groups)):
            assert {g.name for g in groups} == {Path(p).name for p in cgroup_of(pid).values()
                                                if Path(p).name.startswith("perflab-pg-")}

        # perflab's own sweeps, a perflab start, and the test suite's cleanup
        # (of another test's directory) beside them: nothing of theirs is touched.
        from test_host_runs import HostAsFound, _snapshot, put_back

        sweep_orphan_homes()
        recover_orphans()
        remove_test_cluster_homes(workdir)
        other_test = workdir / "other-test"
        other_test.mkdir()
        put_back(HostAsFound(_snapshot()), other_test)
        check = workdir / "check.toml"
        check.write_text('[experiment]\nname = "c"\n[target]\nkind = "duckdb"\n[workload]\nkind = "sql"\n'
                         'statements = ["SELECT 1"]\n')
        proc = subprocess.run(cli_command("check", check), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "left by a killed perflab" not in proc.stderr, proc.stderr
        assert (a.postmaster(), b.postmaster()) == (a_pm, b_pm)
        assert a.cgroups() == a_groups and b.cgroups() == b_groups

        # SIGKILL A's perflab mid-run: its guardian removes its server and cgroup, and nothing of B's.
        assert a.proc is not None and b.proc is not None
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=30)
        _wait("A's server and cgroup gone", lambda: not postmasters_under(a.out)
              and not any(g.exists() for g in a_groups), GONE_WITHIN_S)
        assert b.proc.poll() is None, f"B ended with A:\n{b.text()}"
        assert b.postmaster() == b_pm, "B's server was restarted or stopped"
        assert all(g.exists() for g in b_groups), "B's cgroup was removed"
        assert b_pm[0] in {int(p) for g in b_groups for p in (g / "cgroup.procs").read_text().split()}

        # B finishes, every run done, its server the same throughout.
        b.proc.wait(timeout=120)
        assert b.proc.returncode == 0, b.text()
        runs = Store.open(b.out).runs()
        assert [r["status"] for r in runs] == ["done"] * b.runs, runs
        assert postmasters_under(b.out) == [] and not any(g.exists() for g in b_groups)
    finally:
        for e in (a, b):
            if e.proc is not None and e.proc.poll() is None:
                e.proc.kill()
                e.proc.wait()


def test_a_cgroup_name_taken_meanwhile_is_left_to_its_owner(workdir: Path) -> None:
    """Another perflab makes a cgroup of the same name between the look and the
    mkdir (the race, played here by a subclass): create fails, and the other's
    cgroup and the process in it are untouched."""
    from perflab.hostctl.cgroups import CgroupError, ResourceSettings, ServerCgroup

    settings = ResourceSettings(cpus=str(min(os.sched_getaffinity(0))))
    if resource_problems(settings):
        pytest.skip(f"cgroups: {resource_problems(settings)}")
    name = f"perflab-test-taken-{os.getpid()}"
    others: list[Path] = []
    sleeper = subprocess.Popen(["sleep", "60"])

    class Raced(ServerCgroup):
        def _make(self) -> None:
            first = self.directories()[0]
            first.mkdir()  # the other perflab's, with its server inside
            others.append(first)
            for file in ("cpuset.cpus", "cpuset.mems"):
                (first / file).write_text((first.parent / file).read_text())
            (first / "cgroup.procs").write_text(str(sleeper.pid))
            super()._make()

    try:
        with pytest.raises((FileExistsError, CgroupError)):
            Raced(name, settings).create()
        assert others and others[0].is_dir()
        assert sleeper.poll() is None, "the other's process was killed"
        assert str(sleeper.pid) in (others[0] / "cgroup.procs").read_text().split()
    finally:
        sleeper.kill()
        sleeper.wait()
        for d in others:
            deadline = time.monotonic() + 5
            while d.exists() and time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    d.rmdir()
                time.sleep(0.05)


def test_a_namespace_name_taken_is_an_error_and_left_alone() -> None:
    from perflab.hostctl import netns

    if netns.problems(("ip",)):
        pytest.skip("; ".join(netns.problems(("ip",))))
    name = f"perflab-test-taken-{os.getpid() % 10000}"
    subprocess.run(["ip", "netns", "add", name], check=True)  # someone else's
    try:
        with pytest.raises(netns.NameTaken):
            netns.create_netns(name)
        netns.delete_netns(name)  # not made by this process: nothing is done
        assert (netns.NETNS_DIR / name).exists()
        dev = f"perflabT{os.getpid() % 10000}"
        subprocess.run(["ip", "link", "add", dev, "type", "veth", "peer", "name", dev + "q"], check=True)
        try:
            with pytest.raises(netns.NameTaken):
                netns.create_veth(dev, None, dev + "p", name, netns.free_subnets(1)[0])
            netns.delete_link(dev)
            assert Path("/sys/class/net", dev).exists()
        finally:
            subprocess.run(["ip", "link", "del", dev], check=False)
        assert not [e for e in journal().entries() if name in e["key"] or dev in e["key"]]
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


APPLY_AND_HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from perflab.hostctl.knobs import HostState
    state = HostState()
    state.apply("host.sysctl.vm.dirty_background_ratio", [(Path("/proc/sys/vm/dirty_background_ratio"), sys.argv[1])])
    print("set", flush=True)
    time.sleep(60)
""")


def test_a_host_knob_another_live_perflab_holds_is_refused(workdir: Path) -> None:
    """Another perflab (a child here, with its own journal and guardian) holds
    vm.dirty_background_ratio: setting it here is refused, naming that
    perflab, and its value stays; once it ends, its guardian puts the
    original back and the knob is free again."""
    from perflab.errors import UserError
    from perflab.hostctl.knobs import HostState, read_value, sysctl_path

    ratio = sysctl_path("vm.dirty_background_ratio")
    original = read_value(ratio)
    theirs, ours = [v for v in ("5", "6", "7") if v != original][:2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1] / "python"), os.environ.get("PYTHONPATH", "")])}
    other = subprocess.Popen([sys.executable, "-c", APPLY_AND_HOLD, theirs], stdout=subprocess.PIPE, text=True,
                             env=env)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "set"
        state = HostState()
        with pytest.raises(UserError) as refused:
            state.apply("host.sysctl.vm.dirty_background_ratio", [(ratio, ours)])
        assert f"pid {other.pid}" in refused.value.message and "one at a time" in (refused.value.hint or "")
        assert read_value(ratio) == theirs
        other.kill()
        other.wait()
        deadline = time.monotonic() + GONE_WITHIN_S
        while read_value(ratio) != original and time.monotonic() < deadline:
            time.sleep(0.05)
        assert read_value(ratio) == original  # its guardian put it back
        with state:
            state.apply("host.sysctl.vm.dirty_background_ratio", [(ratio, ours)])
            assert read_value(ratio) == ours
        assert read_value(ratio) == original
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
        if other.stdout is not None:
            other.stdout.close()
