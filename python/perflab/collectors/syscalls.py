"""syscalls: the managed server's file system calls, counted and timed by file class.

What it traces. The managed PostgreSQL server's whole process tree and
nothing else, filtered inside the kernel by process, not by cgroup: the
probe's predicate is `pid == postmaster || parent == postmaster ||
@tracked[pid]`, where @tracked starts as the tree read from /proc when the
trace starts and grows at `sched_process_fork` (a child of a tracked process
is tracked from birth; `sched_process_exit` forgets it). Why not the cgroup:
bpftrace's `cgroup` builtin is the cgroup v2 id, this project's hosts run
cgroup v1 as often as v2, and a server may run without [target.resources];
the process tree is the same set in every case. The parent test closes the
one gap of fork tracking (a backend forked between the /proc snapshot and the
probes' attachment): every PostgreSQL backend and auxiliary process is a
direct child of the postmaster.

File classes: `wal` (the server's pg_wal, wherever it points), `base`
(base/<db>/<file>), `global` (global/<file>), `other`. An fd is resolved in
the kernel at each call, from the file itself: task->files->fdt->fd[fd] ->
f_path.dentry, its parent directory's inode (and grandparent's, for base/),
compared with the inodes and device of those directories, stat'ed by perflab
when the trace starts (BTF gives the structures' layout). Why not the path
or openat return values: bpftrace's path() works only in kfunc probes on a
few functions, and following openat misses every file a process opened
before the trace started (the walwriter's current segment, the backends'
cached relation files); inodes also hold when pg_wal is a symlink to another
file system. openat is classified from the fd it returns.

What it counts: openat, read, pread64, preadv, write, pwrite64, pwritev,
lseek, close, fsync, fdatasync and sync_file_range. Per call type and class
the kernel keeps count, total, min and max duration and a log-linear
histogram in nanoseconds (in-kernel aggregates, printed every interval and at
the end; no event per call: the sync records too are batched in a map per
interval). The histogram (`bucket_of`, computed the same way in the BPF
program and in Python): durations below 2^(SUB_BITS+1) ns are their own
bucket; above, each power of two is split into 2^SUB_BITS equal buckets
(HdrHistogram's layout, with SUB_BITS = 5: 32 per octave). A bucket is at
most 1/32 of its lower bound wide, so p50 and p99, placed inside their
bucket and kept inside [min, max], are within 3.125% of the exact
percentile of the same calls (`percentile_from_buckets`; the bound is
proved there). fsync and fdatasync, whose every call is recorded, get exact
percentiles. (io_method=io_uring in PostgreSQL 18 issues its reads without
these system calls: they are not seen.)

Where the fsync records go: the store's series table, source `syscalls`,
one point per call: `call.<class>.<fsync|fdatasync>` = its duration in
microseconds at t = the call's start on the run's clock (seconds since
t0_ns), and `call.<class>.<kind>.pid` = the calling process at the same t.
bpftrace's `nsecs` is CLOCK_MONOTONIC, as is time.monotonic_ns(): the
collector checks this at every start (the script's BEGIN time must fall
between two readings of Python's clock) and says so in an event.

Series per interval: `<class>.<column>_per_s` (opens, reads, writes, seeks,
closes, fsync, fdatasync, sync_file_range) and `<mechanism>_cpu_pct`. Metrics:
`<class>.<call>.{count,mean_us,min_us,p50_us,p99_us,max_us}`, the tracer's
own CPU (`tracer_cpu_s` while tracing and `tracer_startup_cpu_s` compiling and
attaching, from /proc/PID/stat and its rusage at exit; the
probes' own time is spent in the traced processes and is not in it: the
benchmark benchmarks/syscalls_overhead.py measures the whole cost), and
the cross-check with PostgreSQL's counters: pg_stat_wal's wal_sync and
wal_sync_time (PG 14+; the time needs track_wal_io_timing), pg_stat_io's
WAL fsyncs (PG 16+), and `wal_sync_ratio` = traced WAL syncs / wal_sync.

Fallback: where bpftrace or BTF is missing (or mechanism = "strace"),
`strace -f -T -y -ttt -e trace=... -p PID...` on the postmaster and its
children, parsed into the same aggregates and records (-y names each fd's
file; the path decides the class). strace's --seccomp-bpf works only for a
command strace starts, not with -p, so it is not used: every system call of
the traced processes stops them, which costs far more (see the benchmark).
The mechanism is stored as an event and the metric `mechanism_strace` (0 or
1), and said in the report. Neither available: the collector is skipped
with the reason (`perflab check` warns).

The tracer is a child perflab journals ("kill-process", pid, start time and
the token in its environment) so the guardian kills it if perflab is
killed; it runs in a session of its own so a Ctrl-C reaches perflab, which
stops it (SIGINT: bpftrace prints its maps and exits).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from perflab.collectors.base import (
    Collector,
    CollectorContext,
    CollectorSettings,
    CollectorUnavailable,
)
from perflab.collectors.syscall_probes import (
    BUCKET_RELATIVE_ERROR,
    CALLS,
    SYNC_CALLS,
    Agg,
    Rule,
    bpftrace_script,
    exact_percentile,
    percentile_from_buckets,
)
from perflab.endpoints import Capability, PgWireEndpoint
from perflab.guardian import TOKEN_VAR, journal, new_token
from perflab.hostctl.scratchfs import mount_record  # its module registers the "mount" undo
from perflab.model import Event, RunResult
from perflab.proc import cpu_seconds, descendants, start_time, tracer_pid
from perflab.section import Block, RunGroup, Section, Table, Text
from perflab.section import Figure as SectionFigure
from perflab.targets.base import FileClass

# PostgreSQL's (wal, base, global), then InnoDB's (a target's `file_classes`)
CLASSES = ("other", "wal", "base", "global", "redo", "data", "undo", "binlog")
# the seed's table: its columns and the calls each counts
COLUMNS = {"opens": ("openat",), "reads": ("read", "pread64", "preadv"), "writes": ("write", "pwrite64", "pwritev"),
           "seeks": ("lseek",), "closes": ("close",), "fsync": ("fsync",), "fdatasync": ("fdatasync",),
           "sync_file_range": ("sync_file_range",)}
COLUMN_OF = {call: col for col, calls in COLUMNS.items() for call in calls}
TRACEFS = Path("/sys/kernel/tracing")
BTF = Path("/sys/kernel/btf/vmlinux")
ATTACH_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
# Map entries: fsync/fdatasync records per interval (more are dropped; the
# counts and histograms still have them).
RECORD_MAP_KEYS = 262144


class SyscallsSettings(CollectorSettings):
    mechanism: Literal["auto", "bpftrace", "strace"] = Field(
        default="auto", description="auto: bpftrace where it and BTF are present, else strace")


def bpftrace_problem() -> str | None:
    if shutil.which("bpftrace") is None:
        return "bpftrace is not installed"
    if not BTF.exists():
        return f"the kernel has no BTF ({BTF} is missing)"
    if os.geteuid() != 0:
        return "bpftrace needs root"
    if not (TRACEFS / "events").is_dir() and "tracefs" not in Path("/proc/filesystems").read_text():
        return "the kernel has no tracefs"
    return None


def strace_problem() -> str | None:
    if shutil.which("strace") is None:
        return "strace is not installed"
    return None


def _kdev(st_dev: int) -> int:
    """A device number as the kernel keeps it in super_block.s_dev (MKDEV)."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


