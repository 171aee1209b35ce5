"""Scratch filesystems for a managed server's data and WAL ([target.storage]
`data_fs`, `wal_fs`): a sparse file, a loop device, mkfs, a mount; or a tmpfs.

    data_fs = { type = "ext2", size = "8GB", mkfs_options = "-E stride=16",
                mount_options = "noatime", backing_dir = "/var/tmp" }

So a storage study (ext2 with and without stride, data and WAL on separate
filesystems) needs no spare disk. Each host change follows the hostctl rule,
journaled before it is made:

- the loop device: kind "loop", key f"loop:{backing_file}"; its undo detaches
  every loop device the kernel says is on that file (/sys/block/loopN/loop/
  backing_file), and only when the file is one perflab makes (named perflab-*,
  a regular file in a directory no other user can write);
- the mount: kind "mount", key f"mount:{mountpoint}", with the sources it is
  mounted from (the loop device, the md array, the tmpfs's name); its undo is
  `umount`, then `umount -l` when the mount is busy (a process's working
  directory or open file in it), and only when the mount point is a
  directory perflab makes (perflab-*; tracefs at its own place) and what is
  mounted there is from a recorded source. A lazily unmounted filesystem
  keeps its loop device open until the last user goes; `losetup -d` then
  marks the device autoclear and the kernel detaches it at that moment.

The guardian undoes newest first: the mount before its loop device (and a
server started later is stopped before both).

The backing file is not journaled: it holds the data a `perflab resume`
mounts again, so only `ScratchFs.discard()` deletes it. mkfs runs on the
file itself, under a temporary name (`<file>.perflab-new`) that is renamed
when mkfs has succeeded, before a loop device is attached: a file under its
final name always holds a whole filesystem, so "is it new" is "does it
exist", and a perflab killed during mkfs leaves only the temporary file,
replaced by the next `mount()` or removed by `discard()`. (mkfs writes the
same filesystem to a file as to a loop device over it.) Beside it,
`<file>.perflab-mkfs.json` records the type, size and mkfs_options it was
made with, and the file's inode: a file made otherwise is refused, not
mounted as if it were the filesystem asked for, and so is one the mark does
not name. The file's directory is one no other user can write (made 0700,
or refused): an image another user placed, or its mark, is never mounted.
Every scratch filesystem is mounted nosuid,nodev.

The kernel's filesystem types: `fs_problems` reads /proc/filesystems and,
for a type not there, /lib/modules/<release>/modules.builtin and modules.dep
and modules.alias (xfs and btrfs are often modules, which the kernel loads
on the first mount; "fs-ext2" may name ext4's).
It does not try a mount or load a module: a preflight changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from perflab.errors import UserError
from perflab.guardian import MADE_PREFIX, journal, register_undo
from perflab.hostctl.mounts import mount_entry, nearest_existing
from perflab.hostctl.netns import Rate
from perflab.hostctl.shareddir import own_dir, private_dir_problem, write_file
from perflab.model import not_setup
from perflab.settings_model import OsText, StrictModel
from perflab.units import Duration, Size, format_size

FsType = Literal["ext4", "xfs", "btrfs", "ext2", "tmpfs", "sshfs", "nfs"]
# A network filesystem: a directory of a server perflab starts in a network
# namespace of its own, mounted over a shaped link (hostctl.netfs).
NETWORK_TYPES = ("sshfs", "nfs")

# The smallest size each type takes, and why (mkfs refuses smaller, or the
# size is surely a typo: a bare number is bytes).
MIN_SIZE: dict[str, tuple[int, str]] = {
    "ext4": (16 * 2**20, "below that mkfs.ext4 leaves out or shrinks the journal"),
    "ext2": (16 * 2**20, "a smaller one holds no database"),
    "xfs": (300 * 2**20, "mkfs.xfs refuses a smaller filesystem"),
    "btrfs": (114294784, "mkfs.btrfs refuses a smaller device (114294784 bytes)"),
    "tmpfs": (2**20, "a smaller one holds no database"),
}

# The mkfs command of each type (options from the settings go after these),
# and the Debian package that has it.
MKFS: dict[str, list[str]] = {
    "ext4": ["mkfs.ext4", "-q"],
    "ext2": ["mkfs.ext2", "-q"],
    "xfs": ["mkfs.xfs", "-q"],
    "btrfs": ["mkfs.btrfs", "-q"],
}
PACKAGE = {"mkfs.ext4": "e2fsprogs", "mkfs.ext2": "e2fsprogs", "mkfs.xfs": "xfsprogs", "mkfs.btrfs": "btrfs-progs",
           "losetup": "mount", "mount": "mount", "umount": "mount", "blkid": "util-linux"}
LOOP_CONTROL = Path("/dev/loop-control")

# Undo functions run in the guardian, which must be done within 5 s of
# perflab's death: each command gets this long.
UNDO_STEP_TIMEOUT_S = 1.0
MKFS_TIMEOUT_S = 300.0
NEW_SUFFIX = ".perflab-new"
MADE_SUFFIX = ".perflab-mkfs.json"  # how the file's filesystem was made
# Every scratch filesystem is mounted so: no set-uid program and no device
# node on it takes effect (its image is a file anyone with the disk could edit).
SAFE_OPTIONS = ["nosuid", "nodev"]


class RaidSettings(StrictModel):
    """A stripe under a scratch filesystem (hostctl.stripe): md's RAID-0 over
    N loop devices where the kernel has md, else btrfs's own RAID-0."""

    # The RAID level: 0, striping without redundancy.
    level: Literal[0] = 0
    # How many devices (loop devices, each on its own backing file) the stripe spans.
    devices: int = Field(default=2, ge=2, le=16)
    # md's chunk size (a power of two from 4KB; mdadm's default, 512KB, without it). btrfs's RAID-0 has none.
    chunk: Size | None = None
    # ext2/ext4 on md: mkfs's stride and stripe_width set from the chunk (false: left to mkfs, as the study compared).
    stride: bool = True

    @field_validator("chunk")
    @classmethod
    def _chunk(cls, value: int | None) -> int | None:
        if value is not None and (value < 4096 or value & (value - 1)):
            raise ValueError(f"got {format_size(value)} ({value} bytes); allowed: a power of two of at least "
                             "4KB (\"8KB\", \"128KB\", \"512KB\")")
        return value


