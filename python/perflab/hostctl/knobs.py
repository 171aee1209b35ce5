"""Machine settings as factors: an experiment file's [host] section.

    [host]
    hugepages = 512                       # or "auto": the caller resolves it
    transparent_hugepage = "never"
    sysctl = { "vm.dirty_background_ratio" = 5, "net.ipv4.tcp_rmem" = "4096 131072 6291456" }
    drop_caches = true                    # before each run; nothing to restore
    io_scheduler = { device = "vda", scheduler = "mq-deadline" }
    readahead_kb = { device = "vda", kb = 4096 }
    cpu_governor = "performance"

`HostSettings` checks shapes only. `host_problems` finds, changing nothing,
what would stop a setting on this machine (a missing key or device, a value
the file does not offer, not root, a read-only /proc/sys, no cpufreq).
`knob_files` maps each knob, named as the user writes it
("host.sysctl.vm.dirty_ratio"), to the files and values to write. `HostState`
applies and restores them: each file's value from before perflab is journaled
to the guardian (kind "host-file") before the file is written, so a SIGKILL
of perflab leaves the machine as it was within seconds.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from perflab.errors import UserError
from perflab.guardian import journal, live_journals, register_undo
from perflab.settings_model import StrictModel

PROC_SYS = Path("/proc/sys")
NR_HUGEPAGES = PROC_SYS / "vm" / "nr_hugepages"
DROP_CACHES = PROC_SYS / "vm" / "drop_caches"
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
SYS_BLOCK = Path("/sys/block")
SYS_CPU = Path("/sys/devices/system/cpu")
MEMINFO = Path("/proc/meminfo")

JOURNAL_KIND = "host-file"

# Knobs that act on what a server maps when it starts: the server is to be
# (re)started after they change for the run to see them.
NEEDS_SERVER_RESTART = frozenset({"host.hugepages", "host.transparent_hugepage"})

# Pairs of sysctls of which the kernel keeps one: writing either zeroes the
# other (mm/page-writeback.c), and the *_bytes ones refuse 0. Restoring one
# of a pair restores both, the zero first, so the one that was in force wins.
_EXCLUSIVE_SYSCTLS = {
    "vm.dirty_bytes": "vm.dirty_ratio",
    "vm.dirty_ratio": "vm.dirty_bytes",
    "vm.dirty_background_bytes": "vm.dirty_background_ratio",
    "vm.dirty_background_ratio": "vm.dirty_background_bytes",
}

_SYSCTL_KEY = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
_NAME = re.compile(r"^[A-Za-z0-9_.:+!-]+$")
_BRACKETED = re.compile(r"\[([^\]]+)\]")


def _name_check(what: str, value: str) -> str:
    if not _NAME.match(value) or value in (".", ".."):
        raise ValueError(f"got {value!r}; allowed: {what} (letters, digits, and . _ - : + !)")
    return value


# A block device as /sys/block names it, an I/O scheduler, a cpufreq governor:
# names, never paths.
DeviceName = Annotated[str, AfterValidator(
    lambda v: _name_check('a block device name as in /sys/block, e.g. "vda"', v))]
SchedulerName = Annotated[str, AfterValidator(
    lambda v: _name_check('an I/O scheduler name, e.g. "mq-deadline" or "none"', v))]
GovernorName = Annotated[str, AfterValidator(
    lambda v: _name_check('a cpufreq governor, e.g. "performance"', v))]


class IoScheduler(StrictModel):
    """/sys/block/<device>/queue/scheduler."""

    # The whole block device, as named in /sys/block ("vda", "nvme0n1").
    device: DeviceName
    # The I/O scheduler to set, one the device offers ("mq-deadline", "none", "bfq").
    scheduler: SchedulerName


class Readahead(StrictModel):
    """/sys/block/<device>/queue/read_ahead_kb."""

    # The whole block device, as named in /sys/block ("vda", "nvme0n1").
    device: DeviceName
    # Read-ahead in KiB (/sys/block/DEVICE/queue/read_ahead_kb).
    kb: int = Field(ge=0, le=2**31 - 1)


SysctlValue = int | float | str


class HostSettings(StrictModel):
    """The [host] section. Every field's default leaves that setting as it is."""

    # Huge pages reserved (vm.nr_hugepages), or "auto": as many as the managed server's shared memory needs.
    hugepages: Annotated[int, Field(ge=0, le=2**31 - 1)] | Literal["auto"] | None = None
    # Transparent huge pages (/sys/kernel/mm/transparent_hugepage/enabled).
    transparent_hugepage: Literal["always", "madvise", "never"] | None = None
    # Kernel settings, name = value ("vm.dirty_ratio" = 10), applied before a run and restored after.
    sysctl: dict[str, SysctlValue] = Field(default_factory=dict)
    # Drop the page cache before each run (a cold start; nothing to restore).
    drop_caches: bool = False
    # A block device's I/O scheduler, { device, scheduler }.
    io_scheduler: IoScheduler | None = None
    # A block device's read-ahead, { device, kb }.
    readahead_kb: Readahead | None = None
    # The cpufreq governor of every CPU ("performance", "powersave", ...).
    cpu_governor: GovernorName | None = None

    @field_validator("sysctl")
    @classmethod
    def _sysctl(cls, value: dict[str, SysctlValue]) -> dict[str, SysctlValue]:
        for key, setting in value.items():
            if not _SYSCTL_KEY.match(key):
                raise ValueError(
                    f"got key {key!r}; allowed: a kernel setting as sysctl names it, dotted parts of "
                    "letters, digits, _ and - (\"vm.dirty_ratio\"), no \"/\" and no empty part")
            if key == "vm.drop_caches":
                raise ValueError(
                    "key 'vm.drop_caches' is an action, not a setting (nothing to restore); "
                    "allowed: drop_caches = true in [host], which drops the page cache before each run")
            if isinstance(setting, str) and (not setting.strip() or any(c < " " and c != "\t" for c in setting)):
                raise ValueError(
                    f"{key} = {setting!r}; allowed: an integer, a number, or a non-empty string on one line "
                    "(several values separated by spaces: \"4096 131072 6291456\")")
        for key in value:
            partner = _EXCLUSIVE_SYSCTLS.get(key)
            if partner in value and key < partner:
                raise ValueError(
                    f"got both {key} and {partner}; allowed: one of them (the kernel keeps one "
                    "and sets the other to 0)")
        return value

    @model_validator(mode="after")
    def _one_owner(self) -> HostSettings:
        if self.hugepages is not None and "vm.nr_hugepages" in self.sysctl:
            raise ValueError("got both hugepages and sysctl vm.nr_hugepages; allowed: hugepages alone")
        return self


