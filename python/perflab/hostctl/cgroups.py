"""A managed server's whole process tree in a cgroup with limits
([target.resources]): a cpuset, a CPU quota, a memory limit (and, on cgroup
v2, a throttle point), I/O bandwidth per block device.

    [target.resources]
    cpus = "0-1"                     # cpuset list: "0", "0-3", "0-1,6"
    cpu_quota = 1.5                  # cores' worth of CPU time per 100 ms period
    memory = "2GB"                   # hard limit (v1 memory.limit_in_bytes, v2 memory.max)
    memory_high = "1GB"              # throttle point; cgroup v2 only (v2 memory.high)
    io_read_bps = { vda = "50MB" }   # bytes/s per whole block device named in /sys/block
    io_write_bps = { vda = "20MB" }

The I/O limits are tables only (device name -> bytes per second): the device
is always named, never implied. On cgroup v1, blkio throttling applies to
reads and direct I/O, not to buffered writeback (the flusher writes those
pages outside the cgroup), so io_write_bps there limits O_DIRECT writes only;
v2's io.max throttles writeback too.

Each controller is found on its own (/proc/self/mountinfo): cgroup v2 when a
cgroup2 mount lists it in cgroup.controllers, else the v1 hierarchy mounted
with it. Where the cgroup is made:

- v2: directly under the cgroup2 mount (the root, or a container's namespace
  root), after enabling the controller in its cgroup.subtree_control if it is
  not yet (a cgroup below perflab's own one cannot have controllers while
  perflab's process is in it: v2's rule of no internal processes). Enabling a
  controller there is not undone: it limits nothing by itself, and taking it
  away could strip the limits of a cgroup someone else made since.
- v1: under perflab's own cgroup of that hierarchy (/proc/self/cgroup), so
  the limits of whoever runs perflab (a container, a systemd service) still
  hold on top of these, and its accounting still sees the server.

`ServerCgroup.create` journals the directories it makes (perflab.guardian)
before making them; `remove` (or the guardian's `undo_cgroup` after a
SIGKILL of perflab) empties and removes them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shlex
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from perflab.guardian import journal, register_undo
from perflab.hostctl.cpulist import format_cpu_list, online_cpus, parse_cpu_list
from perflab.model import not_setup
from perflab.settings_model import StrictModel
from perflab.units import Size, format_size

MOUNTINFO = Path("/proc/self/mountinfo")
SYS_BLOCK = Path("/sys/block")

# The CPU quota's period: 100 ms, the kernel's default.
CPU_PERIOD_US = 100_000
# The kernel refuses a quota under 1 ms per period.
MIN_CPU_QUOTA = 0.01

# How long `remove(kill=True)` and the guardian's undo wait for killed tasks
# to leave before removing the directories (the guardian has 5 s in all, and
# a server's own undo runs first).
KILL_WAIT_S = 1.5

_NAME = re.compile(r"^perflab[A-Za-z0-9_.-]*$")
_DEVICE = re.compile(r"^[A-Za-z0-9_.!-]+$")

# A logical controller and its names: (v2 controller, v1 hierarchy's controller).
CONTROLLERS: dict[str, tuple[str, str]] = {
    "cpuset": ("cpuset", "cpuset"),
    "cpu": ("cpu", "cpu"),
    "memory": ("memory", "memory"),
    "io": ("io", "blkio"),
}
# Which controller each setting needs.
FIELD_CONTROLLER = {
    "cpus": "cpuset",
    "cpu_quota": "cpu",
    "memory": "memory",
    "memory_high": "memory",
    "io_read_bps": "io",
    "io_write_bps": "io",
}
KEY = "target.resources"


class CgroupError(RuntimeError):
    """The kernel did not take a limit as written (a failed write, or a read
    back that differs). What was made has been removed again."""


# --------------------------------------------------------------------------
# settings


class ResourceSettings(StrictModel):
    """[target.resources]: limits on the managed server's whole process tree.
    Every field is optional; only the controllers a given field needs are used."""

    # cpuset list of the CPUs the server may run on: "0", "0-3", "0-1,6".
    cpus: str | None = None
    # CPU time in cores' worth per 100 ms period: 1.5 = 150 ms per 100 ms.
    cpu_quota: float | None = Field(default=None, ge=MIN_CPU_QUOTA)
    # Hard memory limit (the OOM killer acts past it), e.g. "2GB".
    memory: Size | None = Field(default=None, gt=0)
    # Memory throttle point (reclaim pressure past it), cgroup v2 only.
    memory_high: Size | None = Field(default=None, gt=0)
    # Bytes per second per whole block device (a name in /sys/block): { vda = "50MB" }.
    io_read_bps: dict[str, Size] | None = None
    io_write_bps: dict[str, Size] | None = None

    @field_validator("cpus")
    @classmethod
    def _cpu_list(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            cpus = parse_cpu_list(value)
        except ValueError:
            cpus = set()
        if not cpus:
            raise ValueError(f'got {value!r}; allowed: a CPU list such as "0", "0-3" or "0-1,6" '
                             "(numbers and ascending ranges, comma-separated)")
        return value

    @field_validator("io_read_bps", "io_write_bps")
    @classmethod
    def _devices(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        for device, rate in (value or {}).items():
            if not _DEVICE.match(device):
                raise ValueError(f"got device {device!r}; allowed: a block device name as in /sys/block (vda, nvme0n1)")
            if rate <= 0:
                raise ValueError(f"got {rate} bytes/s for {device}; allowed: a size above 0 per second (\"50MB\")")
        return value

    @model_validator(mode="after")
    def _high_below_max(self) -> ResourceSettings:
        if self.memory is not None and self.memory_high is not None and self.memory_high > self.memory:
            raise ValueError(f"memory_high ({format_size(self.memory_high)}) is above memory "
                             f"({format_size(self.memory)}), so it would never throttle; allowed: "
                             "memory_high at most memory")
        return self

    def controllers(self) -> list[str]:
        """The logical controllers these settings need, in a fixed order."""
        used = {FIELD_CONTROLLER[f] for f in FIELD_CONTROLLER if getattr(self, f) is not None}
        return [c for c in CONTROLLERS if c in used]


# --------------------------------------------------------------------------
# where the controllers are


@dataclass(frozen=True)
class Hierarchy:
    """Where one logical controller is mounted."""

    controller: str  # logical: cpuset, cpu, memory, io
    version: int  # 1 or 2
    mountpoint: Path
    mount_root: str  # the mounted cgroup's path in its hierarchy (mountinfo's root field)

    @property
    def kernel_name(self) -> str:
        """The controller's name as this version spells it (v1 io is blkio)."""
        v2_name, v1_name = CONTROLLERS[self.controller]
        return v2_name if self.version == 2 else v1_name


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _v2_controllers(mountpoint: Path) -> set[str]:
    try:
        return set((mountpoint / "cgroup.controllers").read_text().split())
    except OSError:
        return set()