class FsSettings(StrictModel):
    """One scratch filesystem of [target.storage] (`data_fs`, `wal_fs`)."""

    # The filesystem perflab makes (mkfs on a loop device in the target's directory; tmpfs in memory;
    # sshfs: the directory of an sshd perflab starts, over a shaped link, hostctl.netfs; nfs: of an
    # nfs-ganesha perflab starts, where the kernel has an NFS client; elsewhere refused at check, sshfs standing in).
    type: FsType
    # Striped over several loop devices (RAID-0; hostctl.stripe).
    raid: RaidSettings | None = None
    # Required but for tmpfs, where it is the tmpfs's size (the kernel's
    # default, half the memory, without it).
    size: Size | None = Field(default=None, validate_default=True)
    mkfs_options: str = ""  # split as a shell would (shlex)
    mount_options: str = ""  # a comma list, as `mount -o` takes it
    # Where the backing file goes (None: the caller's choice); with raid, one per device as a list
    # (devices on different disks), or one for all.
    backing_dir: OsText | list[OsText] | None = None
    # sshfs, nfs: the link's one-way delay, each direction.
    delay: Duration = Field(default=0.0, ge=0, le=10.0)
    # sshfs, nfs: the link's rate, each direction ("1gbit"; default: unlimited).
    rate: Rate | None = None
    # nfs: the NFS version mounted (NFSv3 is not served: it needs MOUNT, NLM and statd beside the server).
    nfsvers: Literal["4.0", "4.1", "4.2"] = "4.1"
    # nfs: the client's read size, 4KB to 1MB (default: what the client and the server agree).
    rsize: Size | None = Field(default=None, ge=4096, le=2**20)
    # nfs: the client's write size, 4KB to 1MB (default: what the client and the server agree).
    wsize: Size | None = Field(default=None, ge=4096, le=2**20)

    @field_validator("raid")
    @classmethod
    def _raid_on_a_disk(cls, value: RaidSettings | None, info: ValidationInfo) -> RaidSettings | None:
        if value is not None and info.data.get("type") in ("tmpfs", *NETWORK_TYPES):
            raise ValueError(f"got a raid for {info.data.get('type')}; allowed: raid on ext2, ext4, xfs or btrfs "
                             "(a stripe of loop devices)")
        return value

    @field_validator("size")
    @classmethod
    def _size_fits_type(cls, value: int | None, info: ValidationInfo) -> int | None:
        fstype = info.data.get("type")
        if fstype is None:  # the type is wrong: that is the problem to report
            return value
        if fstype in NETWORK_TYPES:
            if value is not None:
                raise ValueError(f"got {format_size(value)}; allowed: no size for {fstype} (its files take the "
                                 "room of the server's directory)")
            return value
        if value is None:
            if fstype != "tmpfs":
                raise ValueError(f'missing; allowed: a size for a {fstype} filesystem ("8GB")')
            return value
        minimum, why = MIN_SIZE[fstype]
        raid = info.data.get("raid")
        if raid is not None and value // raid.devices < minimum:
            raise ValueError(f"got {format_size(value)} over {raid.devices} devices; allowed: at least "
                             f"{format_size(minimum)} per device ({why})")
        if value < minimum:
            raise ValueError(f"got {format_size(value)} ({value} bytes); allowed: a {fstype} size of at least "
                             f"{format_size(minimum)} ({why})")
        return value

    @field_validator("mkfs_options")
    @classmethod
    def _mkfs_options(cls, value: str, info: ValidationInfo) -> str:
        if value.strip() and info.data.get("type") in ("tmpfs", *NETWORK_TYPES):
            raise ValueError(f"got {value!r}; allowed: nothing for tmpfs, which has no mkfs "
                             "(its options go in mount_options)")
        try:
            shlex.split(value)
        except ValueError as e:
            raise ValueError(f"got {value!r}; allowed: options as a shell would split them ({e})") from None
        return value

    @field_validator("mount_options")
    @classmethod
    def _mount_options(cls, value: str) -> str:
        if value and not all(o and not re.search(r"\s", o) for o in value.split(",")):
            raise ValueError(f"got {value!r}; allowed: a comma list of mount options without spaces "
                             '("noatime,data=writeback")')
        if unsafe := [o for o in value.split(",") if o in ("suid", "dev")]:
            raise ValueError(f"got {','.join(unsafe)}; allowed: any other option (perflab mounts every "
                             "scratch filesystem nosuid,nodev)")
        return value

    @field_validator("backing_dir")
    @classmethod
    def _backing_dir(cls, value: str | list[str] | None, info: ValidationInfo) -> str | list[str] | None:
        if value is not None:
            if info.data.get("type") in ("tmpfs", *NETWORK_TYPES):
                raise ValueError(f"got {value!r}; allowed: nothing for {info.data.get('type')}, which has no "
                                 "backing file")
            raid = info.data.get("raid")
            if isinstance(value, list) and (raid is None or len(value) != raid.devices):
                raise ValueError(f"got {len(value)} directories; allowed: a list only with raid, one directory "
                                 f"per device ({raid.devices if raid else 'raid.devices'})")
            if not all(os.path.isabs(v) for v in (value if isinstance(value, list) else [value])):
                raise ValueError(f"got {value!r}; allowed: an absolute directory path")
        return value

    @model_validator(mode="after")
    def _link_on_network(self) -> FsSettings:
        if self.type not in NETWORK_TYPES and (self.delay or self.rate):
            raise ValueError(f"got delay or rate for {self.type}; allowed: delay and rate on a network filesystem "
                             '(type = "sshfs" or "nfs")')
        if self.type != "nfs" and (given := sorted(self.model_fields_set & {"nfsvers", "rsize", "wsize"})):
            raise ValueError(f"got {', '.join(given)} for {self.type}; allowed: {', '.join(given)} on "
                             'type = "nfs" (the NFS client\'s mount options)')
        return self

    def backing_dirs(self) -> list[str | None]:
        """The backing directory of each device (one unless raid)."""
        count = self.raid.devices if self.raid is not None else 1
        return list(self.backing_dir) if isinstance(self.backing_dir, list) else [self.backing_dir] * count

    def mkfs_argv(self) -> list[str]:
        return shlex.split(self.mkfs_options)

    def mount_option_list(self) -> list[str]:
        return [o for o in self.mount_options.split(",") if o]


