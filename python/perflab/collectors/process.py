"""process: CPU, memory and I/O of the server's processes by role, and of perflab.

Every sample re-reads a web server's master's children ("worker": Apache
prefork forks them under load) and the postmaster's children (backends come and go), gives
each a role from its process title (/proc/PID/cmdline, which PostgreSQL sets to
"postgres: [cluster_name: ]checkpointer" and the like) and sums by role:
postmaster, backend, checkpointer, walwriter, background writer, autovacuum,
other, and "monitor" for the backend serving the pgstat collector; plus
perflab's own process, role "driver" (all its threads: the engine's drivers
and the collectors).

Per role and interval: cpu_user_pct and cpu_system_pct (% of one core, from
utime/stime in /proc/PID/stat), rss_anon_mib (private memory, summed: it adds
up), rss_shared_mib (file and shared memory pages mapped, the largest of the
role's processes: shared_buffers touched by every backend would otherwise be
counted once per backend), read_kib_per_s / write_kib_per_s (storage I/O from
/proc/PID/io read_bytes/write_bytes) and count.

CPU of processes that exit between two samples is not lost: the postmaster's
cutime/cstime grow by the whole CPU time of each child it reaps, so what the
reaped children used after they were last seen is the growth of those minus
their last-seen times. It is given to the roles of the children that went
away (to "backend" when none was seen: one that lived less than an interval).
"""

from __future__ import annotations

import math
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from perflab.collectors.base import (
    MONITOR_PIDS,
    CollectorContext,
    CollectorSettings,
    CollectorUnavailable,
    SamplingCollector,
    counter_stalled,
)
from perflab.collectors.procfs import CLOCK_TICKS_PER_S, PAGE_SIZE_KIB, read_bytes
from perflab.model import Event, Flag, RunResult
from perflab.proc import CSTIME, CUTIME, STARTTIME, STIME, UTIME, split_stat
from perflab.proc import children as children_of
from perflab.proc import cmdline as process_title
from perflab.section import Block, RunGroup, Section, Table
from perflab.section import Figure as SectionFigure

# A server that committed this many transactions (or answered this many
# queries) in a run used CPU time: at 15 us or more each (a static file from
# nginx; a database transaction costs more), over 150 ms, 15 clock ticks.
# None at all is a /proc whose utime and stime do not count
# (`ProcessCollector.annotate`).
WORK_THAT_USES_CPU = 10_000
ROLES = ("postmaster", "backend", "checkpointer", "walwriter", "background writer", "autovacuum", "other", "monitor",
         "driver")
# Process titles of PostgreSQL's auxiliary processes and background workers
# (src/backend/postmaster, src/backend/utils/init/miscinit.c GetBackendTypeDesc)
TITLE_ROLES = (
    ("checkpointer", "checkpointer"),
    ("background writer", "background writer"),
    ("walwriter", "walwriter"),
    ("autovacuum launcher", "autovacuum"),
    ("autovacuum worker", "autovacuum"),
    ("parallel worker", "backend"),
    ("logical replication", "other"),
    ("stats collector", "other"),
    ("archiver", "other"),
    ("startup", "other"),
    ("walreceiver", "other"),
    ("walsender", "other"),
    ("walsummarizer", "other"),
    ("io worker", "other"),
    ("slotsync worker", "other"),
)
PROCESS_TITLE_PREFIX = "postgres: "


class ProcessSettings(CollectorSettings):
    pass


def role_from_title(title: str) -> str:
    """The role of a postmaster child from its process title."""
    if not title.startswith(PROCESS_TITLE_PREFIX):
        return "other"
    rest = title[len(PROCESS_TITLE_PREFIX):].strip()
    # with cluster_name set the title is "postgres: <cluster_name>: <what>"
    candidates = [rest]
    if ": " in rest:
        candidates.append(rest.split(": ", 1)[1])
    for text in candidates:
        for prefix, role in TITLE_ROLES:
            if text.startswith(prefix):
                return role
    # a client backend: "postgres: user db host(port) state"
    return "backend"


def role_key(role: str) -> str:
    return role.replace(" ", "_")


@dataclass
class ProcSample:
    start_ticks: int  # starttime: tells a reused pid from the old one
    user_ticks: int
    system_ticks: int
    children_user_ticks: int  # cutime: CPU of reaped children
    children_system_ticks: int  # cstime
    rss_anon_kib: int
    rss_shared_kib: int
    read_bytes: int | None
    write_bytes: int | None