def sysctl_path(key: str) -> Path:
    """/proc/sys/vm/dirty_ratio for "vm.dirty_ratio"."""
    return PROC_SYS.joinpath(*key.split("."))


def _governor_files() -> list[Path]:
    def number(path: Path) -> int:
        return int(path.parent.parent.name.removeprefix("cpu"))
    found = sorted(SYS_CPU.glob("cpu[0-9]*/cpufreq/scaling_governor"), key=number)
    # None found: cpu0's, which does not exist, so applying fails loudly
    # (host_problems says why) instead of changing nothing in silence.
    return found or [SYS_CPU / "cpu0" / "cpufreq" / "scaling_governor"]


def _text(value: SysctlValue) -> str:
    return str(value)


def knob_files(settings: HostSettings, hugepages: int | None = None) -> dict[str, list[tuple[Path, str]]]:
    """Each knob to set, keyed as the user writes it ("host.sysctl.vm.dirty_ratio"),
    with the files and the values to write, in the order to apply them.
    `hugepages` is the number "auto" resolved to; it may be given for a number
    too, if it is the same one. drop_caches is an action, not a knob
    (`drop_page_cache`)."""
    knobs: dict[str, list[tuple[Path, str]]] = {}
    if settings.hugepages is not None:
        if settings.hugepages == "auto":
            if hugepages is None:
                raise ValueError('hugepages = "auto" needs the number it resolves to: pass hugepages=')
            number = hugepages
        else:
            if hugepages is not None and hugepages != settings.hugepages:
                raise ValueError(f"hugepages is {settings.hugepages}, not {hugepages}")
            number = settings.hugepages
        if number < 0:
            raise ValueError(f"hugepages = {number}; allowed: 0 or more")
        knobs["host.hugepages"] = [(NR_HUGEPAGES, str(number))]
    if settings.transparent_hugepage is not None:
        knobs["host.transparent_hugepage"] = [(THP_ENABLED, settings.transparent_hugepage)]
    for key, value in settings.sysctl.items():
        knobs[f"host.sysctl.{key}"] = [(sysctl_path(key), _text(value))]
    if settings.io_scheduler is not None:
        io = settings.io_scheduler
        knobs["host.io_scheduler"] = [(SYS_BLOCK / io.device / "queue" / "scheduler", io.scheduler)]
    if settings.readahead_kb is not None:
        ra = settings.readahead_kb
        knobs["host.readahead_kb"] = [(SYS_BLOCK / ra.device / "queue" / "read_ahead_kb", str(ra.kb))]
    if settings.cpu_governor is not None:
        knobs["host.cpu_governor"] = [(path, settings.cpu_governor) for path in _governor_files()]
    return knobs


