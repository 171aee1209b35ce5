"""Host noise: the CPU that neither perflab nor the target used while a
run's workload ran, measured in every run (not a collector one can leave out:
the runner calls it around `Workload.run`).

How. Two readings, one right before the workload's run and one right after
it, of every process in /proc (utime, stime, cutime, cstime, start time,
parent, flags) and of /proc/stat. Each process is put in one class, the one
it had when first seen: `perflab` (perflab's own process and everything it
started: its guardian, tracers, perf, Ray's processes), `target` (the
target's processes, `Target.processes()`, and their descendants), `kernel`
(kernel threads: flag PF_KTHREAD; they do much of the workload's own I/O and
network work, so they are not counted as noise) and `other` (everything
else). A class's CPU over the window is the sum, over its processes, of
utime + stime + cutime + cstime at the end less the same at the start, a
process counted from zero when born inside the window and from its last
reading when gone: a process that exited is not lost, its whole time having
moved into its parent's cutime and cstime when the parent reaped it (proc(5)).
Interrupt time (irq, softirq in /proc/stat) is in no class. Steal time
(/proc/stat) is the time a hypervisor gave the machine's CPUs to someone else.

What is stored (metrics `host.*`): `window_s`, `other_cpu_s`, `steal_s`,
`noise_cores` = (other + steal) / window, `perflab_cpu_s`, `target_cpu_s`,
`kernel_cpu_s`, `idle_pct` (idle + iowait over all CPUs' time) and
`shared_idle_pct` (the same over the CPUs both perflab and the target's
processes may run on, their affinity masks).

Flags. `noisy-host` when noise_cores is above NOISY_HOST_CORES, 0.05: 5% of
one core. Why that figure: an idle Linux host's own daemons use well under 1%
of a core, so more than 5% is something else running; and 5% is the smallest
change perflab's reports are meant to resolve: a process holding 5% of a
core the server or the driver needs can move a CPU-bound figure by as much.
`cpu-saturated` when shared_idle_pct is below SATURATED_IDLE_PCT, 5%: the
driver and the server competed for CPUs that had no time to spare, so the
figures measure the machine's limit as much as the server's. An external
server (one perflab does not manage) may run on this machine as an "other"
process: its runs are measured but never flagged noisy-host, and an event
says why.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

from perflab.collectors.procfs import CLOCK_TICKS_PER_S, CPU_FIELDS, read_bytes
from perflab.model import Event, Flag, RunResult
from perflab.proc import CSTIME, CUTIME, FLAGS, PPID, STARTTIME, STIME, UTIME, split_stat, stat_comm

NOISY_HOST_CORES = 0.05
SATURATED_IDLE_PCT = 5.0
PF_KTHREAD = 0x00200000
TOP_OTHERS = 5


@dataclass
class Proc:
    pid: int
    ppid: int
    comm: str
    kthread: bool
    ticks: int  # utime + stime + cutime + cstime


def read_processes() -> dict[tuple[int, int], Proc]:
    """Every process in /proc, keyed by (pid, start time): a reused pid is
    another process."""
    out: dict[tuple[int, int], Proc] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = read_bytes(f"/proc/{entry}/stat")
        except OSError:
            continue
        try:
            comm, f = stat_comm(stat), split_stat(stat)
            ticks = int(f[UTIME]) + int(f[STIME]) + max(0, int(f[CUTIME])) + max(0, int(f[CSTIME]))
            kthread = bool(int(f[FLAGS]) & PF_KTHREAD)
            out[(int(entry), int(f[STARTTIME]))] = Proc(int(entry), int(f[PPID]), comm, kthread, ticks)
        except (IndexError, ValueError):
            continue
    return out


def descendants(procs: dict[tuple[int, int], Proc], roots: Iterable[int]) -> set[tuple[int, int]]:
    """The keys of `roots` and of every process below them."""
    children: dict[int, list[tuple[int, int]]] = {}
    by_pid: dict[int, tuple[int, int]] = {}
    for key, p in procs.items():
        children.setdefault(p.ppid, []).append(key)
        by_pid[p.pid] = key
    out: set[tuple[int, int]] = set()
    todo = [by_pid[r] for r in roots if r in by_pid]
    while todo:
        key = todo.pop()
        if key in out:
            continue
        out.add(key)
        todo += children.get(procs[key].pid, [])
    return out


def read_cpu_lines() -> dict[str, list[int]]:
    """/proc/stat's cpu lines: "cpu" (all) and "cpuN", in ticks, proc(5) order."""
    out: dict[str, list[int]] = {}
    for line in read_bytes("/proc/stat").decode().splitlines():
        if line.startswith("cpu"):
            name, *values = line.split()
            out[name] = [int(v) for v in values[:len(CPU_FIELDS)]]
    return out


