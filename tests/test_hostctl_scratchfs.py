"""Scratch filesystems on real loop devices with real mkfs and mount (root
only), and the guardian unmounting and detaching them after a SIGKILL.

Each test undoes what it made even when it fails (`scratch`), then checks
that nothing is left: no loop device on its files (`losetup -j`), nothing
mounted at its mountpoints (/proc/mounts).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from perflab.errors import UserError
from perflab.guardian import journal
from perflab.hostctl import scratchfs
from perflab.hostctl.mounts import mounts_under
from perflab.hostctl.scratchfs import FsSettings, ScratchFs, fs_problems
from perflab.spec import pydantic_problems

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loop devices and mounts need root")

# The guardian's undo after a SIGKILL, waited for: its promise (within 5 s)
# is a quiet machine's figure, measured by benchmarks/host_changes.py.
GONE_WITHIN_S = 60.0
KEY = "target.storage.data_fs"
SIZES = {"ext4": "64MB", "ext2": "64MB", "xfs": "300MB", "btrfs": "128MB", "tmpfs": "32MB"}


# ------------------------------------------------------------------ helpers


def mounted_at(mountpoint: Path) -> list[tuple[str, str]]:
    """(type, options) of every mount at `mountpoint`, read from /proc/mounts
    (which writes a space in a path as \\040)."""
    with open("/proc/mounts") as f:
        return [(fields[2], fields[3]) for fields in (line.split() for line in f)
                if fields[1].replace("\\040", " ") == str(mountpoint)]


def losetup_j(backing_file: Path) -> str:
    return subprocess.run(["losetup", "-j", str(backing_file)], capture_output=True, text=True,
                          check=True).stdout.strip()


def blkid(path: Path, tag: str) -> str:
    return subprocess.run(["blkid", "-p", "-o", "value", "-s", tag, str(path)], capture_output=True,
                          text=True).stdout.strip()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_until(condition: Callable[[], bool], within: float = GONE_WITHIN_S) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def force_undo(mountpoint: Path, backing_file: Path | None = None) -> None:
    """A test's own cleanup, with the commands themselves (not the code under
    test, which may be what failed): lazy unmounts, then detach."""
    for _ in range(5):  # stacked mounts, if any
        if not mounted_at(mountpoint):
            break
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, timeout=30)
    if backing_file is not None:
        for line in losetup_j(backing_file).splitlines():
            subprocess.run(["losetup", "-d", line.split(":", 1)[0]], capture_output=True, timeout=30)


def settings(fstype: str, **fields: Any) -> FsSettings:
    return FsSettings.model_validate({"type": fstype, "size": SIZES[fstype], **fields})


@pytest.fixture
def scratch(workdir: Path) -> Iterator[Callable[..., ScratchFs]]:
    """Makes ScratchFs objects in `workdir`; afterwards unmounts and detaches
    whatever they left (a failed test's too), then checks nothing is left."""
    made: list[tuple[Path, Path]] = []

    def make(fs_settings: FsSettings, name: str = "data") -> ScratchFs:
        mountpoint, backing_file = workdir / f"perflab-{name}-mnt", workdir / f"perflab-{name}.img"
        made.append((mountpoint, backing_file))
        return ScratchFs(name, fs_settings, mountpoint, backing_file)

    try:
        yield make
    finally:
        for mountpoint, backing_file in made:
            force_undo(mountpoint, backing_file)
        for mountpoint, backing_file in made:
            assert mounted_at(mountpoint) == [], f"{mountpoint} is still mounted"
            assert losetup_j(backing_file) == "", f"{backing_file} is still attached"


@contextlib.contextmanager
def tmpfs_at(path: Path, options: str) -> Iterator[Path]:
    """A small tmpfs for a test's backing directory (read-only, or small)."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "perflab-test", str(path)], check=True)
    try:
        yield path
    finally:
        force_undo(path)
        assert mounted_at(path) == []


# ----------------------------------------------------------------- settings


def problems_of(raw: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        FsSettings.model_validate(raw)
    except ValidationError as e:
        return pydantic_problems(e, ("target", "storage", "data_fs"), FsSettings)
    return []


def test_settings_take_sizes_as_experiment_files_write_them() -> None:
    s = FsSettings.model_validate({"type": "ext2", "size": "8GB", "mkfs_options": "-b 4096 -E stride=16",
                                   "mount_options": "noatime,nodiratime", "backing_dir": "/var/tmp"})
    assert s.size == 8 * 2**30
    assert s.mkfs_argv() == ["-b", "4096", "-E", "stride=16"]
    assert s.mount_option_list() == ["noatime", "nodiratime"]
    assert FsSettings.model_validate({"type": "tmpfs"}).size is None  # the kernel's default size


@pytest.mark.parametrize(("raw", "path", "says"), [
    ({"type": "ext4"}, "size", "missing"),
    ({"type": "xfs", "size": "299MB"}, "size", "at least 300MB"),
    ({"type": "btrfs", "size": "100MB"}, "size", "at least 109MB (mkfs.btrfs refuses"),
    ({"type": "ext4", "size": 8}, "size", "at least 16MB"),
    ({"type": "zfs", "size": "1GB"}, "type", "'ext4', 'xfs', 'btrfs', 'ext2', 'tmpfs', 'sshfs' or 'nfs'"),
    ({"type": "tmpfs", "mkfs_options": "-b 1024"}, "mkfs_options", "nothing for tmpfs"),
    ({"type": "tmpfs", "backing_dir": "/var/tmp"}, "backing_dir", "nothing for tmpfs"),
    ({"type": "ext4", "size": "1GB", "mkfs_options": "-L 'x"}, "mkfs_options", "as a shell would split"),
    ({"type": "ext4", "size": "1GB", "mount_options": "noatime, sync"}, "mount_options", "without spaces"),
    ({"type": "ext4", "size": "1GB", "backing_dir": "tmp"}, "backing_dir", "absolute"),
    ({"type": "ext4", "size": "1GB", "fs": "x"}, "fs", "unknown key"),
])
def test_settings_refuse_with_the_key_and_what_is_allowed(raw: dict[str, Any], path: str, says: str) -> None:
    problems = problems_of(raw)
    assert len(problems) == 1, problems
    assert problems[0][0] == f"target.storage.data_fs.{path}"
    assert says in problems[0][1]


# --------------------------------------------------------- mount, resume, discard


@pytest.mark.parametrize("fstype", ["ext4", "xfs", "btrfs", "ext2", "tmpfs"])
def test_mount_write_unmount_remount_discard(fstype: str, scratch: Callable[..., ScratchFs],
                                             workdir: Path) -> None:
    s = settings(fstype, mount_options="noatime")
    assert fs_problems(KEY, s, workdir) == []
    fs = scratch(s)
    assert fs.mount() is True
    assert [t for t, _ in mounted_at(fs.mountpoint)] == [fstype]
    assert "noatime" in mounted_at(fs.mountpoint)[0][1].split(",")
    described = fs.describe()
    assert described["type"] == fstype and described["size"] == s.size and described["mounted"]
    assert described["mounted_options"] == mounted_at(fs.mountpoint)[0][1]
    assert described["loop_backed"] is (fstype != "tmpfs")
    if fstype == "tmpfs":
        assert described["loop_device"] is None and described["backing_file"] is None
        assert f"size={s.size // 1024}k" in described["mounted_options"]
    else:
        assert described["loop_device"] in losetup_j(fs.backing_file)
        assert described["backing_file"] == str(fs.backing_file)
        assert fs.backing_file.stat().st_blocks * 512 < fs.backing_file.stat().st_size  # sparse
    (fs.mountpoint / "perflab-kept").write_text("kept")
    assert set(journal()._entries) >= {f"mount:{fs.mountpoint}"}

    fs.unmount()
    fs.unmount()  # idempotent
    assert mounted_at(fs.mountpoint) == []
    assert not any(key.endswith(str(fs.mountpoint)) or key.endswith(str(fs.backing_file))
                   for key in journal()._entries)
    if fstype != "tmpfs":
        assert losetup_j(fs.backing_file) == ""
        uuid = blkid(fs.backing_file, "UUID")
        assert fs.mount() is False  # a resume: mounted again, no mkfs
        assert blkid(fs.backing_file, "UUID") == uuid
        assert (fs.mountpoint / "perflab-kept").read_text() == "kept"
    else:
        assert fs.mount() is True  # a tmpfs is new at every mount
        assert not (fs.mountpoint / "perflab-kept").exists()

    freed = fs.discard()
    assert mounted_at(fs.mountpoint) == [] and not fs.mountpoint.exists()
    if fstype != "tmpfs":
        assert freed > 0 and not fs.backing_file.exists()
        assert losetup_j(fs.backing_file) == ""
    assert fs.discard() == 0  # nothing left to discard


@pytest.mark.parametrize("fstype", ["ext4", "ext2"])
def test_mkfs_options_are_honoured(fstype: str, scratch: Callable[..., ScratchFs]) -> None:
    fs = scratch(settings(fstype, mkfs_options="-b 2048 -E stride=16"))
    assert fs.mount() is True
    header = subprocess.run(["dumpe2fs", "-h", str(fs.backing_file)], capture_output=True, text=True,
                            check=True).stdout
    assert re.search(r"^Block size:\s+2048$", header, re.M)
    assert re.search(r"^RAID stride:\s+16$", header, re.M)
    fs.discard()


def test_a_failed_mkfs_leaves_nothing(scratch: Callable[..., ScratchFs]) -> None:
    fs = scratch(settings("ext4", mkfs_options="-E no-such-option=1"))
    with pytest.raises(UserError) as raised:
        fs.mount()
    assert "mkfs.ext4" in raised.value.message and "mkfs_options" in str(raised.value.hint)
    assert not fs.backing_file.exists()
    assert list(fs.backing_file.parent.glob("*.perflab-new")) == []
    assert mounted_at(fs.mountpoint) == [] and losetup_j(fs.backing_file) == ""


def test_a_failed_mount_detaches_and_keeps_the_filesystem(scratch: Callable[..., ScratchFs]) -> None:
    fs = scratch(settings("ext4", mount_options="no_such_option"))
    with pytest.raises(UserError) as raised:
        fs.mount()
    assert "mount_options" in str(raised.value.hint)
    assert mounted_at(fs.mountpoint) == [] and losetup_j(fs.backing_file) == ""
    assert not any(str(fs.backing_file) in key for key in journal()._entries)
    # the filesystem was made; fixed options mount it without mkfs
    fixed = scratch(settings("ext4", mount_options="noatime"))
    assert fixed.mount() is False
    fixed.discard()


def test_a_backing_file_made_otherwise_is_refused(scratch: Callable[..., ScratchFs]) -> None:
    fs = scratch(settings("ext2"))
    fs.mount()
    fs.unmount()
    with pytest.raises(UserError, match="holds ext2, not ext4"):
        scratch(settings("ext4")).mount()
    with pytest.raises(UserError, match="was made with mkfs_options ''; the settings say '-E stride=16'"):
        scratch(settings("ext2", mkfs_options="-E stride=16")).mount()
    with pytest.raises(UserError, match="holds a 64MB filesystem; the settings say 128MB"):
        scratch(settings("ext2", size="128MB")).mount()
    assert losetup_j(fs.backing_file) == "" and mounted_at(fs.mountpoint) == []
    assert fs.mount() is False  # refused, not spoilt
    fs.discard()
    assert list(fs.backing_file.parent.glob(f"{fs.backing_file.name}*")) == []


# ---------------------------------------------------------------- preflight


def test_a_missing_mkfs_is_a_problem_with_its_package(workdir: Path, monkeypatch: pytest.MonkeyPatch,
                                                      scratch: Callable[..., ScratchFs]) -> None:
    bin_dir = workdir / "perflab-bin"  # PATH with every tool but mkfs.xfs
    bin_dir.mkdir()
    for tool in ("losetup", "blkid", "mount", "umount", "mkfs.ext4"):
        (bin_dir / tool).symlink_to(subprocess.run(["which", tool], capture_output=True, text=True,
                                                   check=True).stdout.strip())
    monkeypatch.setenv("PATH", str(bin_dir))
    assert fs_problems(KEY, settings("ext4"), workdir) == []
    problems = fs_problems(KEY, settings("xfs"), workdir)
    assert problems == [(f"{KEY}.type", "xfs needs mkfs.xfs, which is not on PATH; "
                                        "fix: install xfsprogs (`./dev setup` installs it)")]
    fs = scratch(settings("xfs"))
    with pytest.raises(UserError, match="mkfs.xfs not found"):
        fs.mount()
    assert not fs.backing_file.exists() and not fs.mountpoint.exists()  # nothing was made


def test_an_unwritable_or_impossible_backing_dir_is_a_problem(workdir: Path) -> None:
    with tmpfs_at(workdir / "perflab-ro", "ro,size=1m") as ro:
        problems = fs_problems(KEY, settings("ext4"), ro / "perflab-files")
        assert problems == [(f"{KEY}.backing_dir", f"{ro}/perflab-files is not writable (it would be made in "
                                                   f"{ro}); fix: a directory perflab may write to")]
    a_file = workdir / "perflab-a-file"
    a_file.write_text("")
    problems = fs_problems(KEY, settings("ext4"), a_file / "sub")
    assert problems == [(f"{KEY}.backing_dir", f"{a_file}/sub cannot be made: {a_file} is not a directory")]


def test_mounts_under_sees_a_mount_below_a_path_and_no_other(workdir: Path) -> None:
    """What the cluster-home sweep asks before it removes a directory: a
    mount at or below it (the name's space escaped in /proc/mounts), not one
    beside it whose name merely starts the same."""
    parent = workdir / "perflab home"
    parent.mkdir()
    assert not mounts_under(parent)
    with tmpfs_at(parent / "m", "size=1m") as mountpoint:
        assert mounts_under(parent)
        assert mounts_under(mountpoint)
        assert not mounts_under(workdir / "perflab hom")
        assert not mounts_under(mountpoint / "below")
    assert not mounts_under(parent)


def test_too_little_free_space_is_a_problem(workdir: Path) -> None:
    with tmpfs_at(workdir / "perflab-small", "size=16m") as small:
        problems = fs_problems(KEY, settings("ext4"), small)
        assert [path for path, _ in problems] == [f"{KEY}.size"]
        assert "64MB does not fit" in problems[0][1] and "sparse" in problems[0][1]


def test_not_root_is_a_problem(workdir: Path) -> None:
    # a real unprivileged process: this interpreter, its imports done, as nobody
    script = textwrap.dedent("""
        import json, os, sys
        from pathlib import Path
        from perflab.hostctl.scratchfs import FsSettings, fs_problems
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
        for fstype, size in (("ext4", "64MB"), ("tmpfs", "32MB")):
            s = FsSettings.model_validate({"type": fstype, "size": size})
            print(json.dumps(fs_problems("k", s, Path(sys.argv[1]) / "perflab-files")))
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(workdir)], capture_output=True, text=True,
                          timeout=60, check=True)
    ext4, tmpfs = (json.loads(line) for line in proc.stdout.splitlines())
    assert ["k", "a scratch filesystem (ext4) needs root (mount, losetup); fix: run perflab as root, or drop "
                 "this key"] in ext4
    assert ["k.backing_dir", f"{workdir}/perflab-files is not writable (it would be made in {workdir}); "
                             "fix: a directory perflab may write to"] in ext4
    assert [path for path, _ in tmpfs] == ["k"]