def find_hierarchies(mountinfo: str | None = None,
                     v2_controllers: Callable[[Path], set[str]] = _v2_controllers) -> dict[str, Hierarchy]:
    """Logical controller -> where it is mounted, for those this machine has:
    cgroup v2 when a cgroup2 mount has it in cgroup.controllers, else the v1
    hierarchy mounted with it. `mountinfo` is /proc/self/mountinfo's text
    (read when None); `v2_controllers` reads a cgroup2 mount's controllers."""
    if mountinfo is None:
        mountinfo = MOUNTINFO.read_text()
    v2_mounts: list[tuple[Path, str]] = []
    v1_mounts: list[tuple[Path, str, set[str]]] = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, mountpoint = _unescape(fields[3]), Path(_unescape(fields[4]))
        if tail[0] == "cgroup2":
            v2_mounts.append((mountpoint, root))
        elif tail[0] == "cgroup":
            v1_mounts.append((mountpoint, root, set(tail[2].split(","))))
    found: dict[str, Hierarchy] = {}
    for controller, (v2_name, v1_name) in CONTROLLERS.items():
        for mountpoint, root in v2_mounts:
            if v2_name in v2_controllers(mountpoint):
                found[controller] = Hierarchy(controller, 2, mountpoint, root)
                break
        else:
            for mountpoint, root, options in v1_mounts:
                if v1_name in options:
                    found[controller] = Hierarchy(controller, 1, mountpoint, root)
                    break
    return found


