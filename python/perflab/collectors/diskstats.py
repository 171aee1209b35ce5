"""diskstats: per-device I/O from /proc/diskstats, computed as `iostat -x` does.

Devices: every whole disk (a block device in /sys/block backed by hardware,
or a device-mapper / md device), plus the devices (and their partitions)
holding the target's data and WAL directories; or exactly the `devices` the
experiment names. Figures per device and interval, following sysstat 12's
iostat.c (compute_ext_disk_stats) over the measured monotonic interval:

- reads_per_s, writes_per_s, read_kib_per_s, write_kib_per_s (sectors are
  512 bytes in /proc/diskstats whatever the device's sector size);
- rrqm_per_s, wrqm_per_s: requests merged;
- r_await_ms, w_await_ms: time reading (writing) / reads (writes) completed;
  await_ms over reads, writes and discards together (iostat's older "await");
  f_per_s, f_await_ms for flush requests (kernel 5.5+);
- aqu_sz: weighted time in queue / elapsed time;
- util_pct: time the device had I/O in flight / elapsed time (on devices that
  serve requests in parallel, as SSDs do, 100% does not mean saturated).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from perflab.collectors.base import (
    CollectorContext,
    CollectorSettings,
    CollectorUnavailable,
    SamplingCollector,
    TelemetryPanel,
)
from perflab.collectors.procfs import read_text, require_readable
from perflab.endpoints import Capability
from perflab.model import Event, RunResult

DISKSTATS = "/proc/diskstats"
SECTOR_BYTES = 512
# /proc/diskstats fields after "major minor name" (Documentation/admin-guide/iostats.rst)
FIELDS = (
    "rd_ios", "rd_merges", "rd_sectors", "rd_ticks_ms",
    "wr_ios", "wr_merges", "wr_sectors", "wr_ticks_ms",
    "in_flight", "io_ticks_ms", "time_in_queue_ms",
    "dc_ios", "dc_merges", "dc_sectors", "dc_ticks_ms",
    "fl_ios", "fl_ticks_ms",
)
VIRTUAL_PREFIXES = ("loop", "ram", "zram", "nbd")


class DiskstatsSettings(CollectorSettings):
    devices: list[str] | None = Field(
        default=None, description="device names as in /proc/diskstats (default: whole disks + data/WAL devices)"
    )


def parse_diskstats(text: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 14:
            continue
        out[fields[2]] = dict(zip(FIELDS, map(int, fields[3:]), strict=False))
    return out


def device_figures(before: dict[str, int], after: dict[str, int], dt_s: float) -> dict[str, float]:
    """iostat -x figures for one device between two readings dt_s apart."""

    def d(field: str) -> int:
        return after.get(field, 0) - before.get(field, 0)

    elapsed_ms = dt_s * 1000.0
    rd, wr, dc, fl = d("rd_ios"), d("wr_ios"), d("dc_ios"), d("fl_ios")
    out = {
        "reads_per_s": rd / dt_s,
        "writes_per_s": wr / dt_s,
        "read_kib_per_s": d("rd_sectors") * SECTOR_BYTES / 1024 / dt_s,
        "write_kib_per_s": d("wr_sectors") * SECTOR_BYTES / 1024 / dt_s,
        "rrqm_per_s": d("rd_merges") / dt_s,
        "wrqm_per_s": d("wr_merges") / dt_s,
        "f_per_s": fl / dt_s,
        "aqu_sz": d("time_in_queue_ms") / elapsed_ms,
        "util_pct": min(100.0, 100.0 * d("io_ticks_ms") / elapsed_ms),
    }
    # an average over no requests is undefined: leave a gap rather than a 0
    if rd:
        out["r_await_ms"] = d("rd_ticks_ms") / rd
    if wr:
        out["w_await_ms"] = d("wr_ticks_ms") / wr
    if rd + wr + dc:
        out["await_ms"] = (d("rd_ticks_ms") + d("wr_ticks_ms") + d("dc_ticks_ms")) / (rd + wr + dc)
    if fl:
        out["f_await_ms"] = d("fl_ticks_ms") / fl
    return out


def whole_disks(sys_block: Path = Path("/sys/block")) -> list[str]:
    """Disks backed by hardware (they have a `device` link) and device-mapper
    or md devices; not loop, ram or zram devices."""
    names = []
    for entry in sorted(sys_block.iterdir()) if sys_block.is_dir() else []:
        name = entry.name
        if name.startswith(VIRTUAL_PREFIXES):
            continue
        if (entry / "device").exists() or name.startswith(("dm-", "md")):
            names.append(name)
    return names


def _name_of_devno(major: int, minor: int) -> str | None:
    try:
        uevent = read_text(f"/sys/dev/block/{major}:{minor}/uevent")
    except OSError:
        return None
    for line in uevent.splitlines():
        if line.startswith("DEVNAME="):
            return line.split("=", 1)[1]
    return None


def _mount_source(path: Path) -> str | None:
    """The source device of the mount holding `path` (for file systems whose
    st_dev is not a block device, as btrfs)."""
    best, source = "", None
    try:
        text = read_text("/proc/self/mountinfo")
    except OSError:
        return None
    target = str(path.resolve())
    for line in text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        mount_point = fields[4]
        post = line.split(" - ", 1)[1].split()
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best) and len(post) >= 2:
            best, source = mount_point, post[1]
    return source


def devices_of_path(path: Path) -> list[str]:
    """The block device holding `path` and, for a partition, its disk."""
    try:
        st_dev = os.stat(path).st_dev
    except OSError:
        return []
    name = _name_of_devno(os.major(st_dev), os.minor(st_dev))
    if name is None:
        source = _mount_source(path)
        if source and source.startswith("/dev/"):
            try:
                rdev = os.stat(source).st_rdev
            except OSError:
                return []
            name = _name_of_devno(os.major(rdev), os.minor(rdev))
    if name is None:
        return []
    names = [name]
    sys_dev = Path("/sys/class/block") / name
    if (sys_dev / "partition").exists():
        parent = sys_dev.resolve().parent.name
        names.append(parent)
    return names


@dataclass
class _Reading:
    t_ns: int
    devices: dict[str, dict[str, int]]


def _missing_devices(devices: list[str] | None, present: dict[str, Any]) -> str | None:
    missing = [d for d in devices or [] if d not in present]
    if not missing:
        return None
    return f"no device {', '.join(missing)} in {DISKSTATS} (devices here: {', '.join(sorted(present))})"


class DiskstatsCollector(SamplingCollector):
    Settings = DiskstatsSettings
    settings: DiskstatsSettings
    default_on = True
    panels = (
        TelemetryPanel("disk utilisation (time with I/O in flight)", "%util", name_like="%.util_pct",
                       label_of=lambda name: name.rsplit(".", 1)[0]),
    )

    def __init__(self, name: str, settings: DiskstatsSettings) -> None:
        super().__init__(name, settings)
        self.devices: list[str] = []
        self.roles: dict[str, list[str]] = {}  # "data"/"wal" -> devices holding it
        self._first: _Reading | None = None
        self._last: _Reading | None = None
        self._notes: list[str] = []

    def _read(self) -> _Reading:
        stats = parse_diskstats(read_text(DISKSTATS))
        return _Reading(time.monotonic_ns(), {d: stats[d] for d in self.devices if d in stats})

    @classmethod
    def preflight(cls, settings: DiskstatsSettings, provided: frozenset[Capability]) -> str | None:
        try:
            require_readable(DISKSTATS)
        except CollectorUnavailable as exc:
            return str(exc)
        return _missing_devices(settings.devices, parse_diskstats(read_text(DISKSTATS)))

    def open(self, ctx: CollectorContext) -> None:
        require_readable(DISKSTATS)
        present = parse_diskstats(read_text(DISKSTATS))
        self._notes = []
        self.roles = {}
        if self.settings.devices is not None:
            missing = _missing_devices(self.settings.devices, present)
            if missing:
                raise CollectorUnavailable(missing)
            self.devices = list(self.settings.devices)
        else:
            wanted = whole_disks()
            paths = ctx.target.data_paths() if ctx.target is not None else {}
            for role, path in paths.items():
                held_by = [d for d in devices_of_path(Path(path)) if d in present]
                if held_by:
                    self.roles[role] = held_by
                    wanted += held_by
                else:
                    self._notes.append(f"the {role} directory {path} is on no block device found in {DISKSTATS}")
            self.devices = [d for d in dict.fromkeys(wanted) if d in present]
            if not self.devices:
                raise CollectorUnavailable(f"no disk found in {DISKSTATS} (only virtual devices)")
        for role, held_by in self.roles.items():
            self._notes.append(f"{role} directory on {', '.join(held_by)}")
        self._first = self._last = None

    def sample(self) -> dict[str, float]:
        now = self._read()
        values: dict[str, float] = {}
        if self._last is not None:
            dt_s = (now.t_ns - self._last.t_ns) / 1e9
            if dt_s > 0:
                for dev, after in now.devices.items():
                    before = self._last.devices.get(dev)
                    if before is not None:
                        for key, value in device_figures(before, after, dt_s).items():
                            values[f"{dev}.{key}"] = value
        else:
            self._first = now
        self._last = now
        return values

    def summary(self) -> RunResult:
        """Per device over the whole run (first sample to the last), and the same
        under the role names `data` and `wal` for the devices holding them, so
        runs that move the WAL compare by role."""
        result = RunResult()
        for note in self._notes:
            result.events.append(Event(0.0, "collector-info", f"{self.name}: {note}"))
        if self._first is None or self._last is None:
            return result
        end = self._last
        dt_s = (end.t_ns - self._first.t_ns) / 1e9
        if dt_s <= 0:
            return result
        whole = {
            dev: device_figures(self._first.devices[dev], after, dt_s)
            for dev, after in end.devices.items()
            if dev in self._first.devices
        }
        labels = [(dev, dev) for dev in whole]
        # the role's figure is its first device: the partition when it is on one
        labels += [(role, held_by[0]) for role, held_by in self.roles.items() if held_by[0] in whole]
        for label, dev in labels:
            f = whole[dev]
            p = f"{self.name}.{label}"
            result.add_metric(f"{p}.read_kib_per_s", f["read_kib_per_s"], "KiB/s", f"{dev}: mean read rate")
            result.add_metric(f"{p}.write_kib_per_s", f["write_kib_per_s"], "KiB/s", f"{dev}: mean write rate")
            result.add_metric(f"{p}.reads_per_s", f["reads_per_s"], "1/s", f"{dev}: reads completed per second")
            result.add_metric(f"{p}.writes_per_s", f["writes_per_s"], "1/s", f"{dev}: writes completed per second")
            result.add_metric(f"{p}.util_pct", f["util_pct"], "%", f"{dev}: time with I/O in flight",
                              higher_is_better=False)
            result.add_metric(f"{p}.aqu_sz", f["aqu_sz"], "requests", f"{dev}: mean queue size")
            if "await_ms" in f:
                result.add_metric(f"{p}.await_ms", f["await_ms"], "ms", f"{dev}: mean time per request",
                                  higher_is_better=False)
            if "f_await_ms" in f:
                result.add_metric(f"{p}.f_await_ms", f["f_await_ms"], "ms", f"{dev}: mean time per flush",
                                  higher_is_better=False)
        return result