# ----------------------------------------------------------------- commands


def _tool(name: str) -> str | None:
    """The tool on PATH (perflab's PATH, the one its commands will use)."""
    return shutil.which(name)


def _need_tool(name: str) -> str:
    path = _tool(name)
    if path is None:
        raise UserError(f"{name} not found on PATH", _install_hint(name))
    return path


def _install_hint(name: str) -> str:
    hint = f"install {PACKAGE.get(name, name)}"
    if PACKAGE.get(name) in ("xfsprogs", "btrfs-progs"):
        hint += " (`./dev setup` installs it)"
    return hint


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, "LC_ALL": "C"})


def _run_bounded(argv: list[str], timeout: float) -> int | None:
    """Run a command for at most `timeout` seconds and return its status, or
    None when it did not finish: it is killed and left to init to reap (a
    process in the kernel, as a umount flushing a filesystem, may not die at
    once, and an undo must not wait for it)."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**os.environ, "LC_ALL": "C"})
    except OSError:
        return None
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            proc.kill()
        return None


SYS_BLOCK = Path("/sys/block")
# The mounts perflab makes outside a directory of its own, and their type:
# tracefs for the syscalls collector (mounted from "nodev").
OTHER_MOUNTS = {"/sys/kernel/tracing": "tracefs"}


def loop_devices_of(backing_file: Path | str) -> list[str]:
    """The loop devices attached to `backing_file`, as the kernel names each
    device's file (/sys/block/loopN/loop/backing_file: the path it opened,
    its last component not followed here: a link to another file is not it)."""
    path = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(backing_file))),
                        os.path.basename(backing_file))
    devices = []
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(SYS_BLOCK)):
            if name.startswith("loop"):
                with contextlib.suppress(OSError):
                    if (SYS_BLOCK / name / "loop" / "backing_file").read_text().rstrip("\n") == path:
                        devices.append(f"/dev/{name}")
    return devices


def loop_file_problem(backing_file: Any) -> str | None:
    """Why `backing_file` is not a file perflab makes (None: it may be): an
    absolute path named perflab-*, a regular file (not a link), in a
    directory no other user can write."""
    if not isinstance(backing_file, str) or not os.path.isabs(backing_file) \
            or os.path.normpath(backing_file) != backing_file \
            or not os.path.basename(backing_file).startswith(MADE_PREFIX):
        return f"{backing_file!r} is not an absolute path named {MADE_PREFIX}*"
    try:
        if not stat.S_ISREG(os.lstat(backing_file).st_mode):
            return "not a regular file"
    except OSError:
        return "gone"
    return private_dir_problem(Path(backing_file).parent)


def mount_record(mountpoint: Path | str, sources: list[str]) -> dict[str, Any]:
    """The arguments of a "mount" journal entry (and of `undo_mount`): where,
    and what it is mounted from (any of `sources`)."""
    return {"mountpoint": str(mountpoint), "sources": list(dict.fromkeys(s for s in sources if s))}


def _same_source(found: str, recorded: str) -> bool:
    return found == recorded or (recorded.startswith("/dev/") and found.startswith("/dev/")
                                 and os.path.realpath(found) == os.path.realpath(recorded))


def mount_is_ours(args: dict[str, Any]) -> bool:
    """Is what is mounted at args["mountpoint"] the mount perflab journaled:
    a directory perflab makes (named perflab-*, not a link; or tracefs at its
    own place, OTHER_MOUNTS), mounted from one of args["sources"]?"""
    mountpoint, sources = args.get("mountpoint"), args.get("sources")
    if not isinstance(mountpoint, str) or not os.path.isabs(mountpoint) or os.path.normpath(mountpoint) != mountpoint:
        return False
    if not isinstance(sources, list) or os.path.islink(mountpoint):
        return False
    entry = mount_entry(mountpoint)
    if entry is None:
        return False
    if not os.path.basename(mountpoint).startswith(MADE_PREFIX) and OTHER_MOUNTS.get(mountpoint) != entry["type"]:
        return False
    return any(isinstance(s, str) and _same_source(entry["source"], s) for s in sources)


# --------------------------------------------------------- guardian's undos


def undo_mount(args: dict[str, Any]) -> None:
    """Unmount what is mounted at args["mountpoint"] when it is the mount
    perflab made (`mount_is_ours`: its place and its source): `umount`, and
    `umount -l` when it is busy or slow. Anything else: nothing to do."""
    if not mount_is_ours(args):
        return
    mountpoint = str(args["mountpoint"])
    umount = _tool("umount") or "umount"
    entry = mount_entry(mountpoint)
    # NFS whose server is gone (perflab's delay relay died with it): -f ends the client's retries first
    retries = [["-f"]] if entry is not None and entry["type"].startswith("nfs") else []
    for options in ([], *retries, ["-l"]):
        if _run_bounded([umount, *options, mountpoint], UNDO_STEP_TIMEOUT_S) == 0 or mount_entry(mountpoint) is None:
            return


register_undo("mount", undo_mount)  # a scratch filesystem (or tracefs): unmount it (lazily if busy)


def undo_loop(args: dict[str, Any]) -> None:
    """Detach every loop device on args["backing_file"], a file perflab makes
    (`loop_file_problem`). One still held (by a lazily unmounted filesystem)
    is marked autoclear by the kernel and goes when its last user does."""
    if loop_file_problem(args.get("backing_file")) is not None:
        return
    losetup = _tool("losetup") or "losetup"
    for device in loop_devices_of(args["backing_file"]):
        _run_bounded([losetup, "-d", device], UNDO_STEP_TIMEOUT_S)


register_undo("loop", undo_loop)  # a loop device on a scratch fs's file: detach it


# ---------------------------------------------------------------- preflight


def _kernel_has(fstype: str) -> bool:
    """The running kernel has `fstype`, built in or as a module it can load."""
    with contextlib.suppress(OSError):
        if fstype in (line.split()[-1] for line in Path("/proc/filesystems").read_text().splitlines() if line.strip()):
            return True
    modules = Path("/lib/modules") / os.uname().release
    module = re.compile(rf"(^|/){re.escape(fstype)}\.ko(\.[a-z]+)?:?(\s|$)", re.M)
    for listing in ("modules.builtin", "modules.dep"):
        with contextlib.suppress(OSError):
            if module.search((modules / listing).read_text()):
                return True
    # the name the kernel asks modprobe for: "fs-ext2" may be ext4's module
    with contextlib.suppress(OSError):
        if re.search(rf"^alias fs-{re.escape(fstype)} ", (modules / "modules.alias").read_text(), re.M):
            return True
    return False


def fs_problems(key: str, settings: FsSettings, backing_dir: Path) -> list[tuple[str, str]]:
    """What would stop `ScratchFs.mount()`, found without changing anything:
    (dotted path under `key`, text) pairs, as `perflab check` reports them.
    `backing_dir` is where the backing file would go (settings.backing_dir
    or the caller's default); unused for tmpfs."""
    problems: list[tuple[str, str]] = []
    fstype = settings.type
    if os.geteuid() != 0:
        problems.append((key, f"a scratch filesystem ({fstype}) needs root (mount{'' if fstype == 'tmpfs' else ', losetup'});"
                              " fix: run perflab as root, or drop this key"))
    tools = ["mount", "umount"] if fstype == "tmpfs" else [MKFS[fstype][0], "losetup", "blkid", "mount", "umount"]
    for name in tools:
        if _tool(name) is None:
            problems.append((f"{key}.type", f"{fstype} needs {name}, which is not on PATH; fix: {_install_hint(name)}"))
    if not _kernel_has(fstype):
        problems.append((f"{key}.type", f"the kernel ({os.uname().release}) has no {fstype}: not in /proc/filesystems "
                                        f"and no module of that name in /lib/modules; fix: another type, or a kernel "
                                        f"with {fstype}"))
    if fstype == "tmpfs":
        return problems
    if not LOOP_CONTROL.exists():
        problems.append((key, f"{LOOP_CONTROL} is missing: this machine (or container) has no loop devices; "
                              "fix: `modprobe loop`, or a container with /dev/loop-control"))
    where = f"{key}.backing_dir"
    existing = nearest_existing(backing_dir)
    if not existing.is_dir():
        problems.append((where, f"{backing_dir} cannot be made: {existing} is not a directory"))
        return problems
    if not os.access(existing, os.W_OK | os.X_OK):
        made = "" if existing == backing_dir else f" (it would be made in {existing})"
        problems.append((where, f"{backing_dir} is not writable{made}; fix: a directory perflab may write to"))
        return problems
    assert settings.size is not None  # the model requires it for every type but tmpfs
    try:
        stat = os.statvfs(existing)
    except OSError as e:
        problems.append((where, f"{backing_dir}: cannot read its free space ({e.strerror})"))
        return problems
    free = stat.f_bavail * stat.f_frsize
    if free < settings.size:
        problems.append((f"{key}.size", f"{format_size(settings.size)} does not fit in {backing_dir}, which has "
                                        f"{format_size(free)} free (the sparse backing file fills as the filesystem "
                                        "is written); fix: a smaller size, or a backing_dir with more room"))
    return problems


# --------------------------------------------------------------- ScratchFs


class ScratchFs:
    """One scratch filesystem: made and mounted by `mount()`, unmounted by
    `unmount()` (the backing file stays for a resume), deleted by `discard()`."""

    def __init__(self, name: str, settings: FsSettings, mountpoint: Path, backing_file: Path) -> None:
        for what, path in (("mountpoint", mountpoint), ("backing file", backing_file)):
            if "perflab" not in path.name:
                raise ValueError(f"the {what} {path} is not named perflab...: everything perflab makes is")
        self.name = name
        self.settings = settings
        self.mountpoint = Path(os.path.abspath(mountpoint))
        self.backing_file = Path(os.path.abspath(backing_file))
        self.loop_device: str | None = None
        self._mount_key = f"mount:{self.mountpoint}"
        self._loop_key = f"loop:{self.backing_file}"

    @property
    def loop_backed(self) -> bool:
        return self.settings.type != "tmpfs"

    @property
    def _new_file(self) -> Path:
        return self.backing_file.with_name(self.backing_file.name + NEW_SUFFIX)

    @property
    def _made_file(self) -> Path:
        return self.backing_file.with_name(self.backing_file.name + MADE_SUFFIX)

    def _made(self) -> dict[str, Any]:
        return {"type": self.settings.type, "size": self.settings.size, "mkfs_options": self.settings.mkfs_options}

    def mount(self) -> bool:
        """Make (if new) and mount the filesystem; True when it is new (mkfs
        ran; a tmpfs always), False when an existing backing file was mounted
        again (a resume: no mkfs). On a failure, what this call did is undone
        before the error is raised."""
        if mount_entry(self.mountpoint) is not None:
            raise UserError(f"{self.mountpoint}: something is mounted there already",
                            f"unmount it (`umount {self.mountpoint}`) or choose another directory")
        for tool in ("mount", "umount") if not self.loop_backed else (MKFS[self.settings.type][0], "losetup",
                                                                       "blkid", "mount", "umount"):
            _need_tool(tool)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        if not self.loop_backed:
            options = [f"size={self.settings.size}"] if self.settings.size is not None else []
            self._mount(f"perflab-{self.name}", options + self.settings.mount_option_list() + SAFE_OPTIONS)
            return True  # a tmpfs is new and empty at every mount
        held = loop_devices_of(self.backing_file)
        if held:  # not ours to detach, so refused before anything is made
            raise UserError(f"{self.backing_file} is attached already ({', '.join(held)}): another perflab, "
                            "or one whose guardian died, uses it",
                            f"if no perflab runs, `losetup -d {' '.join(held)}`")
        fresh = self._make_backing_file()
        try:
            self._attach()
            self._mount(self.loop_device or "", self.settings.mount_option_list() + SAFE_OPTIONS)
        except BaseException:
            self.unmount()
            raise
        return fresh

    def _make_backing_file(self) -> bool:
        size = self.settings.size
        assert size is not None
        self._private_backing_dir()
        if os.path.lexists(self.backing_file):
            self._check_existing(size)
            return False
        new = self._new_file
        new.unlink(missing_ok=True)  # left by a perflab killed during mkfs
        try:
            with open(os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600),
                      "wb") as f:
                os.ftruncate(f.fileno(), size)  # sparse: blocks are allocated as they are written
                inode = os.fstat(f.fileno()).st_ino
            mkfs = [_need_tool(MKFS[self.settings.type][0]), *MKFS[self.settings.type][1:],
                    *self.settings.mkfs_argv(), str(new)]
            try:
                proc = _run(mkfs, timeout=MKFS_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise UserError(f"{shlex.join(mkfs)} did not finish within {MKFS_TIMEOUT_S:.0f} s") from None
            if proc.returncode != 0:
                raise UserError(f"{shlex.join(mkfs)} failed (exit status {proc.returncode}): "
                                f"{_last_lines(proc.stderr or proc.stdout)}",
                                f"check mkfs_options ({self.settings.mkfs_options!r})"
                                if self.settings.mkfs_options else None)
            # the mark names the file's inode: it proves this very file perflab's
            write_file(self._made_file, json.dumps({**self._made(), "inode": inode}) + "\n", mode=0o600)
            os.replace(new, self.backing_file)
        except BaseException:
            new.unlink(missing_ok=True)
            raise
        return True

    def _private_backing_dir(self) -> None:
        """The backing file's directory, made 0700 when missing, and used
        only when no other user can write there (a real directory of
        perflab's user: hostctl.shareddir): a file there, and its mark, can
        then only be perflab's. A shared one (/var/tmp) is refused; the
        targets keep their files in a directory of their own in it
        (serverhome.SCRATCH_DIR)."""
        where = self.backing_file.parent
        if not os.path.lexists(where):
            where.parent.mkdir(parents=True, exist_ok=True)
            own_dir(where, 0o700)
        problem = private_dir_problem(where)
        if problem is not None:
            raise UserError(f"{where} {problem}: perflab keeps a filesystem image only in a directory no "
                            "other user can write (a file another user placed there could be mounted)",
                            f"remove {where} if it is not perflab's, or give a backing_dir of root's own")

    def _check_existing(self, size: int) -> None:
        st = os.lstat(self.backing_file)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            raise UserError(f"{self.backing_file} is not a filesystem image perflab made (a link, another "
                            "user's file, or not a regular file); nothing was mounted",
                            f"remove {self.backing_file} so that perflab makes a new one")
        have = st.st_size
        if have != size:
            raise UserError(f"{self.backing_file} holds a {format_size(have)} filesystem; the settings say "
                            f"{format_size(size)}", "discard the old file (delete it) or give its size")
        proc = _run([_need_tool("blkid"), "-p", "-o", "value", "-s", "TYPE", str(self.backing_file)], timeout=30)
        found = proc.stdout.strip()
        if found != self.settings.type:
            raise UserError(f"{self.backing_file} holds {found or 'no filesystem blkid knows'}, not "
                            f"{self.settings.type}", "delete the old file so that perflab makes a new one")
        # A filesystem made with other mkfs options is not the one asked for
        # (a stride study compares exactly those).
        try:
            made = json.loads(self._made_file.read_text())
        except (OSError, ValueError):
            made = None
        if isinstance(made, dict) and made.pop("inode", None) != st.st_ino:
            raise UserError(f"{self.backing_file} is not the file perflab made under that name (its mark "
                            f"{self._made_file.name} names another, or none); nothing was mounted",
                            f"delete {self.backing_file} so that perflab makes a new one")
        if made != self._made():
            was = f"mkfs_options {made.get('mkfs_options')!r}" if isinstance(made, dict) else "unknown options"
            raise UserError(f"{self.backing_file} was made with {was}; the settings say "
                            f"{self.settings.mkfs_options!r}", "delete the old file so that perflab makes a new one")

    def _attach(self) -> None:
        journal().add("loop", self._loop_key, backing_file=str(self.backing_file))
        proc = _run([_need_tool("losetup"), "--find", "--show", str(self.backing_file)], timeout=30)
        if proc.returncode != 0 or not proc.stdout.strip().startswith("/dev/"):
            raise UserError(f"losetup could not attach {self.backing_file}: {_last_lines(proc.stderr)}",
                            "free a loop device (`losetup -a` lists them)")
        self.loop_device = proc.stdout.strip()

    def _mount_sources(self) -> list[str]:
        """What this filesystem is mounted from, as far as perflab can prove it
        its own: the loop device on its backing file, or the tmpfs's name."""
        return loop_devices_of(self.backing_file) if self.loop_backed else [f"perflab-{self.name}"]

    def _mount_args(self, *sources: str) -> dict[str, Any]:
        """The "mount" journal entry's arguments (`undo_mount`'s)."""
        return mount_record(self.mountpoint, [*sources, *self._mount_sources()])

    def _mount(self, source: str, options: list[str]) -> None:
        argv = [_need_tool("mount"), "-t", self.settings.type, *(["-o", ",".join(options)] if options else []),
                source, str(self.mountpoint)]
        journal().add("mount", self._mount_key, **self._mount_args(source))
        proc = _run(argv, timeout=60)
        if proc.returncode != 0:
            undo_mount(self._mount_args(source))  # in case it mounted and failed after
            journal().remove(self._mount_key)
            raise UserError(f"{shlex.join(argv)} failed: {_last_lines(proc.stderr)}",
                            f"check mount_options ({self.settings.mount_options!r})"
                            if self.settings.mount_options else None)

    def unmount(self) -> None:
        """Unmount and detach the loop device (lazily when busy: the kernel
        finishes when the last user goes). The backing file stays.
        Idempotent."""
        undo_mount(self._mount_args())
        journal().remove(self._mount_key)
        if self.loop_backed:
            undo_loop({"backing_file": str(self.backing_file)})
            journal().remove(self._loop_key)
        self.loop_device = None

    def discard(self) -> int:
        """Unmount, then delete the backing file; the bytes it held (its
        allocated blocks; for tmpfs, the memory it used)."""
        freed = 0
        if not self.loop_backed:
            with contextlib.suppress(OSError):
                if mount_entry(self.mountpoint) is not None:
                    st = os.statvfs(self.mountpoint)
                    freed = (st.f_blocks - st.f_bfree) * st.f_frsize
        self.unmount()
        # files only where no other user can write: any there are perflab's
        ours = self.loop_backed and private_dir_problem(self.backing_file.parent) is None
        for path in (self.backing_file, self._new_file, self._made_file) if ours else ():
            with contextlib.suppress(FileNotFoundError):
                freed += path.stat().st_blocks * 512
                path.unlink()
        with contextlib.suppress(OSError):
            self.mountpoint.rmdir()  # only when empty: never a file of someone else
        return freed

    def describe(self) -> dict[str, Any]:
        """What this filesystem is, for the run's record."""
        entry = mount_entry(self.mountpoint)
        # what the filesystem is, not where perflab put it (name, loop device, files)
        return not_setup({
            "name": self.name,
            "type": self.settings.type,
            "size": self.settings.size,
            "loop_backed": self.loop_backed,
            "loop_device": self.loop_device,
            "backing_file": str(self.backing_file) if self.loop_backed else None,
            "mountpoint": str(self.mountpoint),
            "mkfs_options": self.settings.mkfs_options,
            "mount_options": self.settings.mount_options,
            "mounted": entry is not None,
            "mounted_options": entry["options"] if entry is not None else None,
        }, "name", "loop_device", "backing_file", "mountpoint")


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " / ".join(lines[-n:]) or "no message"