# -- reading and writing the files ------------------------------------------------------------


def _normal(text: str) -> str:
    return " ".join(text.split())


def _parse(path: Path, text: str) -> str:
    """A file's value: the bracketed choice of a sysfs choice file
    ("always [madvise] never" -> "madvise"), else its text, whitespace normalised."""
    if str(path).startswith("/sys/"):
        chosen = _BRACKETED.search(text)
        if chosen:
            return chosen.group(1)
    return _normal(text)


def _choices(path: Path) -> list[str]:
    """What a sysfs choice file offers: "always [madvise] never" -> all three."""
    try:
        return path.read_text().replace("[", " ").replace("]", " ").split()
    except OSError:
        return []


def read_value(path: Path) -> str:
    """The value a kernel file holds now, as `HostState` compares it."""
    return _parse(path, path.read_text())


def _read_or_empty(path: Path) -> str:
    try:
        return read_value(path)
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    # One write(2): /proc/sys takes a value in one piece, and sysfs stores
    # take one per open.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode() + b"\n")
    finally:
        os.close(fd)


def _restore_steps(args: dict[str, Any]) -> list[tuple[str, str]]:
    steps = [(args["path"], args["value"]), *((p, v) for p, v in args.get("also", []))]
    # Of an exclusive pair, the zero first: the other's write then wins.
    return sorted(steps, key=lambda step: step[1].strip() not in ("0", ""))


def restorable(path: Any, value: Any) -> bool:
    """Whether the guardian may write `value` back to `path`: a file perflab's
    knobs could have changed (under /proc/sys or /sys, by a normal absolute
    path that stays there once its links are followed), and a value as one
    was read from it (one line of text). Anything else in a journal was not
    written by perflab, and is not acted on."""
    if not isinstance(path, str) or not isinstance(value, str) or "\n" in value.strip("\n") or len(value) > 4096:
        return False
    if not os.path.isabs(path) or os.path.normpath(path) != path:
        return False
    return all(p.startswith(("/proc/sys/", "/sys/")) for p in (path, os.path.realpath(path)))


def undo_host_file(args: dict[str, Any]) -> None:
    """The guardian's undo of kind "host-file": write the journaled value back
    (and its partners'), only to a file perflab could have changed
    (`restorable`). Idempotent; never raises (a file that is gone, a value
    the kernel no longer takes: nothing more to do)."""
    try:
        steps = _restore_steps(args)
    except (KeyError, TypeError, ValueError, AttributeError):
        return
    for path, value in steps:
        if not restorable(path, value):
            continue
        try:
            _write(Path(path), value)
        except (OSError, ValueError):
            continue


register_undo(JOURNAL_KIND, undo_host_file)  # a /proc/sys or /sys file: write its value back


# -- preflight --------------------------------------------------------------------------------


