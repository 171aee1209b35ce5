"""A striped scratch filesystem: RAID-0 over N loop devices, each on its own
backing file ([target.storage] `data_fs`/`wal_fs` with `raid`):

    data_fs = { type = "ext2", size = "2GB", backing_dir = ["/disk1", "/disk2"],
                raid = { level = 0, devices = 2, chunk = "512KB", stride = true } }

Two ways, and `check` says which will run (`stripe_note`):

- md, where the kernel has it (/proc/mdstat) and mdadm is installed: `mdadm
  --create` over the loop devices with the chunk asked for, then mkfs on the
  array; ext2/ext4 get `-E stride=,stripe_width=` from the chunk (4 KiB
  blocks) unless `stride = false`. The array: kind "md", key
  f"md:{backing_file}"; its undo (`undo_md`) is `mdadm --stop`, only when
  every member of the array is a loop device on one of the journaled files.
- without md: btrfs's own RAID-0 (`mkfs.btrfs -d raid0 -m raid0` over the
  files), whose stripe is fixed (64 KiB): a `chunk` is refused at `check`,
  naming what the kernel lacks and the stand-in, and so is another type.

Each device is a loop device on a sparse file of size/devices, journaled as
scratchfs's are (kind "loop"), and the mount too (kind "mount"); the
guardian undoes newest first: the mount, the array, the loop devices. The
filesystem is whole when its mark (`<first file>.perflab-mkfs.json`, with
every file's inode) exists: it is written last, so a perflab killed while
making one leaves files without a mark, removed and made again by the next
`mount()`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

from perflab.errors import UserError
from perflab.guardian import journal, register_undo
from perflab.hostctl import scratchfs
from perflab.hostctl.mounts import mount_entry
from perflab.hostctl.scratchfs import (
    MKFS,
    MKFS_TIMEOUT_S,
    SAFE_OPTIONS,
    UNDO_STEP_TIMEOUT_S,
    FsSettings,
    ScratchFs,
    fs_problems,
    loop_devices_of,
    undo_loop,
    undo_mount,
)
from perflab.hostctl.shareddir import private_dir_problem, write_file
from perflab.model import not_setup
from perflab.units import format_size

MDSTAT = Path("/proc/mdstat")
BTRFS_STRIPE = 64 * 1024  # btrfs's RAID-0 stripe length (BTRFS_STRIPE_LEN), not settable
BLOCK = 4096  # the block size mkfs is given on md, which the stride is counted in


def md_missing() -> str | None:
    """Why md cannot be used here (None: it can): the kernel's md (/proc/mdstat) and mdadm."""
    if not MDSTAT.exists():
        return f"this kernel ({os.uname().release}) has no md (no {MDSTAT})"
    if shutil.which("mdadm") is None:
        return "mdadm is not installed (Debian: mdadm)"
    return None


def stripe_note(key: str, settings: FsSettings) -> str:
    """What `check` says about a stripe: which path will run."""
    raid = settings.raid
    assert raid is not None
    missing = md_missing()
    if missing is None:
        chunk = format_size(raid.chunk) if raid.chunk else "mdadm's default chunk"
        stride = (", with stride and stripe_width from the chunk" if raid.stride and settings.type in ("ext2", "ext4")
                  else "")
        return f"{key}.raid: md RAID-0 over {raid.devices} loop devices, {chunk}, {settings.type}{stride}"
    return (f"{key}.raid: btrfs RAID-0 over {raid.devices} loop devices (its stripe is {BTRFS_STRIPE // 1024} KiB); "
            f"md is not used: {missing}")


def stripe_problems(key: str, settings: FsSettings, backing_dirs: list[Path]) -> list[tuple[str, str]]:
    """What would stop `StripedFs.mount()`, found without changing anything."""
    raid = settings.raid
    assert raid is not None and settings.size is not None
    problems: list[tuple[str, str]] = []
    missing = md_missing()
    if missing is not None:
        stand_in = (f"perflab's stand-in is btrfs's own RAID-0 over {raid.devices} loop devices, whose stripe is "
                    f"fixed at {BTRFS_STRIPE // 1024} KiB")
        if raid.chunk is not None:
            problems.append((f"{key}.raid.chunk", f"a chunk of {format_size(raid.chunk)} needs md, and {missing}: "
                             f"{stand_in}; fix: drop raid.chunk, or run on a machine with md (the md module and "
                             "mdadm)"))
        if settings.type != "btrfs":
            problems.append((f"{key}.type", f"a {settings.type} stripe needs md, and {missing}: {stand_in}; fix: "
                             'type = "btrfs", or run on a machine with md (the md module and mdadm)'))
    per_device = settings.model_copy(update={"size": settings.size // raid.devices, "raid": None,
                                             "backing_dir": None})
    for where in dict.fromkeys(backing_dirs):
        for problem in fs_problems(key, per_device, where):
            if problem not in problems:
                problems.append(problem)
    return problems