def cgroup_of(pid: int | str) -> dict[str, str]:
    """/proc/PID/cgroup as controller -> path: v1 lines give one key per
    controller of the hierarchy ("cpu", "cpuacct", "name=systemd"), v2's
    "0::/path" gives the key ""."""
    out: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            out[controller] = path
    return out


def parent_dir(hierarchy: Hierarchy) -> Path:
    """The directory perflab makes its cgroup in (see the module's doc)."""
    if hierarchy.version == 2:
        return hierarchy.mountpoint
    own = cgroup_of("self").get(hierarchy.kernel_name, "/")
    root = hierarchy.mount_root.rstrip("/")
    if root and not (own == root or own.startswith(root + "/")):
        return hierarchy.mountpoint  # our cgroup is not visible through this mount
    relative = own[len(root):].strip("/")
    return hierarchy.mountpoint / relative if relative else hierarchy.mountpoint


def block_devices() -> list[str]:
    return sorted(p.name for p in SYS_BLOCK.iterdir())


def device_number(device: str) -> str:
    """"MAJ:MIN" of a whole block device named in /sys/block."""
    return (SYS_BLOCK / device / "dev").read_text().strip()


# --------------------------------------------------------------------------
# preflight


def resource_problems(settings: ResourceSettings) -> list[tuple[str, str]]:
    """What would stop `ServerCgroup.create` with these settings, found
    without changing anything: (dotted path, what was given / what is allowed
    / the fix)."""
    problems: list[tuple[str, str]] = []
    try:
        hierarchies = find_hierarchies()
    except OSError as e:
        return [(KEY, f"cannot read {MOUNTINFO} ({e.strerror}); allowed: a Linux host with cgroups mounted")]
    used = [f for f in FIELD_CONTROLLER if getattr(settings, f) is not None]
    checked: set[Path] = set()
    for field in used:
        key = f"{KEY}.{field}"
        controller = FIELD_CONTROLLER[field]
        hierarchy = hierarchies.get(controller)
        v2_name, v1_name = CONTROLLERS[controller]
        if hierarchy is None:
            problems.append((key, f"needs the {v2_name} cgroup controller, which this machine has neither as "
                             f"cgroup v2 (no cgroup2 mount lists {v2_name} in cgroup.controllers) nor as a "
                             f"cgroup v1 hierarchy ({v1_name}); fix: mount it (e.g. `mount -t cgroup -o "
                             f"{v1_name} cgroup /sys/fs/cgroup/{v1_name}`) or leave {field} out"))
            continue
        if field == "memory_high" and hierarchy.version == 1:
            problems.append((key, f"the memory controller here is cgroup v1 ({hierarchy.mountpoint}), which has "
                             "no memory.high (a throttle point exists in cgroup v2 only); allowed: memory "
                             "(the hard limit) on v1; fix: use memory instead, or boot with cgroup v2 "
                             "(systemd.unified_cgroup_hierarchy=1)"))
            continue
        parent = parent_dir(hierarchy)
        if parent in checked:
            continue
        checked.add(parent)
        if not os.access(parent, os.W_OK | os.X_OK):
            problems.append((key, f"perflab makes its cgroup in {parent} (cgroup v{hierarchy.version} "
                             f"{hierarchy.kernel_name}), which this user (uid {os.geteuid()}) cannot write; "
                             "fix: run perflab as root, or delegate that cgroup to this user"))
            continue
        if hierarchy.version == 2:
            problems += _v2_enable_problems(key, hierarchy, parent)
    if settings.cpus is not None and "cpuset" in hierarchies:
        problems += _cpus_problems(settings.cpus, hierarchies["cpuset"])
    if settings.cpu_quota is not None:
        online = online_cpus()
        if settings.cpu_quota > len(online):
            problems.append((f"{KEY}.cpu_quota", f"got {settings.cpu_quota:g} cores' worth of CPU time; allowed: "
                             f"at most the {len(online)} online CPUs ({format_cpu_list(online)}), or the quota "
                             "never binds; fix: lower cpu_quota or leave it out"))
    for field in ("io_read_bps", "io_write_bps"):
        for device in getattr(settings, field) or {}:
            if not (SYS_BLOCK / device / "dev").is_file():
                problems.append((f"{KEY}.{field}.{device}", f"got device {device!r}, which is not in {SYS_BLOCK}; "
                                 f"allowed: a whole block device of this machine ({', '.join(block_devices())}); "
                                 "fix: name one of those (a partition's limit goes on its disk)"))
    return problems