def _problem(path: str, text: str, fix: str) -> tuple[str, str]:
    return path, f"{text}; fix: {fix}"


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _file_problem(where: str, knob: str, path: Path, what: str, *, restored: bool = True) -> tuple[str, str] | None:
    """Why `path` (which exists) cannot be set here (and read, if it is to be
    `restored`), if it cannot."""
    if _read_only_mount(path):
        mount = "/proc/sys" if str(path).startswith("/proc/") else "/sys"
        return _problem(where, f"{mount} is mounted read-only here, so {what} ({path}) cannot be set",
                        f"run perflab where {mount} is writable (a VM, a host, a privileged container), "
                        f"or remove {knob}")
    if os.geteuid() != 0 and not os.access(path, os.W_OK):
        return _problem(where, f"{what} ({path}) needs root", f"run perflab as root, or remove {knob}")
    if not os.access(path, os.W_OK):
        return _problem(where, f"{what} ({path}) is read-only: the kernel reports it, it cannot be set",
                        f"remove {knob}")
    if restored and not os.access(path, os.R_OK):
        return _problem(where, f"{what} ({path}) is write-only: an action, not a setting, and "
                        "perflab cannot restore what it cannot read", f"remove {knob}")
    return None


def _devices() -> str:
    try:
        names = sorted(p.name for p in SYS_BLOCK.iterdir())
    except OSError:
        names = []
    return ", ".join(names) if names else "none"


def _meminfo() -> dict[str, int]:
    values = {}
    try:
        lines = MEMINFO.read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[name] = int(fields[0])
    return values


def _block_problems(knob: str, device: str, file: str) -> tuple[Path | None, list[tuple[str, str]]]:
    """The device's queue file, or the problem with the device."""
    if not (SYS_BLOCK / device).exists():
        return None, [_problem(f"{knob}.device", f"no such block device {device!r} (/sys/block/{device}); "
                               f"allowed: one of {_devices()}", f"name a device listed in /sys/block, or remove {knob}")]
    path = SYS_BLOCK / device / "queue" / file
    if not path.exists():
        return None, [_problem(f"{knob}.device", f"block device {device!r} has no {path}",
                               f"name a device with a request queue (a disk, not a partition), or remove {knob}")]
    return path, []


