"""The runner's side of [host] and driver.cpus: what each run needs of the
machine, applied before it and restored at the end of the experiment.

Each run's [host] settings are complete: a knob an earlier run set and this
run does not name is put back to its original value. A knob that takes effect
only when the server starts (huge pages, transparent huge pages) restarts the
server when its value changes. `hugepages = "auto"` is sized at every server
start, from the shared memory of the settings about to start
(`Target.shared_memory_huge_pages`), so a factor on shared_buffers resizes it.
Every change is an event of the run (old -> new) and is journaled by
`HostState` before it is made (the guardian undoes it after a SIGKILL).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from perflab import proc
from perflab.errors import RunFailure, UserError
from perflab.hostctl import knobs
from perflab.hostctl.cgroups import parse_cpu_list
from perflab.hostctl.knobs import HostSettings, HostState
from perflab.model import Event, RunResult
from perflab.targets.base import Target

AUTO_HUGEPAGES_KEY = "host.hugepages"


class HostChanges:
    def __init__(self, say: Callable[[str], None], warn: Callable[[str], None]) -> None:
        self.say = say
        self.warn = warn
        self.state = HostState()
        # knob key -> what was written (files and values): unchanged knobs are not rewritten
        self.applied: dict[str, Any] = {}
        self.auto_hugepages = False
        self.events: list[Event] = []  # drained into the run's result
        self.affinity: set[int] | None = None  # perflab's own CPUs before driver.cpus

    # ------------------------------------------------------------ before a run

    def needs_restart(self, host: HostSettings) -> bool:
        """Would this run's settings change a knob the running server took at its start?"""
        wanted = self._wanted(host)
        for key in knobs.NEEDS_SERVER_RESTART:
            if key == AUTO_HUGEPAGES_KEY and (host.hugepages == "auto") != self.auto_hugepages:
                return True
            if key == AUTO_HUGEPAGES_KEY and host.hugepages == "auto":
                continue  # sized at each start
            if wanted.get(key) != self.applied.get(key):
                return True
        return False

    def apply(self, host: HostSettings, target: Target) -> None:
        """Set what this run's [host] names, restore what it no longer names."""
        wanted = self._wanted(host)
        try:
            for key in [k for k in self.applied if k not in wanted]:
                if key == AUTO_HUGEPAGES_KEY and host.hugepages == "auto":
                    continue
                self._restore(key)
            for key, files in wanted.items():
                if self.applied.get(key) != files:
                    self._set(key, files)
        except UserError as exc:  # this run's value cannot be had; the others may
            raise RunFailure(f"host setting not applied: {exc}") from None
        self.auto_hugepages = host.hugepages == "auto"
        target.before_start = (lambda: self._size_hugepages(target)) if self.auto_hugepages else None

    def before_measure(self, host: HostSettings, result: RunResult) -> None:
        """Right before the measured part: drop the page cache (a cold-cache run)."""
        if host.drop_caches:
            seconds = knobs.drop_page_cache()
            result.events.append(Event(0.0, "host", f"page cache dropped (sync and drop took {seconds:.2f}s)"))

    def metrics(self, host: HostSettings, result: RunResult,
                server_pids: Callable[[], Iterable[int]] = tuple) -> None:
        """Huge page figures that prove the pages were used (when any exist):
        the host's, and the server's own (`server_pids`: its processes, asked
        for only then), which another process taking huge pages on the same
        host cannot move."""
        info = knobs.hugepage_meminfo()
        if host.hugepages is None and not info.get("hugepages_total"):
            return
        total, free, rsvd = (info.get(k, 0) for k in ("hugepages_total", "hugepages_free", "hugepages_rsvd"))
        result.add_metric("host.hugepages_total", total, "pages", "HugePages_Total in /proc/meminfo")
        result.add_metric("host.hugepages_rsvd", rsvd, "pages",
                          "HugePages_Rsvd in /proc/meminfo: reserved by a mapping, not yet touched")
        result.add_metric("host.hugepages_in_use", total - free + rsvd, "pages",
                          "huge pages held by mappings on the whole host (Total - Free + Rsvd): any process's")
        mapped = [n for n in (proc.hugetlb_pages(pid) for pid in server_pids()) if n is not None]
        if mapped:
            # a shared segment is mapped by every process of the server: the largest set is the server's
            result.add_metric("server.hugepages_mapped", max(mapped), "pages",
                              "huge pages the server's processes map (/proc/PID/smaps, the largest set among "
                              "them; reserved or touched): above 0, the server uses them")

    def drain_events(self, result: RunResult) -> None:
        result.events += self.events
        self.events = []

    # ------------------------------------------------------------ driver.cpus

    def pin_driver(self, cpus: str | None, server_cpus: str | None) -> None:
        """Pin every thread of perflab to `cpus` (None: as it was)."""
        if self.affinity is None:
            self.affinity = os.sched_getaffinity(0)
        wanted = parse_cpu_list(cpus) if cpus else self.affinity
        if server_cpus and cpus and wanted & parse_cpu_list(server_cpus):
            self.warn(f"driver.cpus {cpus} overlaps the server's target.resources.cpus {server_cpus}: "
                      "the driver competes with the server for those CPUs")
        try:
            _set_affinity(wanted)
        except OSError as exc:
            raise RunFailure(f"driver.cpus {cpus}: cannot pin perflab there: {exc.strerror}") from None

    # ------------------------------------------------------------ the end

    def restore_all(self) -> None:
        """Put every knob back (the server is stopped first: huge pages a server
        holds cannot be freed)."""
        restored = self.state.restore_all()
        self.applied.clear()
        if restored:
            self.say("host settings restored: " + "; ".join(f"{key} = {value}" for key, _, value in restored))
        if self.affinity is not None:
            _set_affinity(self.affinity)
            self.affinity = None

    # ------------------------------------------------------------ pieces

    def _wanted(self, host: HostSettings) -> dict[str, Any]:
        """The knobs to set now; "auto" huge pages are sized at each server start."""
        if host.hugepages == "auto":
            host = host.model_copy(update={"hugepages": None})
        return knobs.knob_files(host)

    def _set(self, key: str, files: list[tuple[Path, str]]) -> None:
        old, new = self.state.apply(key, files)
        self.applied[key] = files
        self.events.append(Event(0.0, "host", f"{key}: {old} -> {new}"))

    def _restore(self, key: str) -> None:
        was, value = self.state.restore(key)
        self.applied.pop(key, None)
        self.events.append(Event(0.0, "host", f"{key}: {was} -> {value} (restored: this run does not set it)"))

    def _size_hugepages(self, target: Target) -> None:
        need = target.shared_memory_huge_pages()
        # Pages other processes hold now (mapped, or reserved by a mapping not
        # yet touched): our server is stopped here, so none of them are its.
        # Sizing the pool to the server's need alone would take them away, and
        # the server would fail to map its memory beside another experiment.
        info = knobs.hugepage_meminfo()
        held = max(0, info.get("hugepages_total", 0) - info.get("hugepages_free", 0)
                   + info.get("hugepages_rsvd", 0))
        pages = need + held
        files = knobs.knob_files(HostSettings(hugepages=pages), hugepages=pages)[AUTO_HUGEPAGES_KEY]
        if self.applied.get(AUTO_HUGEPAGES_KEY) != files:
            try:
                self._set(AUTO_HUGEPAGES_KEY, files)
            except UserError as exc:
                raise RunFailure(f"host.hugepages = \"auto\" ({pages} pages): {exc}") from None
        others = f" + {held} held by other processes" if held else ""
        self.events.append(Event(0.0, "host", f"host.hugepages = \"auto\": {pages} pages: {need}, the server's "
                                 f"shared_memory_size_in_huge_pages{others}"))