def undo_md(args: dict[str, Any]) -> None:
    """Stop the md array args["device"] when every member of it is a loop
    device on one of args["backing_files"] (proof that it is perflab's)."""
    device = os.path.realpath(str(args["device"]))
    members = Path("/sys/block") / os.path.basename(device) / "slaves"
    try:
        loops = os.listdir(members)
    except OSError:
        return  # no such array (stopped already)
    files = {str(f) for f in args.get("backing_files", [])}
    for loop in loops:
        with contextlib.suppress(OSError):
            if (Path("/sys/block") / loop / "loop" / "backing_file").read_text().strip() in files:
                continue
        return  # a member perflab did not make: not ours to stop
    scratchfs._run_bounded([shutil.which("mdadm") or "mdadm", "--stop", device], UNDO_STEP_TIMEOUT_S * 3)


register_undo("md", undo_md)  # an md array over perflab's loop devices: mdadm --stop


class StripedFs(ScratchFs):
    """A scratch filesystem over `settings.raid.devices` loop devices: made
    and mounted by `mount()`, unmounted (array stopped, devices detached) by
    `unmount()`, its files deleted by `discard()`."""

    def __init__(self, name: str, settings: FsSettings, mountpoint: Path, backing_files: list[Path]) -> None:
        super().__init__(name, settings, mountpoint, backing_files[0])
        assert settings.raid is not None and settings.size is not None
        self.raid = settings.raid
        self.backing_files = [Path(os.path.abspath(f)) for f in backing_files]
        self.device_size = settings.size // self.raid.devices // 2**20 * 2**20
        self.by = "btrfs" if md_missing() is not None else "md"
        self.md_device = f"/dev/md/{name}"
        self.loop_devices: list[str] = []
        self._md_key = f"md:{self.backing_file}"

    def _made(self) -> dict[str, Any]:
        return {**super()._made(), "raid": self.raid.model_dump(), "by": self.by}

    def mount(self) -> bool:
        if mount_entry(self.mountpoint) is not None:
            raise UserError(f"{self.mountpoint}: something is mounted there already",
                            f"unmount it (`umount {self.mountpoint}`) or choose another directory")
        for tool in (MKFS[self.settings.type][0], "losetup", "mount", "umount", *(["mdadm"] if self.by == "md" else [])):
            scratchfs._need_tool(tool)
        held = [d for f in self.backing_files for d in loop_devices_of(f)]
        if held:
            raise UserError(f"{', '.join(map(str, self.backing_files))}: attached already ({', '.join(held)}): "
                            "another perflab, or one whose guardian died, uses them",
                            f"if no perflab runs, `losetup -d {' '.join(held)}`")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        try:
            fresh = not self._whole()
            if fresh:
                self._make_files()
            for f in self.backing_files:
                self._attach_file(f)
            source = self.loop_devices[0]
            options = self.settings.mount_option_list() + SAFE_OPTIONS
            if self.by == "md":
                self._md(fresh)
                source = self.md_device
            else:
                options += [f"device={d}" for d in self.loop_devices]
            if fresh and self.by == "md":
                self._mkfs([self.md_device])
            if fresh:
                self._mark()
            self._mount(source, options)
        except BaseException:
            self.unmount()
            raise
        return fresh

    # -- the files

    @property
    def _all_files(self) -> list[Path]:
        return [p for f in self.backing_files for p in (f, f.with_name(f.name + scratchfs.NEW_SUFFIX))]

    def _whole(self) -> bool:
        """Do the files hold a whole filesystem made with these settings?
        (Files without a mark are a perflab killed while making them: made again.)"""
        for where in dict.fromkeys(f.parent for f in self.backing_files):
            self._private_dir(where)
        try:
            made = json.loads(self._made_file.read_text())
        except (OSError, ValueError):
            return False
        inodes = made.pop("inodes", None) if isinstance(made, dict) else None
        for f, inode in zip(self.backing_files, inodes or [], strict=False):
            st = os.lstat(f) if os.path.lexists(f) else None
            if st is None or not stat.S_ISREG(st.st_mode) or st.st_ino != inode or st.st_nlink != 1:
                raise UserError(f"{f} is not the file perflab made for {self.name} (its mark names another); "
                                "nothing was mounted", f"delete {', '.join(map(str, self.backing_files))} and "
                                f"{self._made_file} so that perflab makes them again")
        if made != self._made() or len(inodes or []) != len(self.backing_files):
            raise UserError(f"{self.backing_file} and its fellows were made with other settings ({made}); the "
                            f"settings say {self._made()}", f"delete {self._made_file} so that perflab makes "
                            "the stripe again")
        return True

    def _private_dir(self, where: Path) -> None:
        saved = self.backing_file
        self.backing_file = where / saved.name
        try:
            self._private_backing_dir()
        finally:
            self.backing_file = saved

    def _make_files(self) -> None:
        self._made_file.unlink(missing_ok=True)
        for path in self._all_files:  # left by a perflab killed while making them
            path.unlink(missing_ok=True)
        for f in self.backing_files:
            with open(os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), "wb") as fh:
                os.ftruncate(fh.fileno(), self.device_size)
        if self.by == "btrfs":
            self._mkfs([str(f) for f in self.backing_files], ["-d", "raid0", "-m", "raid0"])

    def _mkfs(self, devices: list[str], extra: list[str] | None = None) -> None:
        argv = [scratchfs._need_tool(MKFS[self.settings.type][0]), *MKFS[self.settings.type][1:], *(extra or []),
                *self._stride_options(), *self.settings.mkfs_argv(), *devices]
        try:
            proc = scratchfs._run(argv, timeout=MKFS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise UserError(f"{shlex.join(argv)} did not finish within {MKFS_TIMEOUT_S:.0f} s") from None
        if proc.returncode != 0:
            raise UserError(f"{shlex.join(argv)} failed (exit status {proc.returncode}): "
                            f"{scratchfs._last_lines(proc.stderr or proc.stdout)}",
                            f"check mkfs_options ({self.settings.mkfs_options!r})" if self.settings.mkfs_options
                            else None)

    def _stride_options(self) -> list[str]:
        """ext2/ext4 on md: the stride (the chunk in blocks) and the stripe width (stride x devices)."""
        if self.by != "md" or not self.raid.stride or self.settings.type not in ("ext2", "ext4"):
            return []
        stride = (self.raid.chunk or 512 * 1024) // BLOCK
        return ["-b", str(BLOCK), "-E", f"stride={stride},stripe_width={stride * self.raid.devices}"]

    def _mark(self) -> None:
        inodes = [os.lstat(f).st_ino for f in self.backing_files]
        write_file(self._made_file, json.dumps({**self._made(), "inodes": inodes}) + "\n", mode=0o600)

    # -- devices

    def _attach_file(self, backing_file: Path) -> None:
        journal().add("loop", f"loop:{backing_file}", backing_file=str(backing_file))
        proc = scratchfs._run([scratchfs._need_tool("losetup"), "--find", "--show", str(backing_file)], timeout=30)
        if proc.returncode != 0 or not proc.stdout.strip().startswith("/dev/"):
            raise UserError(f"losetup could not attach {backing_file}: {scratchfs._last_lines(proc.stderr)}",
                            "free a loop device (`losetup -a` lists them)")
        self.loop_devices.append(proc.stdout.strip())
        self.loop_device = self.loop_devices[0]

    def _md(self, fresh: bool) -> None:
        journal().add("md", self._md_key, device=self.md_device, backing_files=[str(f) for f in self.backing_files])
        mdadm = scratchfs._need_tool("mdadm")
        if fresh:
            argv = [mdadm, "--create", self.md_device, "--run", "--level=0", "--metadata=1.2",
                    f"--raid-devices={self.raid.devices}",
                    *([f"--chunk={self.raid.chunk // 1024}"] if self.raid.chunk else []), *self.loop_devices]
        else:
            argv = [mdadm, "--assemble", self.md_device, "--run", *self.loop_devices]
        proc = scratchfs._run(argv, timeout=60)
        if proc.returncode != 0:
            raise UserError(f"{shlex.join(argv)} failed: {scratchfs._last_lines(proc.stderr or proc.stdout)}")

    def _mount_sources(self) -> list[str]:
        """The md array, or (btrfs) any of the loop devices on the files."""
        return [*([self.md_device] if self.by == "md" else []),
                *(d for f in self.backing_files for d in loop_devices_of(f))]

    def unmount(self) -> None:
        undo_mount(self._mount_args())
        journal().remove(self._mount_key)
        if self.by == "md":
            undo_md({"device": self.md_device, "backing_files": [str(f) for f in self.backing_files]})
            journal().remove(self._md_key)
        elif self.loop_devices and (btrfs := shutil.which("btrfs")):
            # the kernel's btrfs keeps a list of the devices it scanned: this one's go with their loop devices
            for device in self.loop_devices:
                scratchfs._run_bounded([btrfs, "device", "scan", "--forget", device], UNDO_STEP_TIMEOUT_S)
        for f in self.backing_files:
            undo_loop({"backing_file": str(f)})
            journal().remove(f"loop:{f}")
        self.loop_devices = []
        self.loop_device = None

    def discard(self) -> int:
        self.unmount()
        freed = 0
        for path in [*self._all_files, self._made_file]:
            if private_dir_problem(path.parent) is not None:
                continue  # files only where no other user can write: any there are perflab's
            with contextlib.suppress(FileNotFoundError):
                freed += path.stat().st_blocks * 512
                path.unlink()
        with contextlib.suppress(OSError):
            self.mountpoint.rmdir()
        return freed

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["raid"] = {"level": self.raid.level, "devices": self.raid.devices, "by": self.by,
                        "chunk": self.raid.chunk if self.by == "md" else BTRFS_STRIPE,
                        "stride": bool(self._stride_options())}
        info["backing_files"] = [str(f) for f in self.backing_files]
        info["loop_devices"] = list(self.loop_devices)
        return not_setup(info, "name", "loop_device", "backing_file", "mountpoint", "backing_files", "loop_devices")
