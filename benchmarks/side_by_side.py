"""Two experiments and the host tests side by side on one machine, one
experiment SIGKILLed: does anything reach past what it made?

    sudo .venv/bin/python benchmarks/side_by_side.py [--runs-b 40] [--duration 3s]
        [--pytest tests/test_host_runs.py] [--keep]

Needs root (cgroups). Experiments A and B are each a managed PostgreSQL in a
cgroup of its own ([target.resources]: one CPU each, 512MB) with a small
tpcb workload (scale 1, 2 clients, --duration per run); A plans far more
runs than it will get to do. Once both servers are up, `pytest` runs the
host tests (tests/test_host_runs.py: [host] knobs, cgroups, scratch
filesystems, SIGKILLs of their own perflabs) beside them. When they end,
A's perflab is SIGKILLed; its guardian is to remove A's server and cgroup,
and nothing of B's. B is to finish every run.

Every 0.2 s a watcher reads each experiment's postmaster (pid and start time,
from the cluster's postmaster.pid) and its cgroup directories: B's server
must be the same process from its start to its end, and B's cgroup there
until B ends. Prints a TIMELINE (seconds since start) and a verdict; exits 1
when anything of B's was touched, A's objects outlived the kill by more than
10 s, or B did not finish every run. The host tests' own result is printed,
not judged here (they may fail for reasons of their own).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from _common import run_main  # noqa: E402
from perflab.guardian import start_time  # noqa: E402
from perflab.hostctl.cgroups import find_hierarchies, parent_dir  # noqa: E402
from perflab.store import Store  # noqa: E402
from perflab.targets.postgres import server_cgroup_name  # noqa: E402
from perflab.targets.postgres.postmaster import live_postmaster  # noqa: E402

GONE_WITHIN_S = 10.0

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


class Timeline:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.lines: list[tuple[float, str]] = []
        self.lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str, at: float | None = None) -> None:
        at = self.now() if at is None else at
        with self.lock:
            self.lines.append((at, text))
        print(f"{at:7.1f} s  {text}", flush=True)


class Experiment:
    def __init__(self, base: Path, name: str, runs: int, duration: str, cpus: str) -> None:
        self.name = name.upper()
        self.dir = base / name
        self.dir.mkdir()
        self.file = self.dir / "e.toml"
        self.file.write_text(textwrap.dedent(EXPERIMENT.format(name=name, runs=runs, duration=duration, cpus=cpus)))
        self.out = self.dir / "out"
        self.runs = runs
        self.log = self.dir / "perflab.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("wb") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "perflab.cli", "run", str(self.file), "--out", str(self.out), "--quiet",
                 "--no-report"], stdout=f, stderr=subprocess.STDOUT, cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT / "python")})

    def data_dir(self) -> Path | None:
        for record in self.out.glob("targets/*/perflab-target.json"):
            try:
                return Path(json.loads(record.read_text())["data_dir"])
            except (OSError, ValueError, KeyError):
                return None
        return None

    def postmaster(self) -> tuple[int, str] | None:
        """(pid, start time) of the live postmaster of its cluster, or None."""
        data_dir = self.data_dir()
        if data_dir is None:
            return None
        pid = live_postmaster(data_dir)
        start = None if pid is None else start_time(pid)
        return None if pid is None or start is None else (pid, start)

    def cgroup_dirs(self) -> list[Path]:
        """Its server's cgroup directories that exist now (one per hierarchy its limits use)."""
        data_dir = self.data_dir()
        if data_dir is None:
            return []
        name = server_cgroup_name(data_dir)
        return sorted(d for d in {parent_dir(h) / name for h in find_hierarchies().values()} if d.is_dir())