def idle_share(before: dict[str, list[int]], after: dict[str, list[int]], cpus: Iterable[str]) -> float | None:
    """(idle + iowait) / all time (guest excluded: it is inside user) over
    the named cpu lines; None when no time passed."""
    idle = total = 0
    for name in cpus:
        if name not in before or name not in after:
            continue
        d = [a - b for a, b in zip(after[name], before[name], strict=False)]
        idle += max(0, d[3]) + max(0, d[4])
        total += sum(max(0, v) for v in d[:8])
    return idle / total if total > 0 else None


class HostNoise:
    """One run's window: `begin()` right before the workload runs, `end()`
    right after; `end` returns the metrics, events and flags."""

    def __init__(self, target_pids: Iterable[int], external: bool = False) -> None:
        self.external = external
        self._target_roots = set(target_pids)
        self._t0_ns = 0
        self._procs: dict[tuple[int, int], Proc] = {}
        self._class: dict[tuple[int, int], str] = {}
        self._cpu: dict[str, list[int]] = {}

    def _classify(self, procs: dict[tuple[int, int], Proc], target_roots: set[int]) -> None:
        # the target's tree first: a server perflab started is its child (and
        # an embedded target, perflab itself, is perflab's)
        target = descendants(procs, target_roots - {os.getpid()})
        ours = descendants(procs, [os.getpid()]) - target
        for key, p in procs.items():
            if key in self._class:
                continue  # a process keeps the class it had when first seen
            self._class[key] = ("perflab" if key in ours else "target" if key in target
                                else "kernel" if p.kthread or p.pid == 2 else "other")

    def begin(self) -> None:
        self._procs = read_processes()
        self._class = {}
        self._classify(self._procs, self._target_roots)
        self._cpu = read_cpu_lines()
        self._t0_ns = time.monotonic_ns()

    def end(self, target_pids: Iterable[int] = (), server_cpus: set[int] | None = None) -> RunResult:
        """The window's figures. `target_pids`: the target's processes now
        (a restart inside the run); `server_cpus`: where they may run (None:
        read from their affinity)."""
        t1_ns = time.monotonic_ns()
        cpu = read_cpu_lines()
        procs = read_processes()
        roots = self._target_roots | set(target_pids)
        self._classify(procs, roots)
        window_s = (t1_ns - self._t0_ns) / 1e9
        used: dict[str, int] = {"perflab": 0, "target": 0, "kernel": 0, "other": 0}
        per_other: dict[tuple[int, int], int] = {}
        gone: list[tuple[int, int]] = []
        for key in set(self._procs) | set(procs):
            before = self._procs[key].ticks if key in self._procs else 0
            # gone (reaped): its whole time, before the window too, moved into
            # its reaper's cutime and cstime, which the reaper's growth counts
            after = procs[key].ticks if key in procs else 0
            cls = self._class[key]
            used[cls] += after - before
            if cls == "other":
                per_other[key] = after - before
                if key not in procs:
                    gone.append(key)
        # who used it, for the event: a gone process's share nets against
        # its nearest ancestor still alive (whose cutime grew by its whole life)
        alive_by_pid = {k[0]: k for k in procs}
        begin_by_pid = {k[0]: k for k in self._procs}
        for key in gone:
            ppid = self._procs[key].ppid
            for _ in range(64):
                up = alive_by_pid.get(ppid)
                if up is not None and up in self._procs:
                    per_other[up] = per_other.get(up, 0) + per_other.pop(key)
                    break
                older = begin_by_pid.get(ppid)
                if older is None:
                    break
                ppid = self._procs[older].ppid
        tick = 1.0 / CLOCK_TICKS_PER_S
        seconds = {cls: max(0, ticks) * tick for cls, ticks in used.items()}
        steal_s = max(0, cpu["cpu"][7] - self._cpu["cpu"][7]) * tick if "cpu" in cpu else 0.0
        result = RunResult()
        if window_s <= 0:
            return result
        noise_cores = (seconds["other"] + steal_s) / window_s
        all_cpus = [name for name in cpu if name != "cpu"]
        idle_all = idle_share(self._cpu, cpu, all_cpus)
        driver = os.sched_getaffinity(0)
        server = server_cpus if server_cpus is not None else _affinity_of(roots - {os.getpid()})
        shared = driver & server if server else driver
        idle_shared = idle_share(self._cpu, cpu, [f"cpu{c}" for c in sorted(shared)])
        add = result.add_metric
        add("host.window_s", window_s, "s", "the workload's run, over which host.* are measured")
        add("host.other_cpu_s", seconds["other"], "s", "CPU time of processes neither perflab's nor the target's "
            "(kernel threads and interrupts excluded)", higher_is_better=False)
        add("host.steal_s", steal_s, "s", "CPU time the hypervisor gave to others (/proc/stat steal, all CPUs)",
            higher_is_better=False)
        add("host.noise_cores", noise_cores, "cores", "(other CPU + steal) / the window: host noise in cores; "
            f"above {NOISY_HOST_CORES} the run is flagged noisy-host", higher_is_better=False)
        add("host.perflab_cpu_s", seconds["perflab"], "s", "CPU time of perflab and what it started "
            "(guardian, tracers, perf)", higher_is_better=False)
        add("host.target_cpu_s", seconds["target"], "s", "CPU time of the target's processes")
        add("host.kernel_cpu_s", seconds["kernel"], "s", "CPU time of kernel threads (writeback, journal, softirq "
            "threads: much of it the workload's own)")
        if idle_all is not None:
            add("host.idle_pct", 100 * idle_all, "%", "idle + iowait over all CPUs' time in the window")
        if idle_shared is not None:
            add("host.shared_idle_pct", 100 * idle_shared, "%",
                "idle + iowait on the CPUs perflab and the target's processes may both run on "
                f"({_cpu_list(shared)}); below {SATURATED_IDLE_PCT:g}% the run is flagged cpu-saturated")
        top = sorted(((k, t) for k, t in per_other.items() if k in procs and t > 0), key=lambda kv: -kv[1])[:TOP_OTHERS]
        top_text = ", ".join(f"{procs[k].comm} (pid {k[0]}) {t * tick / window_s:.2f}" for k, t in top) or "none"
        figure = (f"other processes {seconds['other'] / window_s:.3f} cores + steal {steal_s / window_s:.3f} = "
                  f"{noise_cores:.3f} cores over {window_s:.1f} s (threshold {NOISY_HOST_CORES}); "
                  f"the busiest others, in cores: {top_text}")
        if noise_cores > NOISY_HOST_CORES:
            if self.external:
                result.events.append(Event(0.0, "host-noise", f"not judged: the server is not perflab's, and "
                                           f"on this machine its CPU cannot be told from other processes': {figure}"))
            else:
                result.flags.append(Flag.NOISY_HOST)
                result.events.append(Event(0.0, "host-noise", f"noisy-host: {figure}"))
        else:
            result.events.append(Event(0.0, "host-noise", f"quiet host: {figure}"))
        if idle_shared is not None and 100 * idle_shared < SATURATED_IDLE_PCT:
            result.flags.append(Flag.CPU_SATURATED)
            result.events.append(Event(0.0, "host-noise", f"cpu-saturated: CPUs {_cpu_list(shared)}, shared by "
                                       f"perflab and the target, were {100 * idle_shared:.1f}% idle "
                                       f"(threshold {SATURATED_IDLE_PCT:g}%)"))
        return result


def _affinity_of(pids: Iterable[int]) -> set[int]:
    out: set[int] = set()
    for pid in pids:
        try:
            out |= os.sched_getaffinity(pid)
        except OSError:
            continue
    return out


def _cpu_list(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