def read_proc(pid: int, with_io: bool) -> ProcSample | None:
    try:
        stat = read_bytes(f"/proc/{pid}/stat")
        statm = read_bytes(f"/proc/{pid}/statm").split()
    except OSError:
        return None
    fields = split_stat(stat)
    io: dict[bytes, int] = {}
    if with_io:
        try:
            for line in read_bytes(f"/proc/{pid}/io").splitlines():
                key, _, value = line.partition(b": ")
                io[key] = int(value)
        except OSError:
            pass
    resident, shared = int(statm[1]), int(statm[2])
    return ProcSample(
        start_ticks=int(fields[STARTTIME]),
        user_ticks=int(fields[UTIME]),
        system_ticks=int(fields[STIME]),
        children_user_ticks=int(fields[CUTIME]),
        children_system_ticks=int(fields[CSTIME]),
        rss_anon_kib=(resident - shared) * PAGE_SIZE_KIB,
        rss_shared_kib=shared * PAGE_SIZE_KIB,
        read_bytes=io.get(b"read_bytes"),
        write_bytes=io.get(b"write_bytes"),
    )


@dataclass
class RoleTotals:
    cpu_user_s: float = 0.0
    cpu_system_s: float = 0.0
    read_bytes: int = 0
    write_bytes: int = 0
    rss_anon_kib_max: float = 0.0
    count_max: int = 0


def cpu_split(metrics: dict[str, float]) -> tuple[float, float] | None:
    """(server CPU s, driver CPU s) of a run from this collector's per-role
    metrics `<collector>.<role>.cpu_s`; role "driver" is perflab itself."""
    server = driver = 0.0
    found = False
    for name, value in metrics.items():
        parts = name.split(".")
        if len(parts) != 3 or parts[2] != "cpu_s":
            continue
        found = True
        if parts[1] == "driver":
            driver += value
        else:
            server += value
    return (server, driver) if found else None