def _set_affinity(cpus: set[int]) -> None:
    """Every thread of this process: sched_setaffinity(0) sets only the caller's."""
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


# The cgroup counters of Target.resource_usage() stored as a run's change over
# the measured window (the rest are levels): name -> (unit, description).
RESOURCE_COUNTERS = {
    "cpu_throttled_s": ("s", "time the server's tasks were held back by target.resources.cpu_quota"),
    "cpu_nr_throttled": ("periods", "CPU quota periods (100 ms) in which the quota ran out"),
    "cpu_nr_periods": ("periods", "CPU quota periods in which the server had runnable tasks"),
    "cpu_usage_s": ("s", "CPU time of the server's cgroup"),
    "memory_failcnt": ("count", "times the server's memory hit target.resources.memory"),
    "memory_high_events": ("count", "times the server's memory went past target.resources.memory_high"),
    "memory_oom_kills": ("count", "server processes the OOM killer killed"),
    "memory_reclaim_scanned": ("pages", "pages reclaim scanned in the server's cgroup (cgroup v2 memory.stat pgscan)"),
    "io_read_bytes": ("B", "bytes the server's cgroup read from block devices"),
    "io_write_bytes": ("B", "bytes the server's cgroup wrote to block devices"),
}
RESOURCE_LEVELS = {
    "memory_peak_bytes": ("B", "the server cgroup's highest memory use, page cache included, since it started"),
    "memory_current_bytes": ("B", "the server cgroup's memory use at the run's end, page cache included"),
    "memory_cache_bytes": ("B", "the page cache charged to the server's cgroup at the run's end (memory.stat)"),
    "memory_limit_bytes": ("B", "the server cgroup's memory limit in force (target.resources.memory)"),
    "memory_high_bytes": ("B", "the server cgroup's memory.high in force (target.resources.memory_high)"),
}
# A limit "bound" when the cgroup's memory reached this share of it.
MEMORY_BOUND_SHARE = 0.9