def host_problems(settings: HostSettings, hugepages: int | None = None) -> list[tuple[str, str]]:
    """What would stop these settings on this machine, as (dotted path, text),
    found without changing anything. `hugepages` is what "auto" resolves to,
    if known."""
    problems: list[tuple[str, str]] = []

    def file_problem(where: str, knob: str, path: Path, what: str, restored: bool = True) -> None:
        found = _file_problem(where, knob, path, what, restored=restored)
        if found:
            problems.append(found)

    if settings.hugepages is not None:
        knob = "host.hugepages"
        if not NR_HUGEPAGES.exists():
            problems.append(_problem(knob, f"this kernel has no huge pages ({NR_HUGEPAGES}); "
                                     "allowed: hugepages on a kernel built with HugeTLB", f"remove {knob}"))
        else:
            file_problem(knob, knob, NR_HUGEPAGES, "the number of huge pages")
            number = settings.hugepages if isinstance(settings.hugepages, int) else hugepages
            mem = _meminfo()
            size_kb, total_kb = mem.get("Hugepagesize", 0), mem.get("MemTotal", 0)
            if number is not None and size_kb and total_kb and number * size_kb >= total_kb:
                problems.append(_problem(
                    knob, f"{number} huge pages of {size_kb} kB is {number * size_kb // 1024} MB; allowed: less than "
                    f"this machine's memory, {total_kb // 1024} MB", "ask fewer"))

    if settings.transparent_hugepage is not None:
        knob = "host.transparent_hugepage"
        if not THP_ENABLED.exists():
            problems.append(_problem(knob, f"this kernel has no transparent huge pages ({THP_ENABLED}); allowed: "
                                     "transparent_hugepage on a kernel built with them", f"remove {knob}"))
        else:
            choices = _choices(THP_ENABLED)
            if choices and settings.transparent_hugepage not in choices:
                problems.append(_problem(knob, f"got {settings.transparent_hugepage!r}; allowed here: "
                                         f"{', '.join(choices)} ({THP_ENABLED})", f"use one of those, or remove {knob}"))
            file_problem(knob, knob, THP_ENABLED, "transparent huge pages")

    for key in settings.sysctl:
        knob = f"host.sysctl.{key}"
        path = sysctl_path(key)
        if not path.exists():
            problems.append(_problem(knob, f"no such kernel setting {key} ({path}); allowed: a key under /proc/sys",
                                     f"check the name (`sysctl -a` lists them; a module may need loading), "
                                     f"or remove {knob}"))
        elif path.is_dir():
            problems.append(_problem(knob, f"{key} is a group of kernel settings ({path}/), not one; allowed: a "
                                     "file under /proc/sys", f"name one setting in it, e.g. {key}.<name>"))
        else:
            file_problem(knob, knob, path, f"kernel setting {key}")

    if settings.drop_caches:
        file_problem("host.drop_caches", "host.drop_caches", DROP_CACHES, "dropping the page cache",
                     restored=False)

    if settings.io_scheduler is not None:
        knob = "host.io_scheduler"
        queue_file, found = _block_problems(knob, settings.io_scheduler.device, "scheduler")
        problems += found
        if queue_file is not None:
            choices = _choices(queue_file)
            if choices and settings.io_scheduler.scheduler not in choices:
                problems.append(_problem(f"{knob}.scheduler", f"got {settings.io_scheduler.scheduler!r}; allowed "
                                         f"for {settings.io_scheduler.device}: {', '.join(choices)} ({queue_file})",
                                         f"use one of those (a scheduler not listed may need `modprobe`), or remove {knob}"))
            file_problem(knob, knob, queue_file, f"the I/O scheduler of {settings.io_scheduler.device}")

    if settings.readahead_kb is not None:
        knob = "host.readahead_kb"
        queue_file, found = _block_problems(knob, settings.readahead_kb.device, "read_ahead_kb")
        problems += found
        if queue_file is not None:
            file_problem(knob, knob, queue_file, f"the readahead of {settings.readahead_kb.device}")

    if settings.cpu_governor is not None:
        knob = "host.cpu_governor"
        cpufreq = SYS_CPU / "cpu0" / "cpufreq"
        if not cpufreq.exists():
            problems.append((knob, f"this machine has no cpufreq ({cpufreq}): cpu_governor cannot be set here; "
                                   f"remove {knob}"))
        else:
            for path in _governor_files():
                available = path.parent / "scaling_available_governors"
                choices = available.read_text().split() if available.exists() else []
                if choices and settings.cpu_governor not in choices:
                    problems.append(_problem(knob, f"got {settings.cpu_governor!r}; allowed on {path.parent.parent.name}: "
                                             f"{', '.join(choices)} ({available})", f"use one of those, or remove {knob}"))
                    break
            for path in _governor_files():
                found_problem = _file_problem(knob, knob, path, "the CPU frequency governor")
                if found_problem:
                    problems.append(found_problem)
                    break
    return problems


# -- applying and restoring -------------------------------------------------------------------

# The value from before perflab of each file perflab has changed and not yet
# restored, process-wide as the journal is: a second apply of the same file,
# through any HostState, keeps the first original in the journal.
_ORIGINALS: dict[Path, dict[str, Any]] = {}
_LOCK = threading.RLock()


def _journal_key(path: Path) -> str:
    return f"{JOURNAL_KIND}:{path}"


def _summary(values: list[str]) -> str:
    """One value for a knob of several files (every CPU's governor)."""
    return values[0] if len(set(values)) == 1 else ", ".join(values)


def _os_error(knob: str, path: Path, value: str, error: OSError) -> UserError:
    if isinstance(error, FileNotFoundError):
        return UserError(f"{knob}: {path} does not exist", f"`perflab check` says why; or remove {knob}")
    if isinstance(error, PermissionError) and os.geteuid() != 0:
        return UserError(f"{knob}: writing {path} needs root", f"run perflab as root, or remove {knob}")
    return UserError(f"{knob}: the kernel refused {value!r} for {path} ({error.strerror or error})",
                     f"give a value the kernel accepts for {path.name}, or remove {knob}")