def test_the_kernel_check_reads_what_the_kernel_has() -> None:
    assert all(scratchfs._kernel_has(t) for t in SIZES)  # this test machine has them all
    assert not scratchfs._kernel_has("perflabfs")


# ------------------------------------------------------------------- SIGKILL


MOUNT_THEN_DIE = textwrap.dedent("""
    import os, signal, subprocess, sys
    from pathlib import Path
    from perflab.guardian import journal
    from perflab.hostctl.scratchfs import FsSettings, ScratchFs
    d = Path(sys.argv[1])
    fs = ScratchFs("data", FsSettings.model_validate({"type": "ext4", "size": "64MB"}),
                   d / "perflab-data-mnt", d / "perflab-data.img")
    fs.mount()
    (fs.mountpoint / "perflab-written").write_text("written")
    busy = None
    if sys.argv[2] == "busy":  # a process outliving perflab, its directory in the mount
        busy = subprocess.Popen(["sleep", "300"], cwd=fs.mountpoint, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid
    print(journal().guardian_pid(), fs.loop_device, busy, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _mount_then_die(workdir: Path, busy: bool) -> tuple[int, str, int | None]:
    proc = subprocess.run([sys.executable, "-c", MOUNT_THEN_DIE, str(workdir), "busy" if busy else "idle"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    guardian, device, sleeper = proc.stdout.split()
    return int(guardian), device, None if sleeper == "None" else int(sleeper)


def test_after_a_sigkill_the_guardian_unmounts_and_detaches(workdir: Path,
                                                            scratch: Callable[..., ScratchFs]) -> None:
    fs = scratch(settings("ext4"))  # the child's paths, for the cleanup and the resume below
    guardian, device, _ = _mount_then_die(workdir, busy=False)
    assert wait_until(lambda: not mounted_at(fs.mountpoint) and not losetup_j(fs.backing_file)), \
        f"after {GONE_WITHIN_S} s: mounted {mounted_at(fs.mountpoint)}, attached {losetup_j(fs.backing_file)!r}"
    assert wait_until(lambda: not alive(guardian))
    # the backing file is kept for a resume, and holds what was written
    assert fs.mount() is False
    assert (fs.mountpoint / "perflab-written").read_text() == "written"
    fs.discard()


def test_after_a_sigkill_a_busy_mount_is_unmounted_lazily_and_detached(workdir: Path,
                                                                      scratch: Callable[..., ScratchFs]) -> None:
    fs = scratch(settings("ext4"))
    sleeper = None
    try:
        guardian, device, sleeper = _mount_then_die(workdir, busy=True)
        assert sleeper is not None
        assert wait_until(lambda: not mounted_at(fs.mountpoint)), "the busy mount outlived perflab by 5 s"
        assert wait_until(lambda: not alive(guardian))
        # the sleeper keeps the filesystem, so the loop device, until it goes;
        # the guardian's `losetup -d` has marked it to be detached then
        assert alive(sleeper)
        autoclear = Path("/sys/block") / device.removeprefix("/dev/") / "loop" / "autoclear"
        assert device in losetup_j(fs.backing_file) and autoclear.read_text().strip() == "1"
        os.kill(sleeper, signal.SIGKILL)
        assert wait_until(lambda: not losetup_j(fs.backing_file)), "the loop device outlived its last user"
    finally:
        if sleeper is not None and alive(sleeper):
            os.kill(sleeper, signal.SIGKILL)
            wait_until(lambda: not alive(sleeper))