def _cpus_problems(cpus_text: str, hierarchy: Hierarchy) -> list[tuple[str, str]]:
    key = f"{KEY}.cpus"
    cpus = parse_cpu_list(cpus_text)
    online = online_cpus()
    if not cpus <= online:
        return [(key, f"got {cpus_text!r}, which names CPU(s) {format_cpu_list(cpus - online)} that are not "
                 f"online; allowed: CPUs of {format_cpu_list(online)} ({len(online)} online); "
                 "fix: choose CPUs from that list")]
    parent = parent_dir(hierarchy)
    name = "cpuset.cpus.effective" if hierarchy.version == 2 else "cpuset.effective_cpus"
    try:
        allowed = parse_cpu_list((parent / name).read_text())
    except (OSError, ValueError):
        return []
    if allowed and not cpus <= allowed:
        return [(key, f"got {cpus_text!r}, but perflab's own cpuset ({parent}) allows only "
                 f"{format_cpu_list(allowed)}; allowed: CPUs of {format_cpu_list(allowed)}; fix: choose CPUs "
                 "from that list, or run perflab with a wider cpuset")]
    return []


def _v2_enable_problems(key: str, hierarchy: Hierarchy, parent: Path) -> list[tuple[str, str]]:
    """v2: the controller must be (or become) enabled in the parent's
    subtree_control, which a non-root cgroup with processes in it refuses."""
    try:
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        is_root = not (parent / "cgroup.type").exists()  # the root cgroup has no cgroup.type
        busy = bool((parent / "cgroup.procs").read_text().split())
    except OSError as e:
        return [(key, f"cannot read {parent}'s cgroup files ({e.strerror}); fix: run perflab as root")]
    if hierarchy.kernel_name not in enabled and not is_root and busy:
        return [(key, f"{hierarchy.kernel_name} is not enabled in {parent}/cgroup.subtree_control and cannot be "
                 "while that cgroup holds processes (cgroup v2's rule of no internal processes); fix: enable "
                 f"it there (e.g. start the container with the {hierarchy.kernel_name} controller delegated)")]
    return []


# --------------------------------------------------------------------------
# the cgroup


def _write(path: Path, value: str) -> None:
    # One write() per value: cgroup files take one value per write.
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


# cgroup v1 reads an unset memory.limit_in_bytes as PAGE_COUNTER_MAX pages
# (9223372036854771712 with 4 KiB pages): anything this large is no limit.
V1_NO_LIMIT = 2**62