def _cpu_split_figure(labels: list[str], server: list[float], driver: list[float]) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, max(2.4, 0.32 * len(labels) + 1.2)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.grid(True, color="#e3e6ec", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ys = list(range(len(labels)))
    ax.barh(ys, server, color="#3b6fb6", label="server")
    ax.barh(ys, driver, left=server, color="#e08a2c", label="driver (perflab)")
    ax.set_yticks(ys, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("CPU (cores)")
    ax.legend(fontsize=8, frameon=False, loc="lower left", bbox_to_anchor=(0.0, 1.02), ncols=2)
    return fig


class ProcessCollector(SamplingCollector):
    Settings = ProcessSettings
    settings: ProcessSettings
    default_on = True

    @classmethod
    def report_sections(cls, groups: list[RunGroup]) -> list[Section]:
        """CPU used by the server and by perflab's driver, per group of runs:
        whether the driver, not the server, was what the machine spent on."""
        rows: list[list[Any]] = []
        labels, server_cores, driver_cores = [], [], []
        for group in groups:
            measured = [(cpu_split(r["metrics"]), r["seconds"]) for r in group.runs]
            splits = [(s, secs) for s, secs in measured if s is not None and secs]
            if not splits:
                continue
            server_s = sum(s[0] for s, _ in splits) / len(splits)
            driver_s = sum(s[1] for s, _ in splits) / len(splits)
            secs = sum(secs for _, secs in splits) / len(splits)
            share_pct = driver_s / (server_s + driver_s) * 100 if server_s + driver_s > 0 else math.nan
            bound = sum(1 for r in group.runs if Flag.CLIENT_BOUND in r["flags"])
            rows.append([group.index, group.label, len(splits), server_s, driver_s, server_s / secs, driver_s / secs,
                         share_pct, f"{bound} of {len(group.runs)}" if bound else ""])
            labels.append(f"#{group.index} {group.label}")
            server_cores.append(server_s / secs)
            driver_cores.append(driver_s / secs)
        if not rows:
            return []
        blocks: list[Block] = [Table(
            ["#", "combination", "runs", "server CPU (s)", "driver CPU (s)", "server (cores)", "driver (cores)",
             "driver share (%)", "client-bound runs"],
            rows,
            caption="Means over each combination's runs, from the process collector (user + system CPU "
            "by role; 'driver' is perflab's own process). cores = CPU seconds / run seconds. "
            "A run flagged client-bound was limited by the driver, not the server.",
        )]
        if len(labels) <= 40:
            blocks.append(SectionFigure("cpu-split", _cpu_split_figure(labels, server_cores, driver_cores),
                                        "CPU used by the server and by the driver, per combination."))
        return [Section("CPU: server and driver", blocks)]

    def __init__(self, name: str, settings: ProcessSettings) -> None:
        super().__init__(name, settings)
        self._fixed: dict[int, str] = {}  # pid -> role given by the target (and perflab)
        self._postmasters: list[int] = []
        self._masters: list[int] = []  # a web server's master, whose workers come and go
        self._spawned: set[int] = set()
        self._last: dict[int, tuple[str, ProcSample]] = {}
        self._last_t_ns = self._first_t_ns = 0
        self._roles_by_key: dict[tuple[int, int], str] = {}
        self._totals: dict[str, RoleTotals] = defaultdict(RoleTotals)
        self._with_io = True
        self._notes: list[str] = []

    def open(self, ctx: CollectorContext) -> None:
        given = ctx.target.processes() if ctx.target is not None else {}
        self._postmasters = [pid for pid, role in given.items() if role == "postmaster"]
        # a web server's master forks workers under load (Apache prefork): its
        # children are found at every sample too, as workers
        self._masters = [pid for pid, role in given.items() if role == "master"]
        # the postmaster's children are found and named here at every sample
        # (a role given for a backend caught at fork would stick)
        children = {c for pm in self._postmasters for c in children_of(pm)}
        self._fixed = {pid: role for pid, role in given.items() if pid not in children}
        self._fixed[os.getpid()] = "driver"
        try:
            read_bytes(f"/proc/{os.getpid()}/stat")
        except OSError as exc:
            raise CollectorUnavailable(f"cannot read /proc/{os.getpid()}/stat: {exc.strerror}") from None
        self._with_io = True
        self._notes = []
        for pid in self._postmasters:
            try:
                read_bytes(f"/proc/{pid}/io")
            except PermissionError:
                self._with_io = False
                self._notes.append(
                    f"no permission to read /proc/{pid}/io (the server runs as another user): "
                    "I/O bytes by role are not collected; run perflab as root or as the server's user"
                )
            except OSError:
                pass
        self._last = {}
        self._last_t_ns = self._first_t_ns = 0
        self._totals = defaultdict(RoleTotals)
        self._roles_by_key = {}

    def _role(self, pid: int, s: ProcSample) -> str:
        role = self._fixed.get(pid)
        if role is not None:
            return role
        if pid in MONITOR_PIDS:
            return "monitor"
        if pid in self._spawned:
            return "worker"
        key = (pid, s.start_ticks)
        cached = self._roles_by_key.get(key)
        if cached is not None:
            return cached
        title = process_title(pid)
        if not title.startswith(PROCESS_TITLE_PREFIX):
            # just forked: it still has the postmaster's command line until it
            # sets its title; new children are nearly always backends
            return "backend"
        # a backend's title changes with its state; its role does not
        role = self._roles_by_key[key] = role_from_title(title)
        return role

    def sample(self) -> dict[str, float]:
        t_ns = time.monotonic_ns()
        pids = set(self._fixed)
        for pm in self._postmasters:
            pids.update(children_of(pm))
        self._spawned = {c for m in self._masters for c in children_of(m)}
        pids |= self._spawned
        now: dict[int, tuple[str, ProcSample]] = {}
        for pid in pids:
            s = read_proc(pid, self._with_io)
            if s is not None:
                now[pid] = (self._role(pid, s), s)

        first = not self._last and self._last_t_ns == 0
        if first:
            self._first_t_ns = t_ns
        dt_s = (t_ns - self._last_t_ns) / 1e9
        user_ticks: dict[str, int] = defaultdict(int)
        system_ticks: dict[str, int] = defaultdict(int)
        read_b: dict[str, int] = defaultdict(int)
        write_b: dict[str, int] = defaultdict(int)
        anon_kib: dict[str, int] = defaultdict(int)
        shared_kib: dict[str, int] = defaultdict(int)
        count: dict[str, int] = defaultdict(int)
        for pid, (role, s) in now.items():
            count[role] += 1
            anon_kib[role] += s.rss_anon_kib
            shared_kib[role] = max(shared_kib[role], s.rss_shared_kib)
            if first:
                continue
            old = self._last.get(pid)
            if old is not None and old[1].start_ticks == s.start_ticks:
                base = old[1]
            else:  # born since the last sample: all its time is in this interval
                base = ProcSample(s.start_ticks, 0, 0, 0, 0, 0, 0, 0, 0)
            user_ticks[role] += s.user_ticks - base.user_ticks
            system_ticks[role] += s.system_ticks - base.system_ticks
            if s.read_bytes is not None and base.read_bytes is not None:
                read_b[role] += s.read_bytes - base.read_bytes
                write_b[role] += (s.write_bytes or 0) - (base.write_bytes or 0)
        if not first:
            self._add_reaped(now, user_ticks, system_ticks)

        values: dict[str, float] = {}
        for role in set(count) | set(user_ticks):
            k = role_key(role)
            tot = self._totals[role]
            tot.count_max = max(tot.count_max, count[role])
            tot.rss_anon_kib_max = max(tot.rss_anon_kib_max, anon_kib[role])
            values[f"{k}.count"] = float(count[role])
            values[f"{k}.rss_anon_mib"] = anon_kib[role] / 1024
            values[f"{k}.rss_shared_mib"] = shared_kib[role] / 1024
            if first or dt_s <= 0:
                continue
            tot.cpu_user_s += user_ticks[role] / CLOCK_TICKS_PER_S
            tot.cpu_system_s += system_ticks[role] / CLOCK_TICKS_PER_S
            tot.read_bytes += read_b[role]
            tot.write_bytes += write_b[role]
            values[f"{k}.cpu_user_pct"] = 100.0 * user_ticks[role] / CLOCK_TICKS_PER_S / dt_s
            values[f"{k}.cpu_system_pct"] = 100.0 * system_ticks[role] / CLOCK_TICKS_PER_S / dt_s
            if self._with_io:
                values[f"{k}.read_kib_per_s"] = read_b[role] / 1024 / dt_s
                values[f"{k}.write_kib_per_s"] = write_b[role] / 1024 / dt_s
        self._last = now
        self._last_t_ns = t_ns
        return values

    def _add_reaped(
        self,
        now: dict[int, tuple[str, ProcSample]],
        user_ticks: dict[str, int],
        system_ticks: dict[str, int],
    ) -> None:
        """CPU that children used between their last sample and their exit,
        from the growth of the postmaster's cutime and cstime (see the module
        docstring), shared evenly among the roles of the children that went."""
        for pm in self._postmasters:
            if pm not in now or pm not in self._last:
                continue
            before, after = self._last[pm][1], now[pm][1]
            gone = [
                (role, s)
                for pid, (role, s) in self._last.items()
                if pid not in self._fixed and (pid not in now or now[pid][1].start_ticks != s.start_ticks)
            ]
            roles = [role for role, _ in gone] or ["backend"]
            for ticks, grown, seen in (
                (user_ticks, after.children_user_ticks - before.children_user_ticks,
                 sum(s.user_ticks for _, s in gone)),
                (system_ticks, after.children_system_ticks - before.children_system_ticks,
                 sum(s.system_ticks for _, s in gone)),
            ):
                unseen = grown - seen
                for i, role in enumerate(roles if unseen > 0 else []):
                    ticks[role] += unseen // len(roles) + (1 if i < unseen % len(roles) else 0)

    def summary(self) -> RunResult:
        result = RunResult()
        for note in self._notes:
            result.events.append(Event(0.0, "collector-info", f"{self.name}: {note}"))
        for role in sorted(self._totals, key=lambda r: ROLES.index(r) if r in ROLES else len(ROLES)):
            tot = self._totals[role]
            p = f"{self.name}.{role_key(role)}"
            result.add_metric(f"{p}.cpu_s", tot.cpu_user_s + tot.cpu_system_s, "s",
                              f"CPU time (user + system) of the {role} processes over the run",
                              higher_is_better=False)
            result.add_metric(f"{p}.cpu_user_s", tot.cpu_user_s, "s", f"user CPU time of the {role} processes")
            result.add_metric(f"{p}.cpu_system_s", tot.cpu_system_s, "s", f"system CPU time of the {role} processes")
            result.add_metric(f"{p}.rss_anon_mib_max", tot.rss_anon_kib_max / 1024, "MiB",
                              f"most private memory the {role} processes held together")
            result.add_metric(f"{p}.count_max", tot.count_max, "processes", f"most {role} processes at once")
            if self._with_io:
                result.add_metric(f"{p}.read_mib", tot.read_bytes / 2**20, "MiB", f"storage read by the {role} processes")
                result.add_metric(f"{p}.write_mib", tot.write_bytes / 2**20, "MiB",
                                  f"storage written by the {role} processes")
        return result

    def annotate(self, result: RunResult) -> None:
        """The server's CPU time is a cumulative counter that must advance
        when the workload did work on it: none over a run of at least
        WORK_THAT_USES_CPU transactions or queries is not a measurement (its
        figures are left out and the run is flagged)."""
        work = max((result.metrics[k].value for k in ("transactions", "queries") if k in result.metrics),
                   default=0.0)
        server = [r for r in self._totals if r not in ("driver", "monitor")]
        if work < WORK_THAT_USES_CPU or not server:
            return
        if any(self._totals[r].cpu_user_s + self._totals[r].cpu_system_s > 0 for r in server):
            return
        for role in server:
            for part in ("cpu_s", "cpu_user_s", "cpu_system_s"):
                result.metrics.pop(f"{self.name}.{role_key(role)}.{part}", None)
        seconds = (self._last_t_ns - self._first_t_ns) / 1e9
        counter_stalled(result, self.name, ["utime + stime of the server's processes (/proc/PID/stat)"], seconds,
                        f"the server did {work:,.0f} transactions or queries")