def _refuse_if_held_by_another(key: str, path: Path) -> None:
    """A host file is the machine's: while another live perflab has it set
    (journaled, not yet restored), setting it too would change that
    experiment's runs under it, and each would restore the other's value."""
    for record in live_journals():
        for entry in record.get("entries", []):
            if isinstance(entry, dict) and entry.get("kind") == JOURNAL_KIND and (
                    str(path) == entry.get("args", {}).get("path")
                    or any(str(path) == p for p, _ in entry.get("args", {}).get("also", []))):
                where = f", experiment {record['out_dir']}" if record.get("out_dir") else ""
                raise UserError(f"{key}: {path} is set by another perflab running now (pid {record.get('pid')}"
                                f"{where}); perflab does not change a host setting another experiment holds",
                                "run the experiments that set this host knob one at a time, or remove "
                                f"{key} from this one")


class HostState:
    """The knobs perflab has set, and their restoring. Each file's value from
    before perflab is journaled to the guardian before the file is written."""

    def __init__(self) -> None:
        self._applied: dict[str, list[Path]] = {}  # knob -> files, in order applied

    def __enter__(self) -> HostState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore_all()

    def applied(self) -> list[str]:
        """The knobs set and not restored, oldest first."""
        return list(self._applied)

    def apply(self, key: str, files_and_values: list[tuple[Path, str]]) -> tuple[str, str]:
        """Set knob `key`: each file gets its value, read back and checked.
        Returns (old, new) for an event ("host.sysctl.vm.dirty_ratio: 20 -> 5");
        old is the value from before perflab even when the knob was set before.
        On any failure every file of the knob is put back and UserError raised."""
        if not files_and_values:
            raise ValueError(f"{key}: no files to set")
        with _LOCK:
            paths = self._applied.setdefault(key, [])
            old: list[str] = []
            new: list[str] = []
            written: list[Path] = []
            try:
                for path, value in files_and_values:
                    old.append(self._journal_original(key, path, value))
                    if path not in paths:
                        paths.append(path)
                    written.append(path)
                    try:
                        _write(path, value)
                        got = read_value(path)
                    except OSError as error:
                        raise _os_error(key, path, value, error) from error
                    self._verify(key, path, value, got)
                    new.append(got)
            except BaseException:
                for path in reversed(written):
                    try:
                        self._restore_path(path)
                    except UserError:
                        continue  # stays journaled and tracked: restore_all and the guardian try again
                    paths.remove(path)
                if not paths:
                    del self._applied[key]
                raise
            return _summary(old), _summary(new)

    def _journal_original(self, key: str, path: Path, value: str) -> str:
        entry = _ORIGINALS.get(path)
        if entry is None:
            _refuse_if_held_by_another(key, path)
            try:
                original = read_value(path)
            except OSError as error:
                raise _os_error(key, path, value, error) from error
            entry = {"path": str(path), "value": original}
            partner_key = _EXCLUSIVE_SYSCTLS.get(".".join(path.relative_to(PROC_SYS).parts)) \
                if path.is_relative_to(PROC_SYS) else None
            if partner_key is not None:
                partner = sysctl_path(partner_key)
                try:
                    entry["also"] = [[str(partner), read_value(partner)]]
                except OSError:
                    pass
            journal().add(JOURNAL_KIND, _journal_key(path), **entry)
            _ORIGINALS[path] = entry
        return str(entry["value"])

    def _verify(self, key: str, path: Path, value: str, got: str) -> None:
        if path == NR_HUGEPAGES:
            asked = int(value)
            if got.isdigit() and int(got) < asked:
                size = _meminfo().get("Hugepagesize")
                raise UserError(
                    f"{key}: asked for {asked} huge pages{f' of {size} kB' if size else ''}, the kernel "
                    f"allocated {got}; the original {_ORIGINALS[path]['value']} is restored",
                    "free memory or ask fewer (huge pages are allocated best early, before memory fragments)")
        expected = _parse(path, value)
        if got != expected:
            raise UserError(
                f"{key}: wrote {expected!r} to {path}, read back {got!r}; the original "
                f"{_ORIGINALS[path]['value']!r} is restored",
                f"give a value the kernel keeps as written, or remove {key}")

    def _restore_path(self, path: Path) -> str | None:
        """Put `path` back; what it reads afterwards, or None if perflab had not changed it.
        A file that does not read back as its original stays journaled (the
        guardian tries again at exit) and raises UserError."""
        entry = _ORIGINALS.get(path)
        if entry is None:
            return None
        undo_host_file(entry)
        steps = _restore_steps(entry)
        try:
            back = {p: read_value(Path(p)) for p, _ in steps}
        except OSError:
            back = {}  # gone (a loop device detached): nothing left to restore
        wrong = [(p, v, back[p]) for p, v in steps if p in back and back[p] != _parse(Path(p), v)]
        if wrong:
            raise UserError(
                "could not restore " + "; ".join(f"{p}: wanted {v!r}, reads {g!r}" for p, v, g in wrong),
                "set it by hand; perflab's guardian tries again when perflab exits")
        del _ORIGINALS[path]
        journal().remove(_journal_key(path))
        return back.get(str(path), str(entry["value"]))

    def restore(self, key: str) -> tuple[str, str]:
        """Put knob `key` back as it was before perflab; (from, to) for an event."""
        with _LOCK:
            paths = self._applied.get(key, [])
            before = [_read_or_empty(p) for p in paths]
            after: list[str] = []
            errors: list[str] = []
            for path in reversed(paths):
                try:
                    restored = self._restore_path(path)
                except UserError as error:
                    errors.append(error.message)
                    continue
                after.insert(0, restored if restored is not None else "")
            if errors:
                raise UserError(f"{key}: " + "; ".join(errors),
                                "set it by hand; perflab's guardian tries again when perflab exits")
            self._applied.pop(key, None)
            return _summary(before) if before else "", _summary(after) if after else ""

    def restore_all(self) -> list[tuple[str, str, str]]:
        """Restore every knob, newest first: [(key, from, to)]. Restores all it
        can before raising UserError for any it could not."""
        done: list[tuple[str, str, str]] = []
        errors: list[UserError] = []
        with _LOCK:
            for key in reversed(list(self._applied)):
                try:
                    done.append((key, *self.restore(key)))
                except UserError as error:
                    errors.append(error)
        if errors:
            raise UserError("; ".join(e.message for e in errors), errors[0].hint)
        return done

    def current(self, key: str) -> str:
        """What knob `key` (set through this HostState) reads now."""
        paths = self._applied[key]
        return _summary([read_value(p) for p in paths])

    def original(self, key: str) -> str:
        """Knob `key`'s value from before perflab."""
        return _summary([str(_ORIGINALS[p]["value"]) for p in self._applied[key]])