def _read_ints(path: Path) -> list[int]:
    try:
        return [int(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return []


def _flat_keyed(path: Path) -> dict[str, int]:
    """A "key value" per line file (cpu.stat, memory.events, memory.oom_control)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                out[parts[0]] = int(parts[1])
    return out


def _procs(directories: list[Path]) -> list[int]:
    pids: set[int] = set()
    for d in directories:
        pids.update(_read_ints(d / "cgroup.procs"))
    return sorted(pids)


def _kill_and_remove(directories: list[Path], wait_s: float = KILL_WAIT_S) -> None:
    """SIGKILL every task in `directories` until none is left (or `wait_s`
    passed), then rmdir them; missing directories are fine."""
    deadline = time.monotonic() + wait_s
    for d in directories:
        kill_file = d / "cgroup.kill"  # v2, Linux 5.14+: kills the tree, forks included
        if kill_file.exists():
            with contextlib.suppress(OSError):
                _write(kill_file, "1")
    while (pids := _procs(directories)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    _rmdirs(directories, deadline)


def _rmdirs(directories: list[Path], deadline: float) -> list[Path]:
    """rmdir each (EBUSY while exiting tasks leave is retried until
    `deadline`); returns those that could not be removed."""
    left = []
    for d in directories:
        while True:
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                    left.append(d)
                    break
                time.sleep(0.01)
    return left


def undo_cgroup(args: dict[str, Any]) -> None:
    """The guardian's undo of a ServerCgroup perflab did not remove: SIGKILL
    every task still in it (a managed server's own undo, journaled after the
    cgroup, has already tried to stop it cleanly), then remove each directory.
    Idempotent; well within the guardian's 5 s. Only what perflab could have
    made: a directory named perflab* (a ServerCgroup's name) inside a cgroup
    hierarchy; any other a journal names is left alone."""
    try:
        mounts = [str(h.mountpoint).rstrip("/") + "/" for h in find_hierarchies().values()]
    except OSError:
        mounts = []
    dirs = [d for d in args.get("dirs", []) if isinstance(d, str) and os.path.normpath(d) == d
            and _NAME.match(os.path.basename(d)) and d.startswith(tuple(mounts))]
    _kill_and_remove([Path(d) for d in dirs])


register_undo("cgroup", undo_cgroup)  # a server's cgroup: kill what is inside, rmdir


class ServerCgroup:
    """One cgroup (a directory in each hierarchy the settings need) for a
    managed server's whole process tree.

        group = ServerCgroup("perflab-run-3", settings)
        group.create()
        subprocess.run(group.wrap(["pg_ctl", "start", ...]))
        ... group.stats() ...
        group.remove()
    """

    def __init__(self, name: str, settings: ResourceSettings) -> None:
        if not _NAME.match(name):
            raise ValueError(f"cgroup name {name!r} must start with 'perflab' and be one path component "
                             "of letters, digits, '_', '.' and '-'")
        self.name = name
        self.settings = settings
        self.key = f"cgroup:{name}"
        self._hierarchies: dict[str, Hierarchy] = {}
        self._dirs: dict[str, Path] = {}  # logical controller -> its cgroup directory
        self._limits: dict[str, dict[str, str]] = {}  # logical controller -> file -> value written
        self._made: list[Path] = []  # the directories this process made (never one it found)
        self._created = False

    # -- making it

    def directories(self) -> list[Path]:
        """Every directory of this cgroup, one per distinct hierarchy."""
        return list(dict.fromkeys(self._dirs.values()))

    def create(self) -> None:
        """Journal, make the directories, write the limits, read them back.
        Run `resource_problems` first for messages a user can act on; a
        failure here removes what was made and raises (OSError, CgroupError)."""
        if self._created:
            raise RuntimeError(f"cgroup {self.name} is already created")
        found = find_hierarchies()
        for controller in self.settings.controllers():
            if controller not in found:
                raise CgroupError(f"no cgroup hierarchy has the {controller} controller; see resource_problems")
            self._hierarchies[controller] = found[controller]
            self._dirs[controller] = parent_dir(found[controller]) / self.name
        existing = [d for d in self.directories() if d.exists()]
        if existing:
            self._dirs.clear()
            raise CgroupError(f"{', '.join(map(str, existing))} already exist(s): another perflab's cgroup of "
                              f"the same name, or one left behind; remove it with rmdir once it has no tasks")
        journal().add("cgroup", self.key, dirs=[str(d) for d in self.directories()])
        self._created = True
        try:
            self._make()
            self._verify()
        except BaseException:
            # A directory that appeared meanwhile (another perflab's of the same
            # name) is not ours: only what this process made is emptied and removed.
            self._dirs = {c: d for c, d in self._dirs.items() if d in self._made}
            self.remove(kill=True)
            raise

    def _make(self) -> None:
        v2_parents: dict[Path, set[str]] = {}
        for controller, hierarchy in self._hierarchies.items():
            if hierarchy.version == 2:
                v2_parents.setdefault(self._dirs[controller].parent, set()).add(hierarchy.kernel_name)
        for parent, names in v2_parents.items():
            enabled = set((parent / "cgroup.subtree_control").read_text().split())
            for name in sorted(names - enabled):
                _write(parent / "cgroup.subtree_control", f"+{name}")
        for d in self.directories():
            d.mkdir()  # FileExistsError: someone else's, left alone (see create)
            self._made.append(d)
        for controller in self._hierarchies:
            for file, value in self._limit_values(controller):
                self._limits.setdefault(controller, {})[file] = value
                try:
                    _write(self._dirs[controller] / file, value)
                except OSError as e:
                    raise CgroupError(f"writing {value!r} to {self._dirs[controller] / file}: {e.strerror}") from e

    def _limit_values(self, controller: str) -> list[tuple[str, str]]:
        """(file, value) to write for one controller, in order."""
        s, v2 = self.settings, self._hierarchies[controller].version == 2
        if controller == "cpuset":
            assert s.cpus is not None
            cpus = format_cpu_list(parse_cpu_list(s.cpus))
            if v2:
                return [("cpuset.cpus", cpus)]  # an empty cpuset.mems takes the parent's
            mems = (self._dirs[controller].parent / "cpuset.mems").read_text().strip()
            return [("cpuset.cpus", cpus), ("cpuset.mems", mems)]  # both before any task may join
        if controller == "cpu":
            assert s.cpu_quota is not None
            quota = max(1000, round(s.cpu_quota * CPU_PERIOD_US))
            if v2:
                return [("cpu.max", f"{quota} {CPU_PERIOD_US}")]
            return [("cpu.cfs_period_us", str(CPU_PERIOD_US)), ("cpu.cfs_quota_us", str(quota))]
        if controller == "memory":
            out = []
            if s.memory is not None:
                out.append(("memory.max" if v2 else "memory.limit_in_bytes", str(s.memory)))
            if s.memory_high is not None:
                if not v2:
                    raise CgroupError("cgroup v1 has no memory.high; use memory (see resource_problems)")
                out.append(("memory.high", str(s.memory_high)))
            return out
        # io: one line per device
        reads, writes = s.io_read_bps or {}, s.io_write_bps or {}
        if v2:
            out = []
            for device in sorted(set(reads) | set(writes)):
                limits = " ".join(f"{k}={rate[device]}" for k, rate in (("rbps", reads), ("wbps", writes))
                                  if device in rate)
                out.append(("io.max", f"{device_number(device)} {limits}"))
            return out
        return ([("blkio.throttle.read_bps_device", f"{device_number(d)} {n}") for d, n in sorted(reads.items())]
                + [("blkio.throttle.write_bps_device", f"{device_number(d)} {n}") for d, n in sorted(writes.items())])

    def _verify(self) -> None:
        """Read every limit back: the kernel may round (memory to pages) or
        refuse silently (a cpuset outside the parent's)."""
        page = os.sysconf("SC_PAGE_SIZE")
        for controller, limits in self._limits.items():
            d = self._dirs[controller]
            for file, written in limits.items():
                got = (d / file).read_text().strip()
                if file.startswith("cpuset."):
                    ok = parse_cpu_list(got) == parse_cpu_list(written)
                elif file.startswith("memory."):
                    ok = got.isdigit() and 0 <= int(written) - int(got) < page
                elif file.startswith("cpu."):  # cpu.max, cpu.cfs_*
                    ok = got.split() == written.split()
                else:  # io.max, blkio.throttle.*: the device's line holds what was written
                    number, *values = written.split()
                    lines = {line.split()[0]: line.split()[1:] for line in got.splitlines() if line.strip()}
                    ok = all(v in lines.get(number, []) for v in values)
                if not ok:
                    raise CgroupError(f"{d / file}: wrote {written!r}, read back {got!r}")

    # -- using it

    def wrap(self, argv: list[str]) -> list[str]:
        """A command that moves itself into this cgroup (every hierarchy),
        then execs `argv`: whatever `argv` starts (pg_ctl, the postmaster,
        its backends) is born inside. If a move fails, `argv` is not run
        (status 1 or 2 from the shell, its message on stderr)."""
        if not self._created:
            raise RuntimeError(f"cgroup {self.name} is not created")
        if not argv:
            raise ValueError("wrap: empty command")
        moves = " && ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.directories())
        return ["/bin/sh", "-c", f'{moves} && exec "$@"', "sh", *argv]

    def pids(self) -> list[int]:
        """Every process (thread group id) in the cgroup, in any of its hierarchies."""
        return _procs(self.directories())

    def stats(self) -> dict[str, float]:
        """Counters for run metrics, those this cgroup's controllers have:

        - cpu_throttled_s: seconds the tasks were held back by the quota
          (v1 cpu.stat throttled_time ns; v2 cpu.stat throttled_usec);
        - cpu_nr_periods, cpu_nr_throttled: quota periods with runnable
          tasks, and those in which the quota ran out (counts);
        - cpu_usage_s: CPU time used (v2 cpu.stat usage_usec; v1 only when
          cpuacct shares the cpu hierarchy: cpuacct.usage ns);
        - memory_peak_bytes: the highest usage (v1 memory.max_usage_in_bytes;
          v2 memory.peak, Linux 5.19+); memory_current_bytes: usage now;
        - memory_failcnt: times usage hit the hard limit (v1 memory.failcnt;
          v2 memory.events max);
        - memory_high_events: times usage went past memory_high (v2 only);
        - memory_oom_kills: tasks the OOM killer killed in this cgroup
          (v1 memory.oom_control oom_kill; v2 memory.events oom_kill);
        - memory_limit_bytes, memory_high_bytes: the limits in force, as the
          kernel holds them (v1 memory.limit_in_bytes; v2 memory.max,
          memory.high; absent when unlimited);
        - memory_reclaim_scanned: pages reclaim scanned in this cgroup (v2
          memory.stat pgscan; v1's memory.stat has no reclaim counter: there
          memory_failcnt is the sign that the limit made the kernel reclaim);
        - memory_cache_bytes: the page cache charged to this cgroup now (v1
          memory.stat cache, v2 memory.stat file): the files its tasks read
          first, not pages another cgroup had cached before;
        - io_read_bytes, io_write_bytes: bytes read/written on block devices
          (v1 blkio.throttle.io_service_bytes; v2 io.stat rbytes/wbytes).
        """
        out: dict[str, float] = {}
        if "cpu" in self._dirs:
            d, v2 = self._dirs["cpu"], self._hierarchies["cpu"].version == 2
            cpu = _flat_keyed(d / "cpu.stat")
            if v2:
                out["cpu_throttled_s"] = cpu.get("throttled_usec", 0) / 1e6
                if "usage_usec" in cpu:
                    out["cpu_usage_s"] = cpu["usage_usec"] / 1e6
            else:
                out["cpu_throttled_s"] = cpu.get("throttled_time", 0) / 1e9
                if usage := _read_ints(d / "cpuacct.usage"):
                    out["cpu_usage_s"] = usage[0] / 1e9
            out["cpu_nr_periods"] = float(cpu.get("nr_periods", 0))
            out["cpu_nr_throttled"] = float(cpu.get("nr_throttled", 0))
        if "memory" in self._dirs:
            d, v2 = self._dirs["memory"], self._hierarchies["memory"].version == 2
            if v2:
                events = _flat_keyed(d / "memory.events")
                if peak := _read_ints(d / "memory.peak"):
                    out["memory_peak_bytes"] = float(peak[0])
                if current := _read_ints(d / "memory.current"):
                    out["memory_current_bytes"] = float(current[0])
                out["memory_failcnt"] = float(events.get("max", 0))
                out["memory_high_events"] = float(events.get("high", 0))
                out["memory_oom_kills"] = float(events.get("oom_kill", 0))
                for key, file in (("memory_limit_bytes", "memory.max"), ("memory_high_bytes", "memory.high")):
                    if limit := _read_ints(d / file):  # "max" (no limit) reads as none
                        out[key] = float(limit[0])
                if "pgscan" in (stat := _flat_keyed(d / "memory.stat")):
                    out["memory_reclaim_scanned"] = float(stat["pgscan"])
                if "file" in stat:
                    out["memory_cache_bytes"] = float(stat["file"])
            else:
                for key, file in (("memory_peak_bytes", "memory.max_usage_in_bytes"),
                                  ("memory_current_bytes", "memory.usage_in_bytes"),
                                  ("memory_failcnt", "memory.failcnt")):
                    if value := _read_ints(d / file):
                        out[key] = float(value[0])
                out["memory_oom_kills"] = float(_flat_keyed(d / "memory.oom_control").get("oom_kill", 0))
                if "cache" in (stat := _flat_keyed(d / "memory.stat")):
                    out["memory_cache_bytes"] = float(stat["cache"])
                if (limit := _read_ints(d / "memory.limit_in_bytes")) and limit[0] < V1_NO_LIMIT:
                    out["memory_limit_bytes"] = float(limit[0])
        if "io" in self._dirs:
            d, v2 = self._dirs["io"], self._hierarchies["io"].version == 2
            read = write = 0
            with contextlib.suppress(OSError):
                if v2:
                    for line in (d / "io.stat").read_text().splitlines():
                        fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
                        read += int(fields.get("rbytes", 0))
                        write += int(fields.get("wbytes", 0))
                else:
                    for line in (d / "blkio.throttle.io_service_bytes").read_text().splitlines():
                        parts = line.split()
                        if len(parts) == 3 and parts[1] in ("Read", "Write"):
                            if parts[1] == "Read":
                                read += int(parts[2])
                            else:
                                write += int(parts[2])
            out["io_read_bytes"], out["io_write_bytes"] = float(read), float(write)
        return out

    def describe(self) -> dict[str, Any]:
        """What was made: per logical controller, the cgroup version, the
        directory and the limits as written (file -> value)."""
        # the limits are the set-up; the name and directories perflab picked are not
        return not_setup({
            "name": self.name,
            "controllers": {
                controller: {
                    "version": h.version,
                    "kernel_name": h.kernel_name,
                    "path": str(self._dirs[controller]),
                    "limits": dict(self._limits.get(controller, {})),
                }
                for controller, h in self._hierarchies.items()
            },
        }, "name", *(f"controllers.{c}.path" for c in self._hierarchies))

    # -- removing it

    def remove(self, kill: bool = False) -> None:
        """Move every task still inside to the parent cgroup (or SIGKILL them
        when `kill`), remove every directory, withdraw the journal entry.
        Idempotent. Raises CgroupError when a directory stays (tasks that
        could not be moved); the journal entry then stays for the guardian."""
        if not self._created:
            return
        directories = self.directories()
        if kill:
            _kill_and_remove(directories)
        else:
            deadline = time.monotonic() + KILL_WAIT_S
            while time.monotonic() < deadline:  # again while tasks fork
                moved = 0
                for d in directories:
                    for pid in _read_ints(d / "cgroup.procs"):
                        with contextlib.suppress(ProcessLookupError):
                            _write(d.parent / "cgroup.procs", str(pid))
                            moved += 1
                if not moved:
                    break
            _rmdirs(directories, deadline)
        left = [d for d in directories if d.exists()]
        if left:
            raise CgroupError(f"could not remove {', '.join(map(str, left))}: tasks {_procs(left)} are still inside")
        self._created = False
        self._made = []
        journal().remove(self.key)


def cgroup_to_start_in(current: ServerCgroup | None, wanted: ResourceSettings | None,
                       name: str) -> ServerCgroup | None:
    """The cgroup a managed server is to start in (it is stopped): `current`
    while its limits are still `wanted`; else `current` is removed (what is
    left inside killed: a changed limit gets a new cgroup, so the old one's
    charges, page cache included, do not follow the server) and, with
    limits wanted, a new one named `name` is created."""
    if current is not None and current.settings == wanted:
        return current
    if current is not None:
        current.remove(kill=True)
    if wanted is None:
        return None
    cgroup = ServerCgroup(name, wanted)
    cgroup.create()
    return cgroup


def oom_cause(after: dict[str, float], before: dict[str, float] | None = None) -> str | None:
    """What the OOM killer did in the server's cgroup between two readings of
    ServerCgroup.stats (`before` None or {}: since the cgroup was made), as
    the cause of a failure that names the limit it reached; None when it
    killed nothing."""
    kills = after.get("memory_oom_kills", 0.0) - (before or {}).get("memory_oom_kills", 0.0)
    if kills <= 0:
        return None
    limit = after.get("memory_limit_bytes")
    what = f"its memory limit {format_size(int(limit))}" if limit else "its memory limit"
    return (f"the server was killed by the kernel's OOM killer: {what} was reached (target.resources.memory; "
            f"{kills:.0f} process{'es' if kills != 1 else ''} killed)")