def resource_metrics(before: dict[str, float], after: dict[str, float], result: RunResult) -> None:
    """The server's cgroup over the measured window, as metrics `resources.*`."""
    for name, value in after.items():
        if name in RESOURCE_COUNTERS and name in before:
            unit, text = RESOURCE_COUNTERS[name]
            result.add_metric(f"resources.{name}", value - before[name], unit, text + " during the workload's run",
                              higher_is_better=False if name != "cpu_usage_s" else None)
        elif name in RESOURCE_LEVELS:
            unit, text = RESOURCE_LEVELS[name]
            result.add_metric(f"resources.{name}", value, unit, text)


def memory_bound(before: dict[str, float], after: dict[str, float]) -> str | None:
    """Why the server's memory limit bound during the measured window, with
    the figures; None when it did not (or there is no limit).

    It bound when the limit was hit (v1 memory.failcnt, v2 memory.events max;
    memory.events high for memory_high; an OOM kill), when reclaim scanned
    pages in the cgroup (v2 memory.stat pgscan), or when the cgroup's memory,
    page cache included, reached MEMORY_BOUND_SHARE (90%) of the limit in the
    window. That use is the peak when the peak grew during the window;
    otherwise the peak was reached earlier (the load phase, an earlier run on
    the same server), and the window's use is known only at its two ends."""
    limits = [after[k] for k in ("memory_limit_bytes", "memory_high_bytes") if after.get(k)]
    if not limits:
        return None
    limit = min(limits)
    reasons = []
    for key, what in (("memory_failcnt", "the limit was hit {n:.0f} times (failcnt)"),
                      ("memory_high_events", "memory.high was passed {n:.0f} times"),
                      ("memory_oom_kills", "the OOM killer killed {n:.0f} processes"),
                      ("memory_reclaim_scanned", "reclaim scanned {n:.0f} pages")):
        n = after.get(key, 0.0) - before.get(key, 0.0)
        if n > 0:
            reasons.append(what.format(n=n))
    peak = after.get("memory_peak_bytes")
    if peak is not None and peak > before.get("memory_peak_bytes", 0.0):
        used, how = peak, "peaked at"
    else:
        used, how = max(before.get("memory_current_bytes", 0.0), after.get("memory_current_bytes", 0.0)), "used"
    if used >= MEMORY_BOUND_SHARE * limit:
        reasons.append(f"{how} {used / 2**20:.0f} MiB, {100 * used / limit:.0f}% of it")
    if not reasons:
        return None
    return f"the {limit / 2**20:.0f} MiB memory limit bound: " + "; ".join(reasons)