# --------------------------------------------------------------------- strace

STRACE_LINE = re.compile(r"^(?:\[pid\s+)?(\d+)\]?\s+(\d+\.\d+)\s+(\w+)\((.*)\)\s+=\s+(.*?)\s+<(\d+\.\d+)>\s*$")
STRACE_FD_PATH = re.compile(r"^-?\d+<([^>]*)>")


class Syscalls:
    """The aggregates both mechanisms fill: (call, class) -> Agg, and records."""

    def __init__(self) -> None:
        self.aggs: dict[tuple[str, str], Agg] = defaultdict(Agg)
        self.records: list[tuple[str, str, int, int, int]] = []  # call, class, pid, start ns, dur ns


class SyscallsCollector(Collector):
    Settings = SyscallsSettings
    settings: SyscallsSettings
    default_on = False
    needs = frozenset({Capability.SQL})

    @classmethod
    def preflight(cls, settings: SyscallsSettings, provided: frozenset[Capability]) -> str | None:
        bpf, st = bpftrace_problem(), strace_problem()
        if settings.mechanism == "bpftrace":
            return bpf
        if settings.mechanism == "strace":
            return st
        if bpf and st:
            return f"neither tracer works here: {bpf}; {st}"
        return None

    def __init__(self, name: str, settings: SyscallsSettings) -> None:
        super().__init__(name, settings)
        self.mechanism = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._key = ""
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._ctx: CollectorContext | None = None
        self._notes: list[str] = []
        self._data = Syscalls()
        self._stats: dict[tuple[int, int], tuple[int, int]] = {}  # bpftrace's cumulative (count, total)
        self._last_counts: dict[tuple[str, str], int] = {}
        self._last_t_ns = 0
        self._cpu_s = 0.0
        self._cpu_startup_s = 0.0
        self._cpu_last = (0, 0.0)
        self._pg_before: dict[str, float] = {}
        self._mounted_tracefs = False
        self._stderr: list[str] = []
        self._classes: list[FileClass] = []
        self._clock_ok: bool | None = None
        self._ended = threading.Event()
        self._begin = threading.Event()
        self._wall_minus_mono_ns = 0
        self._begin_ns = 0

    # ------------------------------------------------------------ start

    def start(self, ctx: CollectorContext) -> None:
        self._ctx = ctx
        target = ctx.target
        pm = target.server_pid() if target is not None else None
        if pm is None or target is None or target.external:
            raise CollectorUnavailable("the target is not a server perflab manages (no postmaster pid to trace)")
        paths = target.data_paths() if target is not None else {}
        data = paths.get("data")
        if data is None:
            raise CollectorUnavailable("the target has no data directory")
        # the target's own classes (MariaDB's InnoDB files), else PostgreSQL's
        self._classes = target.file_classes() or [
            FileClass("wal", Path(paths.get("wal", data / "pg_wal")).resolve()),
            FileClass("base", data / "base", 2), FileClass("global", data / "global")]
        mech: str = self.settings.mechanism
        bpf, st = bpftrace_problem(), strace_problem()
        if mech == "auto":
            mech = "bpftrace" if bpf is None else "strace" if st is None else ""
            if mech == "strace":
                self._notes.append(f"bpftrace not used ({bpf}): strace instead")
        if not mech or (mech == "bpftrace" and bpf) or (mech == "strace" and st):
            reasons = "; ".join(r for r in (bpf if mech != "strace" else None, st if mech != "bpftrace" else None)
                                if r)
            raise CollectorUnavailable(f"cannot trace system calls: {reasons}")
        self.mechanism = mech
        self._pg_before = self._pg_counters(ctx)
        self._last_t_ns = time.monotonic_ns()
        if mech == "bpftrace":
            self._start_bpftrace(ctx, pm)
        else:
            self._start_strace(ctx, pm)
        ctx.run.series.add(self.name, "traced", ctx.run.now_s(), 1.0)

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen[bytes]:
        # the token proves the tracer perflab's to the guardian (a pid and start time alone do not)
        token = new_token()
        env = {**(os.environ if env is None else env), TOKEN_VAR: token}
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, env=env, **kw)
        # journaled at once (a pid cannot be journaled before it exists): a
        # perflab killed from here on leaves the guardian to kill the tracer
        self._key = f"kill-process:{proc.pid}"
        journal().add("kill-process", self._key, pid=proc.pid, start=start_time(proc.pid), token=token,
                      what=argv[0])
        return proc

    def _start_bpftrace(self, ctx: CollectorContext, pm: int) -> None:
        if not (TRACEFS / "events").is_dir():
            # from "nodev": the undo unmounts only that (a system's own tracefs shows "tracefs")
            journal().add("mount", f"mount:{TRACEFS}", **mount_record(TRACEFS, ["nodev"]))
            if subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], capture_output=True).returncode:
                journal().remove(f"mount:{TRACEFS}")
                raise CollectorUnavailable(f"cannot mount tracefs on {TRACEFS}")
            self._mounted_tracefs = True
        dirs: list[Rule] = []
        for fc in self._classes:
            try:
                st = fc.directory.stat()
            except OSError as exc:
                raise CollectorUnavailable(f"cannot stat the server's {fc.name} directory {fc.directory}: {exc}") from None
            dirs.append((CLASSES.index(fc.name), _kdev(st.st_dev), st.st_ino, fc.depth, fc.prefix))
        script = bpftrace_script(pm, [pm, *descendants(pm)], dirs, max(100, int(self.settings.interval * 1000)))
        path = ctx.run_dir / "syscalls.bt"
        try:
            path.write_text(script)
        except OSError:
            # a name no other user can make first (mkstemp: O_EXCL, 0600), removed once bpftrace has begun
            fd, name = tempfile.mkstemp(prefix="perflab-syscalls-", suffix=".bt")
            with os.fdopen(fd, "w") as f:
                f.write(script)
            path = Path(name)
        before_ns = time.monotonic_ns()
        # room for a busy interval's syncs in the record maps
        env = {**os.environ, "BPFTRACE_MAP_KEYS_MAX": str(RECORD_MAP_KEYS)}
        self._proc = self._spawn(["bpftrace", "-f", "json", str(path)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env)
        threading.Thread(target=self._drain_stderr, daemon=True, name="syscalls-stderr").start()
        self._thread = threading.Thread(target=self._read_bpftrace, daemon=True, name=f"collector-{self.name}")
        self._thread.start()
        begun = self._begin.wait(ATTACH_TIMEOUT_S)
        if path.parent != ctx.run_dir:
            path.unlink(missing_ok=True)  # read once bpftrace has begun (or failed)
        if not begun or self._proc.poll() is not None:
            self._kill()
            err = " ".join(line for line in self._stderr if "RLIMIT" not in line)[-400:]
            raise CollectorUnavailable(f"bpftrace did not start: {err or 'no output'}")
        after_ns = time.monotonic_ns()
        self._clock_ok = before_ns <= self._begin_ns <= after_ns
        self._notes.append(
            "bpftrace's nsecs and the run's clock agree (CLOCK_MONOTONIC)" if self._clock_ok else
            f"bpftrace's BEGIN time {self._begin_ns} is outside Python's [{before_ns}, {after_ns}]: "
            "the fsync records' times may be off")
        self._cpu_last = (time.monotonic_ns(), cpu_seconds(self._proc.pid) or 0.0)
        self._cpu_startup_s = self._cpu_last[1]  # compiling and loading the probes

    def _drain_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for raw in self._proc.stderr:
            if len(self._stderr) < 50:
                self._stderr.append(raw.decode(errors="replace").strip())

    def _read_bpftrace(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        hists: dict[tuple[int, int], dict[int, int]] = defaultdict(dict)
        mins: dict[tuple[int, int], int] = {}
        maxs: dict[tuple[int, int], int] = {}
        for raw in self._proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            kind, data = msg.get("type"), msg.get("data")
            if kind == "printf":
                self._bpftrace_line(str(data))
            elif kind == "stats":
                self._stats = {_key(k): (int(v["count"]), int(v["total"])) for k, v in data.get("@st", {}).items()}
            elif kind == "map":
                for name in ("@ra", "@rb"):
                    batch = []
                    for k, (n, c, pid, dur) in data.get(name, {}).items():
                        start_ns, _ = _key(k)
                        batch.append((start_ns, int(n), int(c), int(pid), int(dur)))
                    for start_ns, n, c, pid, dur in sorted(batch):
                        self._record(CALLS[n], CLASSES[c], pid, start_ns, dur)
                if "@h" in data:
                    hists = defaultdict(dict)
                    for k, v in data["@h"].items():
                        n, c, b = (int(x) for x in k.split(","))
                        hists[(n, c)][b] = int(v)
                for name, store in (("@mn", mins), ("@mx", maxs)):
                    if name in data:
                        store.update({_key(k): int(v) for k, v in data[name].items()})
        with self._lock:
            for (n, c), (count, total) in self._stats.items():
                agg = self._data.aggs[(CALLS[n], CLASSES[c])]
                agg.count, agg.total_ns = count, total
                agg.min_ns, agg.max_ns = mins.get((n, c)), maxs.get((n, c), 0)
                agg.buckets = dict(hists.get((n, c), {}))
        self._ended.set()

    def _bpftrace_line(self, text: str) -> None:
        parts = text.split()
        if not parts:
            return
        if parts[0] == "T":
            with self._lock:
                counts = {(CALLS[n], CLASSES[c]): count for (n, c), (count, _) in self._stats.items()}
            self._interval(counts, int(parts[1]))
        elif parts[0] == "B":
            self._begin_ns = int(parts[1])
            self._begin.set()

    def _record(self, call: str, cls: str, pid: int, start_ns: int, dur_ns: int) -> None:
        assert self._ctx is not None
        run = self._ctx.run
        t = (start_ns - run.t0_ns) / 1e9
        with self._lock:
            self._data.records.append((call, cls, pid, start_ns, dur_ns))
        run.series.add(self.name, f"call.{cls}.{call}", t, dur_ns / 1000)
        run.series.add(self.name, f"call.{cls}.{call}.pid", t, float(pid))

    def _interval(self, counts: dict[tuple[str, str], int], t_ns: int) -> None:
        assert self._ctx is not None
        run = self._ctx.run
        dt = (t_ns - self._last_t_ns) / 1e9
        if dt <= 0:
            return
        per_col: dict[tuple[str, str], int] = defaultdict(int)
        for key, count in counts.items():
            per_col[(key[1], COLUMN_OF[key[0]])] += count - self._last_counts.get(key, 0)
        t = (t_ns - run.t0_ns) / 1e9
        for (cls, col), delta in sorted(per_col.items()):
            run.series.add(self.name, f"{cls}.{col}_per_s", t, delta / dt)
        self._last_counts = dict(counts)
        self._last_t_ns = t_ns
        if self._proc is not None:
            cpu = cpu_seconds(self._proc.pid)
            now = time.monotonic_ns()
            if cpu is not None and now > self._cpu_last[0]:
                run.series.add(self.name, f"{self.mechanism}_cpu_pct", t,
                               100 * (cpu - self._cpu_last[1]) / ((now - self._cpu_last[0]) / 1e9))
                self._cpu_last = (now, cpu)
                self._cpu_s = cpu

    # ------------------------------------------------------------ strace

    def _start_strace(self, ctx: CollectorContext, pm: int) -> None:
        pids = [pm, *descendants(pm)]
        argv = ["strace", "-f", "-T", "-y", "-ttt", "-qq", "-e", "trace=" + ",".join(CALLS), "-e", "signal=none"]
        for pid in pids:
            argv += ["-p", str(pid)]
        self._wall_minus_mono_ns = time.time_ns() - time.monotonic_ns()
        self._proc = self._spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._thread = threading.Thread(target=self._read_strace, daemon=True, name=f"collector-{self.name}")
        self._thread.start()
        # strace attaches to each pid in turn before tracing; let it
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self._proc.poll() is None:
            if all(tracer_pid(p) == self._proc.pid for p in pids if start_time(p) is not None):
                break
            time.sleep(0.02)
        if self._proc.poll() is not None:
            self._kill()
            raise CollectorUnavailable(f"strace did not start: {' '.join(self._stderr)[-400:]}")
        self._notes.append("traced with strace -f -p (ptrace: every traced call stops the process)")
        self._cpu_last = (time.monotonic_ns(), cpu_seconds(self._proc.pid) or 0.0)
        self._cpu_startup_s = self._cpu_last[1]
        self._ticker = threading.Thread(target=self._strace_ticks, daemon=True, name="syscalls-ticks")
        self._ticker.start()

    def _strace_ticks(self) -> None:
        while not self._ended.wait(float(self.settings.interval)):
            with self._lock:
                counts = {k: a.count for k, a in self._data.aggs.items()}
            self._interval(counts, time.monotonic_ns())

    def _read_strace(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        pending: dict[str, str] = {}
        for raw in self._proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            if line.endswith("<unfinished ...>"):
                pid = line.split()[0].strip("[pid]").strip()
                pending[pid] = line[: -len("<unfinished ...>")].rstrip()
                continue
            if "resumed>" in line:
                m = re.match(r"^(?:\[pid\s+)?(\d+)\]?\s+\S+\s+<\.\.\. \w+ resumed>(.*)$", line)
                if m and m.group(1) in pending:
                    line = pending.pop(m.group(1)) + m.group(2)
                else:
                    continue
            m = STRACE_LINE.match(line)
            if not m:
                if len(self._stderr) < 20 and not line.startswith(("+++", "---")):
                    self._stderr.append(line)
                continue
            pid, ts, call, args, ret, dur = m.groups()
            if call not in COLUMN_OF:
                continue
            dur_ns = int(float(dur) * 1e9)
            start_ns = int(float(ts) * 1e9) - self._wall_minus_mono_ns
            if call == "openat":
                fm = STRACE_FD_PATH.match(ret)
                path = fm.group(1) if fm else ""
            else:
                fm = STRACE_FD_PATH.match(args)
                path = fm.group(1) if fm else ""
            cls = self._class_of_path(path)
            with self._lock:
                self._data.aggs[(call, cls)].add(dur_ns)
            if call in SYNC_CALLS:
                self._record(call, cls, int(pid), start_ns, dur_ns)
        self._ended.set()

    def _class_of_path(self, path: str) -> str:
        if not path:
            return "other"
        p = Path(path)
        for fc in self._classes:
            if (p.parent if fc.depth == 1 else p.parent.parent) == fc.directory and (
                    fc.prefix is None or p.name.startswith(fc.prefix)):
                return fc.name
        return "other"

    # ------------------------------------------------------------ stop

    def _kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        journal().remove(self._key)
        self._unmount()

    def _unmount(self) -> None:
        if self._mounted_tracefs:
            subprocess.run(["umount", str(TRACEFS)], capture_output=True)
            journal().remove(f"mount:{TRACEFS}")
            self._mounted_tracefs = False

    def stop(self) -> RunResult:
        proc = self._proc
        rusage_cpu: float | None = None
        if proc is not None:
            self._cpu_s = cpu_seconds(proc.pid) or self._cpu_s
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)  # bpftrace prints its maps; strace detaches
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while time.monotonic() < deadline:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    rusage_cpu = usage.ru_utime + usage.ru_stime
                    break
                time.sleep(0.02)
            else:
                self._notes.append(f"{self.mechanism} did not stop within {STOP_TIMEOUT_S:.0f} s: killed")
                self._kill()
            journal().remove(self._key)
        self._ended.wait(10)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if proc is not None:
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        self._unmount()
        if rusage_cpu is not None:
            self._cpu_s = max(self._cpu_s, rusage_cpu)
        return self._summary()

    def _summary(self) -> RunResult:
        assert self._ctx is not None
        result = RunResult()
        n = self.name
        result.events.append(Event(0.0, "syscalls-traced", f"{n}: the server's system calls were traced with "
                                   f"{self.mechanism}"))
        for note in self._notes:
            result.events.append(Event(0.0, "collector-info", f"{n}: {note}"))
        for line in self._stderr[:5]:
            if line and "RLIMIT" not in line:
                result.events.append(Event(0.0, "collector-info", f"{n}: {self.mechanism}: {line}"))
        result.add_metric(f"{n}.mechanism_strace", 1.0 if self.mechanism == "strace" else 0.0, "flag",
                          "1: traced with strace (ptrace), 0: with bpftrace")
        result.add_metric(f"{n}.tracer_cpu_s", max(0.0, self._cpu_s - self._cpu_startup_s), "s",
                          f"CPU time of the {self.mechanism} process while tracing (after start-up)",
                          higher_is_better=False)
        result.add_metric(f"{n}.tracer_startup_cpu_s", self._cpu_startup_s, "s",
                          f"CPU time {self.mechanism} spent starting (compiling and attaching), before the run",
                          higher_is_better=False)
        with self._lock:
            aggs = dict(self._data.aggs)
            records = list(self._data.records)
        exact: dict[tuple[str, str], list[float]] = defaultdict(list)
        for call, cls, _, _, dur_ns in records:
            exact[(call, cls)].append(dur_ns / 1000)
        for (call, cls), agg in sorted(aggs.items()):
            if agg.count == 0:
                continue
            p = f"{n}.{cls}.{call}"
            result.add_metric(f"{p}.count", agg.count, "calls", f"{call} calls on {cls} files")
            result.add_metric(f"{p}.mean_us", agg.total_ns / agg.count / 1000, "us", f"mean {call} time, {cls}")
            result.add_metric(f"{p}.min_us", (agg.min_ns or 0) / 1000, "us", f"shortest {call}, {cls}")
            result.add_metric(f"{p}.max_us", agg.max_ns / 1000, "us", f"longest {call}, {cls}")
            values = exact.get((call, cls))
            for q, label in ((0.5, "p50"), (0.99, "p99")):
                if values:
                    v, how = exact_percentile(values, q), " (exact: every call recorded)"
                else:
                    v = percentile_from_buckets(agg.buckets, q, agg.min_ns, agg.max_ns) / 1000
                    how = (f" (from a log-linear histogram: within {100 * BUCKET_RELATIVE_ERROR:g}% of the exact "
                           "value, inside [min, max])")
                result.add_metric(f"{p}.{label}_us", v, "us", f"{label} {call} time, {cls}{how}")
        for cls in CLASSES:
            for col, calls in COLUMNS.items():
                total = sum(aggs[(c, cls)].count for c in calls if (c, cls) in aggs)
                if total:
                    result.add_metric(f"{n}.{cls}.{col}", total, "calls", f"{col} on {cls} files (seed table)")
        result.add_metric(f"{n}.sync_records", len(records), "calls", "fsync/fdatasync calls recorded one by one")
        self._cross_check(result, aggs)
        return result

    # ------------------------------------------------------------ cross-check

    def _pg_counters(self, ctx: CollectorContext) -> dict[str, float]:
        endpoint = ctx.endpoint
        if not isinstance(endpoint, PgWireEndpoint):
            return {}
        out: dict[str, float] = {}
        try:
            with endpoint.connect() as conn:
                version = conn.info.server_version
                if version >= 140000:
                    row = conn.execute("SELECT row_to_json(w) FROM pg_stat_wal w").fetchone()
                    doc = row[0] if row else {}
                    for col in ("wal_sync", "wal_sync_time"):
                        if doc.get(col) is not None:
                            out[f"pg_stat_wal.{col}"] = float(doc[col])
                if version >= 160000:
                    row = conn.execute("SELECT sum(fsyncs), sum(fsync_time) FROM pg_stat_io "
                                       "WHERE object = 'wal'").fetchone()
                    if row is None or row[0] is None:
                        row = conn.execute("SELECT sum(fsyncs), sum(fsync_time) FROM pg_stat_io").fetchone()
                        prefix = "pg_stat_io.all"
                    else:
                        prefix = "pg_stat_io.wal"
                    if row and row[0] is not None:
                        out[f"{prefix}.fsyncs"] = float(row[0])
                        if row[1] is not None:
                            out[f"{prefix}.fsync_time"] = float(row[1])
        except Exception as exc:
            self._notes.append(f"PostgreSQL's counters not read: {type(exc).__name__}: {exc}")
        return out

    def _cross_check(self, result: RunResult, aggs: dict[tuple[str, str], Agg]) -> None:
        assert self._ctx is not None
        if not self._pg_before:
            return
        after = self._pg_counters(self._ctx)
        n = self.name
        for key, value in after.items():
            if key in self._pg_before:
                unit = "ms" if key.endswith("_time") else "calls"
                result.add_metric(f"{n}.pg.{key}", value - self._pg_before[key], unit,
                                  f"{key} during the trace (PostgreSQL's own counter)")
        traced = sum(a.count for (call, cls), a in aggs.items() if cls == "wal" and call in SYNC_CALLS)
        traced_ms = sum(a.total_ns for (call, cls), a in aggs.items() if cls == "wal" and call in SYNC_CALLS) / 1e6
        result.add_metric(f"{n}.wal_syncs", traced, "calls", "fsync + fdatasync on WAL files, traced")
        result.add_metric(f"{n}.wal_sync_ms", traced_ms, "ms", "time in fsync + fdatasync on WAL files, traced")
        # PostgreSQL 18 moved wal_sync from pg_stat_wal to pg_stat_io (object 'wal')
        sync_key = next((k for k in ("pg_stat_wal.wal_sync", "pg_stat_io.wal.fsyncs")
                         if k in after and k in self._pg_before), None)
        if sync_key is not None:
            pg = after[sync_key] - self._pg_before[sync_key]
            if pg > 0:
                result.add_metric(f"{n}.wal_sync_ratio", traced / pg, "ratio",
                                  f"traced WAL syncs / {sync_key} (1: they agree)")
        if "pg_stat_wal.wal_sync_time" in after and "pg_stat_wal.wal_sync_time" in self._pg_before:
            pg_ms = after["pg_stat_wal.wal_sync_time"] - self._pg_before["pg_stat_wal.wal_sync_time"]
            if pg_ms > 0:
                result.add_metric(f"{n}.wal_sync_time_ratio", traced_ms / pg_ms, "ratio",
                                  "traced WAL sync time / pg_stat_wal.wal_sync_time (needs track_wal_io_timing)")

    # ------------------------------------------------------------ report

    @classmethod
    def report_sections(cls, groups: list[RunGroup]) -> list[Section]:
        """The seed's three views, each one table or figure for the whole
        experiment, a row (or line) per storage layout rather than per run:
        fsync and fdatasync Num/Avg/Min/Max; the calls per file class; the
        successive WAL syncs. The other factors are held at their first level
        (the seed's "one point": 1 client, 200 transactions), and the
        repetitions pooled."""
        from perflab.analysis import pivot

        traced = [{**run, "label": group.label, "read_series": group.read_series}
                  for group in groups for run in group.runs if "syscalls.mechanism_strace" in run["metrics"]]
        if not traced:
            return []
        mechanisms = {"strace" if r["metrics"]["syscalls.mechanism_strace"] else "bpftrace" for r in traced}
        varied = pivot.varied(traced)
        layout = [f for f in varied if "storage" in f or "wal" in f.rsplit(".", 1)[-1]] or varied
        others = [f for f in varied if f not in layout]
        first = {f: pivot.levels(traced, f)[0] for f in others}
        held = [r for r in traced if all(r["factors"].get(f) == v for f, v in first.items())] or traced
        where = (" Runs at " + pivot.combo_label(others, list(first.values())) + " (the first level of each "
                 "other factor), repetitions pooled." if others and held is not traced else "")
        layouts = pivot.group(held, layout)
        layout_header = " / ".join(pivot.short_name(f) for f in layout) or "runs"

        def name(values: tuple[Any, ...]) -> str:
            return pivot.combo_label(layout, values, named=len(layout) > 1) if layout else "all runs"

        sync_rows: list[list[Any]] = []
        for call in SYNC_CALLS:
            for values, runs in layouts:
                counts, total_us, lows, highs = [], 0.0, [], []
                for r in runs:
                    m = r["metrics"]
                    n_calls = sum(m.get(f"syscalls.{c}.{call}.count", 0.0) for c in CLASSES)
                    counts.append(n_calls)
                    for c in CLASSES:
                        p = f"syscalls.{c}.{call}"
                        if m.get(f"{p}.count"):
                            total_us += m[f"{p}.count"] * m.get(f"{p}.mean_us", 0.0)
                            lows.append(m.get(f"{p}.min_us", math.nan))
                            highs.append(m.get(f"{p}.max_us", math.nan))
                whole = sum(counts)
                if not whole:
                    continue
                sync_rows.append([f"{call}()", name(values), pivot.cell(counts),
                                  total_us / whole if whole else None, min(lows) if lows else None,
                                  max(highs) if highs else None, len(runs)])
        class_rows: list[list[Any]] = []
        for values, runs in layouts:
            for c in CLASSES:
                row = [pivot.center_of([r["metrics"].get(f"syscalls.{c}.{col}", 0.0) for r in runs])
                       for col in COLUMNS]
                if any(row):
                    class_rows.append([name(values), c, *row, len(runs)])
        checks = []
        for r in traced:
            m = r["metrics"]
            ratio = m.get("syscalls.wal_sync_ratio")
            if ratio is not None and abs(ratio - 1.0) > 0.05:
                checks.append(f"run {r['id']}: {m.get('syscalls.wal_syncs', 0):.0f} WAL syncs traced, "
                              f"{m.get('syscalls.pg.pg_stat_wal.wal_sync', 0):.0f} in pg_stat_wal (ratio {ratio:.3f})")
        cpu = [(r["metrics"]["syscalls.tracer_cpu_s"], r["seconds"]) for r in traced
               if r["metrics"].get("syscalls.tracer_cpu_s") is not None and r.get("seconds")]
        blocks: list[Block] = [
            Text("System calls of the server's process tree, traced with " + " and ".join(sorted(mechanisms))
                 + (" (strace stops every traced call: its figures include its own large overhead)"
                    if "strace" in mechanisms else "") + ". File classes: wal = pg_wal, base = base/, "
                 "global = global/ (PostgreSQL); redo = ib_logfile*, undo = undo*, binlog = the binary log, data "
                 "= ibdata* and the databases' files (MariaDB); other = everything else (sockets, pipes, other "
                 "files)." + where),
            Table(["call", layout_header, "Num", "Avg (us)", "Min (us)", "Max (us)", "runs"], sync_rows,
                  caption="fsync and fdatasync per storage layout, as the seed's table: Num the calls per run "
                  "(mean over the runs, with its interval from 3 runs), Avg the mean time of every call of those "
                  "runs, Min and Max the extremes over them (us, every call recorded)."),
            Table([layout_header, "class", *COLUMNS, "runs"], class_rows,
                  caption="Calls per file class and storage layout, the mean per run (reads = read + pread64 + "
                  "preadv; writes = write + pwrite64 + pwritev), as the seed's table of calls by file class."),
        ]
        if cpu:
            share = max(c / sec for c, sec in cpu)
            blocks.append(Text(f"The tracer used at most {100 * share:.1f}% of one core in any run."))
        if checks:
            blocks.append(Text("WAL syncs traced against pg_stat_wal, where they differ by more than 5%: "
                               + "; ".join(checks) + "."))
        lines: dict[str, list[float]] = {}
        for values, runs in layouts:
            for r in sorted(runs, key=lambda r: r["id"]):
                reader = r["read_series"]
                if reader is None:
                    continue
                pts = sorted((row["t"], row["value"]) for row in reader(r["id"], "syscalls")
                             if row["name"] in ("call.wal.fsync", "call.wal.fdatasync", "call.redo.fsync",
                                                "call.redo.fdatasync"))
                if pts:
                    lines[f"{name(values)} (run {r['id']})"] = [v for _, v in pts]
                    break
        if lines:
            blocks.append(SectionFigure("syscalls-successive", _successive_figure(lines),
                                        "The time of each successive WAL sync (fsync and fdatasync on pg_wal, or "
                                        "on InnoDB's redo log), a "
                                        "line per storage layout, in the order the calls were made (the seed's "
                                        "figure); for each layout its first run above."))
        return [Section("System calls by storage layout", blocks, headline=True)]


def _successive_figure(lines: dict[str, list[float]]) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 3.4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.grid(True, color="#e3e6ec", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for label, values in lines.items():
        ax.plot(range(1, len(values) + 1), values, linewidth=0.8, marker=".", markersize=2, label=label)
    ax.set_xlabel("WAL sync call number")
    ax.set_ylabel("duration (us)")
    ax.set_yscale("log")
    fig.legend(loc="outside right upper", fontsize=7, frameon=False)
    return fig


def _key(text: str) -> tuple[int, int]:
    a, b = text.split(",")
    return int(a), int(b)