class Watcher(threading.Thread):
    """Samples an experiment's postmaster and cgroup every 0.2 s: every
    distinct postmaster seen, and when the cgroup was first and last seen."""

    def __init__(self, e: Experiment) -> None:
        super().__init__(daemon=True)
        self.e = e
        self.postmasters: list[tuple[float, tuple[int, str]]] = []
        self.cgroups: set[Path] = set()
        self.cgroup_seen: tuple[float, float] | None = None
        self.cgroup_gaps: list[float] = []  # when it was missing between two sightings
        self.stop = threading.Event()
        self.clock = time.monotonic

    def run(self) -> None:
        while not self.stop.wait(0.2):
            now = self.clock()
            pm = self.e.postmaster()
            if pm is not None and (not self.postmasters or self.postmasters[-1][1] != pm):
                self.postmasters.append((now, pm))
            dirs = self.e.cgroup_dirs()
            if dirs:
                self.cgroups.update(dirs)
                first = self.cgroup_seen[0] if self.cgroup_seen else now
                self.cgroup_seen = (first, now)
            elif self.cgroup_seen is not None:
                self.cgroup_gaps.append(now)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs-b", type=int, default=40, help="B's runs (it must outlast the host tests)")
    parser.add_argument("--duration", default="3s", help="each run's length")
    parser.add_argument("--pytest", default="tests/test_host_runs.py", help="the tests to run beside them")
    parser.add_argument("--keep", action="store_true", help="keep the experiments' directories")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (cgroups)", file=sys.stderr)
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    base = Path(tempfile.mkdtemp(prefix="perflab-bench-side-", dir="/tmp"))
    base.chmod(0o755)
    t = Timeline()
    a = Experiment(base, "a", runs=1000, duration=args.duration, cpus=str(cpus[0]))
    b = Experiment(base, "b", runs=args.runs_b, duration=args.duration, cpus=str(cpus[-1]))
    watchers = {e.name: Watcher(e) for e in (a, b)}
    tests: subprocess.Popen[str] | None = None
    failures: list[str] = []
    try:
        for w in watchers.values():
            w.clock = t.now
            w.start()
        a.start()
        t.say(f"A started (perflab pid {a.proc.pid if a.proc else '?'}; {base / 'a'})")
        b.start()
        t.say(f"B started (perflab pid {b.proc.pid if b.proc else '?'}; {base / 'b'}; {b.runs} runs)")
        up: set[str] = set()
        deadline = time.monotonic() + 180
        while len(up) < 2:
            for e in (a, b):
                if e.name not in up and watchers[e.name].postmasters and watchers[e.name].cgroup_seen:
                    up.add(e.name)
                    pid = watchers[e.name].postmasters[0][1][0]
                    t.say(f"{e.name}'s server up: postmaster {pid} in cgroup {e.cgroup_dirs()[0].name}")
                assert e.proc is not None
                if e.proc.poll() is not None:
                    raise RuntimeError(f"{e.name} exited {e.proc.returncode} first:\n{e.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("the servers did not come up within 180 s")
            time.sleep(0.1)

        t.say(f"host tests started: pytest {args.pytest}")
        tests = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", args.pytest],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        output, _ = tests.communicate(timeout=1800)
        summary = [line for line in output.splitlines() if re.search(r"\b(passed|failed|error)", line)]
        t.say(f"host tests ended: exit {tests.returncode}, {summary[-1].strip('= ') if summary else 'no summary'}")
        if tests.returncode != 0:
            print(output[-4000:], flush=True)

        assert a.proc is not None and b.proc is not None
        if b.proc.poll() is not None:
            raise RuntimeError(f"B ended before the kill (exit {b.proc.returncode}): give --runs-b more runs")
        a_dirs = a.cgroup_dirs()
        a_done = sum(r["status"] == "done" for r in _runs(a.out))
        a.proc.send_signal(signal.SIGKILL)
        killed = t.now()
        t.say(f"A killed (SIGKILL of perflab pid {a.proc.pid}; {a_done} run(s) done)")
        a.proc.wait(timeout=30)
        server_gone = cgroup_gone = None
        while (server_gone is None or cgroup_gone is None) and t.now() - killed < 30:
            if server_gone is None and a.postmaster() is None:
                server_gone = t.now()
                t.say(f"A's server gone ({server_gone - killed:.2f} s after the kill)")
            if cgroup_gone is None and not any(d.exists() for d in a_dirs):
                cgroup_gone = t.now()
                t.say(f"A's cgroup gone ({cgroup_gone - killed:.2f} s after the kill: "
                      f"{', '.join(str(d) for d in a_dirs)})")
            time.sleep(0.05)
        for what, when in (("server", server_gone), ("cgroup", cgroup_gone)):
            if when is None or when - killed > GONE_WITHIN_S:
                failures.append(f"A's {what} outlived the kill by more than {GONE_WITHIN_S:g} s")

        b.proc.wait(timeout=1800)
        ended = t.now()
        runs = _runs(b.out)
        done = sum(r["status"] == "done" for r in runs)
        t.say(f"B finished: exit {b.proc.returncode}, {done}/{b.runs} runs done")
        time.sleep(0.5)
        for w in watchers.values():
            w.stop.set()
            w.join()
        wa, wb = watchers["A"], watchers["B"]
        before_kill = [(at, pm) for at, pm in wa.postmasters if at < killed]
        if len(before_kill) != 1:
            failures.append("A's server changed before the kill: "
                            + ", ".join(f"pid {pm[0]} at {at:.1f} s" for at, pm in before_kill))
        if not a_dirs:
            failures.append("A's cgroup was gone before the kill")
        if len(wb.postmasters) != 1:
            failures.append("B's server changed: " + ", ".join(f"pid {pm[0]} at {at:.1f} s" for at, pm in wb.postmasters))
        else:
            at, (pid, _) = wb.postmasters[0]
            t.say(f"B's postmaster: one process throughout, pid {pid} (first seen at {at:.1f} s)", at=ended)
        early_gaps = [g for g in wb.cgroup_gaps if wb.cgroup_seen and g < wb.cgroup_seen[1]]
        if early_gaps or wb.cgroup_seen is None or wb.cgroup_seen[1] < killed:
            failures.append(f"B's cgroup went missing while B ran (at {', '.join(f'{g:.1f}' for g in early_gaps)} s)")
        if b.proc.returncode != 0 or done != b.runs:
            failures.append(f"B: exit {b.proc.returncode}, {done}/{b.runs} runs done:\n{b.log.read_text()[-3000:]}")
        deadline = time.monotonic() + 5  # a finished perflab has stopped its server: let it be reaped
        while True:
            left = [str(d) for d in wb.cgroups if d.exists()]
            left += [f"postmaster {pm[0]}" for _, pm in wb.postmasters if _alive(*pm)]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if left:
            failures.append(f"B left {', '.join(left)} behind")
        if not wb.cgroups:
            failures.append("B's cgroup was never seen")
    finally:
        for w in watchers.values():
            w.stop.set()
        if tests is not None and tests.poll() is None:
            tests.kill()
        for e in (a, b):
            if e.proc is not None and e.proc.poll() is None:
                e.proc.send_signal(signal.SIGINT)
                try:
                    e.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    e.proc.kill()  # its guardian stops its server
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print("\nTIMELINE (seconds since start)")
    for at, text in sorted(t.lines, key=lambda line: line[0]):
        print(f"  {at:7.1f}  {text}")
    print("\n" + ("FAILED:\n  " + "\n  ".join(failures) if failures else
                  "ok: A's objects removed by its guardian, B's untouched and every B run done"))
    return 1 if failures else 0


def _alive(pid: int, start: str) -> bool:
    """The same process (pid and start time), and not a zombie (a stopped
    postmaster waits to be reaped by whoever adopted it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return start_time(pid) == start and state not in ("Z", "X")


def _runs(out: Path) -> list[dict[str, object]]:
    try:
        store = Store.open(out)
    except Exception:
        return []
    try:
        return store.runs()
    finally:
        store.close()


if __name__ == "__main__":
    run_main(main)
