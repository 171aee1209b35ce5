"""The raw characterisation of each storage layout, as the CITI storage
study's Bonnie table: fio on the filesystem each of the server's roles (data,
WAL) lives on, once per layout, before the run's workload starts.

    [collect]
    storage = {}          # or { size = "64MB", runtime = "3s" }

Four jobs per role, one fio run of them one after the other (stonewall, as
a job file of them runs) on one file in a directory perflab makes on that
filesystem (perflab-fio-<token>, removed afterwards), while the server is
idle (the collector starts before the workload's run):

- sequential write, 1 MiB blocks, fsync at the end (end_fsync): MB/s;
- sequential read of that file, 1 MiB blocks, its page cache dropped first
  (fio's invalidate: posix_fadvise DONTNEED, no host change): MB/s;
- random 8 KiB writes over the file for `runtime`, fsync at the end
  (counted): IOPS. Without the fsync the job left up to `size` of dirty
  pages in that same file, and the fdatasync job's first call wrote them
  all back, so its mean and p99 depended on how much writeback had
  happened in between (benchmarks/fio_vs_plain.py);
- 8 KiB sequential writes each followed by fdatasync() for `runtime`, as
  the WAL does: the fdatasync latency, mean and p99 (fio's "sync" latency).

A layout is what the target's description says of the role's filesystem
(`scratch_fs`, without its paths): the same layout in a later run of this
process reuses the figures (an event says so), as the study measured each
device once. Metrics: storage.<role>.seq_write_MBps, seq_read_MBps,
randwrite_8k_iops, fdatasync_8k_mean_us, fdatasync_8k_p99_us. A sequential
job that took under SHORT_MS (200 ms: at 64 MB on a fast local disk, 30 ms)
is said by a storage-probe-short event: fio's figure for so short a job moves
by 1.6x-8.6x between plain fio's own runs. Without fio
on PATH the collector is skipped (Debian: fio). Roles without a scratch
filesystem of perflab's are probed in their directory (data_dir) when the
target names it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from perflab.analysis.pivot import fmt_num
from perflab.collectors.base import (
    Collector,
    CollectorContext,
    CollectorOptions,
    CollectorUnavailable,
)
from perflab.model import SETUP_IGNORES, Event, RunResult
from perflab.section import RunGroup, Section, Table, Text
from perflab.units import Duration, Size

FIGURES = (("seq_write_MBps", "seq write MB/s", "MB/s", True), ("seq_read_MBps", "seq read MB/s", "MB/s", True),
           ("randwrite_8k_iops", "8k random write IOPS", "IOPS", True),
           ("fdatasync_8k_mean_us", "fdatasync after 8k write, mean us", "us", False),
           ("fdatasync_8k_p99_us", "fdatasync after 8k write, p99 us", "us", False))
# A sequential job shorter than this is flagged. Measured (benchmarks/README.md, fio_vs_plain.py): at
# 64 MB on a fast local disk the jobs took 27-49 ms, the probe's figures were 11-28% off plain fio's
# and plain fio's own runs spread 1.6x (write) to 8.6x (read); at 512 MB (about 200-400 ms) and on
# sshfs at 64 MB (about 560 ms) every figure was within 10% of plain fio's.
SHORT_MS = 200.0
# The layouts probed by this process: layout key -> figures.
_PROBED: dict[str, dict[str, float]] = {}


class StorageSettings(CollectorOptions):  # no interval: fio runs once per layout, before the run
    # The file each job writes and reads.
    size: Size = Field(default=64 * 2**20, ge=2**20)
    # How long the random-write and fdatasync jobs run.
    runtime: Duration = Field(default=3.0, gt=0, le=600)


def _jobs(s: StorageSettings) -> list[tuple[str, list[str]]]:
    runtime = f"{max(1, round(s.runtime))}s"
    return [
        ("seq_write", ["--rw=write", "--bs=1M", f"--size={s.size}", "--end_fsync=1"]),
        ("seq_read", ["--rw=read", "--bs=1M", f"--size={s.size}", "--invalidate=1"]),
        ("randwrite", ["--rw=randwrite", "--bs=8k", f"--size={s.size}", "--time_based", f"--runtime={runtime}",
                       "--end_fsync=1"]),
        ("fdatasync", ["--rw=write", "--bs=8k", f"--size={s.size}", "--fdatasync=1", "--time_based",
                       f"--runtime={runtime}"]),
    ]


def run_fio(directory: Path, settings: StorageSettings) -> dict[str, float]:
    """The four jobs in a directory of perflab's under `directory`; the figures."""
    work = directory / f"perflab-fio-{secrets.token_hex(4)}"
    work.mkdir(mode=0o700)
    out: dict[str, float] = {}
    try:
        # one fio, the jobs one after the other (stonewall), as a job file of them runs
        argv = ["fio", "--output-format=json", f"--filename={work / 'perflab-fio.dat'}", "--ioengine=psync"]
        for name, args in _jobs(settings):
            argv += [f"--name={name}", "--stonewall", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"fio failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
        jobs = {j["jobname"]: j for j in json.loads(proc.stdout[proc.stdout.index("{"):])["jobs"]}
        out["seq_write_MBps"] = jobs["seq_write"]["write"]["bw_bytes"] / 1e6
        out["seq_read_MBps"] = jobs["seq_read"]["read"]["bw_bytes"] / 1e6
        # how long each sequential job took (fio's runtime, ms): a figure timed over a few ms is not one
        out["seq_write_ms"] = float(jobs["seq_write"]["write"]["runtime"])
        out["seq_read_ms"] = float(jobs["seq_read"]["read"]["runtime"])
        out["randwrite_8k_iops"] = jobs["randwrite"]["write"]["iops"]
        lat = jobs["fdatasync"]["sync"]["lat_ns"]
        out["fdatasync_8k_mean_us"] = lat["mean"] / 1e3
        pct = lat.get("percentile") or {}
        p99 = next((v for k, v in pct.items() if k.startswith("99.000")), None)
        if p99 is not None:
            out["fdatasync_8k_p99_us"] = p99 / 1e3
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _layout_key(role: str, fs: dict[str, Any]) -> str:
    ignored = set(fs.get(SETUP_IGNORES, [])) | {SETUP_IGNORES, "mounted", "mounted_options"}
    return json.dumps([role, {k: v for k, v in fs.items() if k not in ignored}], sort_keys=True, default=str)


class StorageCollector(Collector):
    """fio on each role's filesystem, once per layout, before the run."""

    Settings: ClassVar[type[CollectorOptions]] = StorageSettings

    def __init__(self, name: str, settings: CollectorOptions) -> None:
        super().__init__(name, settings)
        self.result = RunResult()

    @classmethod
    def preflight(cls, settings: Any, provided: Any) -> str | None:
        return None if shutil.which("fio") else "fio is not installed (Debian: fio)"

    def start(self, ctx: CollectorContext) -> None:
        if shutil.which("fio") is None:
            raise CollectorUnavailable("fio is not installed (Debian: fio)")
        described = ctx.target.describe() if ctx.target is not None else {}
        places: dict[str, tuple[Path, dict[str, Any]]] = {}
        for role, fs in (described.get("scratch_fs") or {}).items():
            if fs.get("mountpoint"):
                places[role] = (Path(fs["mountpoint"]), fs)
        data_dir = described.get("data_dir")
        if "data" not in places and isinstance(data_dir, str) and os.path.isdir(data_dir):
            places["data"] = (Path(data_dir).parent, {"directory": "local"})
        assert isinstance(self.settings, StorageSettings)
        for role, (where, fs) in places.items():
            key = _layout_key(role, fs) + json.dumps([self.settings.size, self.settings.runtime])
            again = key in _PROBED
            if not again:
                try:
                    _PROBED[key] = run_fio(where, self.settings)
                except (OSError, RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as exc:
                    self.result.events.append(Event(0.0, "storage-probe", f"{role}: {exc}"))
                    continue
            for name, label, unit, higher in FIGURES:
                if name in _PROBED[key]:
                    self.result.add_metric(f"storage.{role}.{name}", _PROBED[key][name], unit,
                                           f"fio on the {role}'s filesystem before the run: {label}", higher)
            self.result.events.append(Event(0.0, "storage-probe", f"{role}: fio on {fs.get('type', 'its directory')}"
                                            + (" (this layout's figures from an earlier run)" if again else "")))
            short = [f"{what} {_PROBED[key][f'{what}_ms']:.0f} ms" for what in ("seq_write", "seq_read")
                     if _PROBED[key].get(f"{what}_ms", SHORT_MS) < SHORT_MS]
            if short and not again:
                self.result.events.append(Event(0.0, "storage-probe-short", (
                    f"{role}: the sequential jobs took {', '.join(short)}: a figure timed over less than "
                    f"{SHORT_MS:.0f} ms varies widely between runs (benchmarks/fio_vs_plain.py); give [collect] "
                    f"storage a size that each job takes {SHORT_MS:.0f} ms or more to write, such as "
                    f"{{ size = \"512MB\" }} where the filesystem holds it (the study's Bonnie used twice the memory)")))

    def stop(self) -> RunResult:
        return self.result

    @classmethod
    def report_sections(cls, groups: list[RunGroup]) -> list[Section]:
        rows = []
        for g in groups:
            for role in ("data", "wal"):
                got = [[r["metrics"].get(f"storage.{role}.{n}") for n, *_ in FIGURES] for r in g.runs]
                got = [v for v in got if any(x is not None for x in v)]
                if got:
                    first = got[0]
                    rows.append([g.label, role, *("" if v is None else fmt_num(v) for v in first), len(g.runs)])
        if not rows:
            return []
        return [Section("Raw storage per layout (fio)", [
            Text("fio on the filesystem of each role, once per layout before its runs, the server idle: sequential "
                 "write (1 MiB, fsync at the end) and read (page cache dropped), random 8 KiB writes (fsync at the end), and the "
                 "latency of fdatasync() after each 8 KiB write (as the WAL does)."),
            Table(["layout", "role", *(label for _, label, _, _ in FIGURES), "runs"], rows,
                  "Raw storage per layout (fio), beside the workload's figures"),
        ])]