# -- the page cache and huge page counts ------------------------------------------------------


def drop_page_cache() -> float:
    """sync, then drop the page cache, dentries and inodes; the seconds it took."""
    start = time.monotonic()
    os.sync()
    try:
        _write(DROP_CACHES, "3")
    except PermissionError as error:
        raise UserError(f"host.drop_caches: writing {DROP_CACHES} needs root",
                        "run perflab as root, or remove host.drop_caches") from error
    except OSError as error:
        raise UserError(f"host.drop_caches: {DROP_CACHES}: {error.strerror or error}",
                        "run perflab where /proc/sys is writable, or remove host.drop_caches") from error
    return time.monotonic() - start


_MEMINFO_HUGE = {"HugePages_Total": "hugepages_total", "HugePages_Free": "hugepages_free",
                 "HugePages_Rsvd": "hugepages_rsvd", "HugePages_Surp": "hugepages_surp",
                 "Hugepagesize": "hugepagesize_kb"}


def hugepage_meminfo() -> dict[str, int]:
    """The huge page counts of /proc/meminfo (pages; the size in kB):
    hugepages_total, _free, _rsvd, _surp and hugepagesize_kb. Empty on a
    kernel without huge pages."""
    mem = _meminfo()
    return {ours: mem[theirs] for theirs, ours in _MEMINFO_HUGE.items() if theirs in mem}
