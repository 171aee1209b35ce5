"""Paths perflab makes where other users may write too (issue 50's third
item): a cluster or web home under /tmp that another user made first, a
served tree holding a link out of it, a filesystem image placed in a shared
backing directory. Each is refused or passed by, never followed; and every
scratch filesystem is mounted nosuid,nodev.

Each trap is laid as another user would lay it (files of `nobody`'s, or
root's own symlink that perflab might take for its directory), around
decoys: root-only files that must stay as they were, byte for byte, with
their owner and mode."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from perflab.errors import UserError
from perflab.hostctl.scratchfs import FsSettings, ScratchFs
from perflab.hostctl.shareddir import own_dir, write_file
from perflab.targets.mariadb import MariadbSettings, MariadbTarget
from perflab.targets.postgres import CREATED_MARK, PostgresSettings, PostgresTarget
from perflab.targets.postgres.homes import home_name, sweep_orphan_homes
from perflab.targets.process import ProcessSettings, ProcessTarget
from perflab.targets.serverhome import scratch_filesystems, scratch_problems
from perflab.targets.webserver import linked_tree
from test_hostctl_scratchfs import force_undo, losetup_j

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the traps are laid for perflab as root")
NOBODY = pwd.getpwnam("nobody")


def nobodys(path: Path) -> Path:
    """`path` given to nobody (a symlink itself, not what it names): as if nobody made it."""
    os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid, follow_symlinks=False)
    return path


@dataclass
class Decoy:
    """A root-only file (0600) in a root-only directory, as it was made."""

    path: Path
    data: bytes

    def state(self) -> tuple[bytes, int, int]:
        st = os.lstat(self.path)
        return self.path.read_bytes(), st.st_uid, st.st_mode

    def untouched(self) -> bool:
        return self.state() == (self.data, 0, 0o100600)


def decoy(directory: Path, name: str) -> Decoy:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / name
    data = f"root's own {name}, not to be written by perflab\n".encode()
    path.write_bytes(data)
    path.chmod(0o600)
    return Decoy(path, data)


# ------------------------------------------------------------ the building blocks


def test_a_file_written_over_a_symlink_replaces_the_link(tmp_path: Path) -> None:
    kept = decoy(tmp_path / "vault", "kept")
    link = tmp_path / "perflab.conf"
    link.symlink_to(kept.path)
    write_file(link, "port = 1\n")
    assert kept.untouched()
    assert not link.is_symlink() and link.read_text() == "port = 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["perflab.conf", "vault"]  # no temporary left


def test_a_directory_that_is_a_symlink_is_refused_and_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    home = tmp_path / "perflab-home"
    home.symlink_to(elsewhere)
    with pytest.raises(UserError) as raised:
        own_dir(home, 0o755)
    assert str(home) in str(raised.value)
    assert (elsewhere.stat().st_mode & 0o777) == 0o700
    with pytest.raises(UserError):
        own_dir(elsewhere, reuse=False)  # one that must be new is never taken
    assert own_dir(tmp_path / "new", 0o750).stat().st_mode & 0o777 == 0o750  # whatever the umask


# ------------------------------------------------------------ cluster homes under /tmp


def _listing(home: Path) -> list[tuple[str, int]]:
    """What is at `home` (not followed): each path under it, with its owner."""
    if home.is_symlink():
        return [(os.readlink(home), os.lstat(home).st_uid)]
    return sorted((str(Path(base, name).relative_to(home)), os.lstat(Path(base, name)).st_uid)
                  for base, dirs, files in os.walk(home) for name in dirs + files)


def _target(kind: str, workdir: Path) -> PostgresTarget | MariadbTarget:
    if kind == "postgres":
        return PostgresTarget(PostgresSettings.model_validate({"kind": "postgres"}), workdir)
    return MariadbTarget(MariadbSettings.model_validate({"kind": "mariadb"}), workdir)


@as_root
@pytest.mark.parametrize("trap", ["nobody's directory", "nobody's emptied home", "root's symlink"])
@pytest.mark.parametrize("kind", ["postgres", "mariadb"])
def test_a_cluster_home_another_user_made_first_is_refused(kind: str, trap: str, workdir: Path,
                                                           tmp_path: Path) -> None:
    """The output directory is one the server's user cannot reach, so the
    cluster's home is /tmp/perflab-<digest>, a name anyone can compute. Made
    first by nobody and filled with symlinks to root's files (the owner
    mark's temporary file, the cluster's perflab.conf), or made a symlink to
    a root-only directory: perflab refuses it, and writes, chmods and chowns
    nothing through it."""
    vault = tmp_path / "vault"
    private = workdir / "private"
    private.mkdir(mode=0o700)
    target = _target(kind, private / "t")
    home = Path(tempfile.gettempdir()) / home_name(private / "t")
    if trap == "nobody's directory":
        decoys = [decoy(vault, "owner-mark"), decoy(vault, "conf")]
        home.mkdir(mode=0o755)
        nobodys(home)
        link = home / f".perflab-owner.{os.getpid()}"  # the owner mark's temporary name
        link.symlink_to(decoys[0].path)
        nobodys(link)
        # a forged cluster perflab would take for its own, its perflab.conf root's file
        pgdata = home / "pgdata"
        pgdata.mkdir(mode=0o700)
        nobodys(pgdata)
        for name, text in (("PG_VERSION", "15\n"), (CREATED_MARK, "created by perflab initdb\n"),
                           ("postgresql.conf", ""), ("pg_hba.conf", "local all all trust\n")):
            (pgdata / name).write_text(text)
            nobodys(pgdata / name)
        (pgdata / "perflab.conf").symlink_to(decoys[1].path)
        nobodys(pgdata / "perflab.conf")
    elif trap == "nobody's emptied home":
        # what perflab leaves of a home once the data is gone: its mark and the server's log
        decoys = [decoy(vault, "log")]
        home.mkdir(mode=0o755)
        nobodys(home)
        (home / "perflab-owner").write_text(f"{private / 't'}\n")
        nobodys(home / "perflab-owner")
        (home / "server.log").symlink_to(decoys[0].path)
        nobodys(home / "server.log")
    else:
        decoys = [decoy(vault / "home", "perflab-owner")]
        home.symlink_to(vault / "home")
    laid = _listing(home)
    refused: Exception | None = None
    try:
        try:
            target.provision()
        except Exception as exc:  # what matters first is what was left alone
            refused = exc
        finally:
            target.teardown()
        target.discard_data()  # as `perflab clean` does: nothing there is perflab's
        left = _listing(home)
    finally:
        if home.is_symlink():
            home.unlink()
        else:
            shutil.rmtree(home, ignore_errors=True)
    assert left == laid
    assert [d.state() for d in decoys] == [(d.data, 0, 0o100600) for d in decoys]
    assert sorted(p.name for p in decoys[0].path.parent.iterdir()) == sorted(d.path.name for d in decoys)
    assert (decoys[0].path.parent.stat().st_mode & 0o777) == 0o700
    log = private / "t" / "server.log"
    assert not any(d.data in (log.read_bytes() if log.exists() else b"") for d in decoys)
    assert isinstance(refused, UserError) and str(home) in str(refused), refused


@as_root
def test_a_home_another_user_made_is_never_swept(tmp_path: Path) -> None:
    """A directory of nobody's named as a home and marked for an output
    directory that is gone: the sweep neither reads it nor removes it (it
    removes perflab's own, made alike, beside it)."""
    gone = tmp_path / "gone" / "t"
    theirs, ours = (tmp_path / where / home_name(gone) for where in ("a", "b"))
    for home in (theirs, ours):
        home.mkdir(mode=0o755, parents=True)
        (home / "perflab-owner").write_text(f"{gone}\n")
    nobodys(theirs / "perflab-owner")
    nobodys(theirs)
    assert [h for h, _ in sweep_orphan_homes(tmp_path / "a")] == []
    assert [h for h, _ in sweep_orphan_homes(tmp_path / "b")] == [ours]
    assert theirs.is_dir() and (theirs / "perflab-owner").read_text() == f"{gone}\n"


# ------------------------------------------------------------ web servers


def _process_target(workdir: Path) -> ProcessTarget:
    command = f"{sys.executable} -m http.server {{port}} --bind 127.0.0.1 --directory {{root}}"
    return ProcessTarget(ProcessSettings.model_validate({"kind": "process", "command": command}), workdir)


def _get(address: str, path: str) -> tuple[int, bytes]:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@as_root
def test_a_web_home_made_first_is_passed_by(tmp_path: Path) -> None:
    """The old name of the web server's home under /tmp, made first as a
    symlink to a root-only directory: perflab neither uses it nor chmods it."""
    vault = tmp_path / "vault"
    kept = decoy(vault, "kept")
    target = _process_target(tmp_path / "target")  # under tmp_path (0700): nobody cannot reach it
    digest = hashlib.sha256(str(target.workdir.resolve()).encode()).hexdigest()[:12]
    old = Path(tempfile.gettempdir()) / f"perflab-web-{digest}"
    old.symlink_to(vault)
    try:
        target.provision()
        assert target.home not in (old, target.workdir) and not target.home.is_symlink()
    finally:
        target.teardown()
        old.unlink()
    assert kept.untouched() and sorted(p.name for p in vault.iterdir()) == ["kept"]
    assert (vault.stat().st_mode & 0o777) == 0o700


@as_root
def test_a_link_out_of_a_served_tree_and_a_file_nobody_may_read_are_not_served(tmp_path: Path) -> None:
    """A published directory the server's user cannot reach is served
    through a tree perflab makes: a symlink in it to a 0600 root file outside
    it, and a 0600 file of its own, are not served (they were, as 0644
    copies); a page, and a link to it inside the directory, are."""
    secret = decoy(tmp_path / "vault", "secret")
    site = tmp_path / "site"  # under tmp_path (0700): the server's user cannot reach it
    site.mkdir()
    (site / "page.html").write_text("a page\n")
    (site / "page.html").chmod(0o644)
    (site / "alias.html").symlink_to("page.html")
    (site / "leak").symlink_to(secret.path)
    private = decoy(site, "private.txt")
    target = _process_target(tmp_path / "target")
    try:
        endpoint = target.provision()
        assert endpoint.publish is not None
        endpoint.publish(site)
        assert target.describe()["served"] != "symlink"  # through the tree
        got = {name: _get(endpoint.address, f"/{name}") for name in ("page.html", "alias.html", "leak", "private.txt")}
    finally:
        target.teardown()
    assert got["page.html"] == (200, b"a page\n") and got["alias.html"] == (200, b"a page\n")
    assert got["leak"][0] != 200 and secret.data not in got["leak"][1], got["leak"]
    assert got["private.txt"][0] != 200 and private.data not in got["private.txt"][1], got["private.txt"]
    assert secret.untouched() and private.untouched()


@as_root
@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm (a filesystem apart from /tmp)")
def test_a_tree_on_another_filesystem_copies_with_modes_and_follows_no_link_out(tmp_path: Path) -> None:
    """Where hard links cannot be made (another filesystem), the tree holds
    copies with their own modes and owners; a link out, a file the server's
    user may not read and a FIFO are left out there too."""
    secret = decoy(tmp_path / "vault", "secret")
    site = tmp_path / "site"
    (site / "sub").mkdir(parents=True)
    (site / "sub" / "page.html").write_text("a page\n")
    (site / "sub" / "page.html").chmod(0o640)
    os.chown(site / "sub" / "page.html", 0, NOBODY.pw_gid)  # readable by nobody through its group
    (site / "leak").symlink_to(secret.path)
    (site / "out").symlink_to(secret.path.parent, target_is_directory=True)
    os.mkfifo(site / "fifo")
    decoy(site, "private.txt")
    shm = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="perflab-test-"))
    try:
        assert linked_tree(site, shm / "files", "nobody") == "a copy"
        got = sorted(str(p.relative_to(shm / "files")) for p in (shm / "files").rglob("*"))
        assert got == ["sub", "sub/page.html"], got
        st = (shm / "files" / "sub" / "page.html").stat()
        assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o640, 0, NOBODY.pw_gid)
    finally:
        shutil.rmtree(shm)
    assert secret.untouched()


# ------------------------------------------------------------ scratch filesystems


needs_loop = pytest.mark.skipif(not Path("/dev/loop-control").exists(), reason="no loop devices here")


def _shared_storage(shared: Path) -> Any:
    """target.storage with a data filesystem whose image goes in `shared`."""
    return PostgresSettings.model_validate(
        {"kind": "postgres", "storage": {"data_fs": {"type": "ext2", "size": "16MB", "backing_dir": str(shared)}}}
    ).storage


@pytest.fixture
def shared_scratch(workdir: Path) -> Iterator[tuple[Path, ScratchFs, int]]:
    """A sticky world-writable backing_dir (as /var/tmp), the data
    filesystem a target with `backing_dir` there would mount, and its size;
    afterwards, whatever it left mounted or attached is undone."""
    shared = workdir / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    storage = _shared_storage(shared)
    (workdir / "home").mkdir()
    fs = scratch_filesystems(storage, lambda: workdir / "home", workdir / "t", "test", Path)["data"]
    assert fs.settings.size is not None
    yield shared, fs, fs.settings.size
    force_undo(fs.mountpoint, fs.backing_file)


def _plant_image(at: Path, size: int) -> None:
    """An ext2 image of nobody's at `at`, holding a set-uid file, with the
    mark perflab writes beside its own."""
    staging = at.parent / f"{at.name}.staging"
    staging.mkdir()
    (staging / "planted").write_text("#!/bin/sh\nid\n")
    (staging / "planted").chmod(0o4755)
    subprocess.run(["mkfs.ext2", "-q", "-d", str(staging), str(at), f"{size // 1024}k"], check=True,
                   capture_output=True)
    shutil.rmtree(staging)
    mark = at.with_name(at.name + ".perflab-mkfs.json")
    mark.write_text(json.dumps({"type": "ext2", "size": size, "mkfs_options": ""}) + "\n")
    for path in (at, mark):
        nobodys(path)
        path.chmod(0o666)


@pytest.fixture
def cleanup() -> Iterator[list[ScratchFs]]:
    made: list[ScratchFs] = []
    yield made
    for fs in made:
        force_undo(fs.mountpoint, fs.backing_file)


@as_root
@needs_loop
def test_an_image_another_user_placed_in_a_shared_backing_dir_is_not_mounted(
        shared_scratch: tuple[Path, ScratchFs, int]) -> None:
    shared, fs, size = shared_scratch
    planted = shared / f"{fs.name}.img"  # the name a target took in its backing_dir
    _plant_image(planted, size)
    try:
        assert fs.mount() is True  # a filesystem of perflab's own, made now
        assert not (fs.mountpoint / "planted").exists()
        assert losetup_j(planted) == ""
        assert fs.backing_file.parent.stat().st_uid == 0 and fs.backing_file.parent.stat().st_mode & 0o777 == 0o700
    finally:
        fs.discard()
    assert planted.is_file() and planted.stat().st_uid == NOBODY.pw_uid  # not perflab's to remove


@as_root
@needs_loop
def test_a_directory_for_images_another_user_made_first_is_refused(
        shared_scratch: tuple[Path, ScratchFs, int]) -> None:
    shared, fs, size = shared_scratch
    # the directory perflab keeps its images in, made first, holding an image and its mark
    theirs = fs.backing_file.parent
    assert theirs.parent == shared
    theirs.mkdir()
    nobodys(theirs).chmod(0o777)
    _plant_image(fs.backing_file, size)
    with pytest.raises(UserError) as raised:
        fs.mount()
    assert str(theirs) in str(raised.value)
    fs.discard()  # as `perflab clean` does: nothing there is perflab's
    assert losetup_j(fs.backing_file) == "" and not (fs.mountpoint / "planted").exists()
    assert sorted(p.name for p in theirs.iterdir()) == [fs.backing_file.name, f"{fs.backing_file.name}.perflab-mkfs.json"]


@as_root
def test_check_names_a_directory_for_images_another_user_made(shared_scratch: tuple[Path, ScratchFs, int],
                                                              workdir: Path) -> None:
    shared, fs, _ = shared_scratch
    storage = _shared_storage(shared)
    assert not [p for p in scratch_problems(storage, workdir) if p[0].endswith("backing_dir")]
    fs.backing_file.parent.mkdir()
    nobodys(fs.backing_file.parent)
    problems = [text for key, text in scratch_problems(storage, workdir) if key == "target.storage.data_fs.backing_dir"]
    assert len(problems) == 1 and str(fs.backing_file.parent) in problems[0], problems


def _mount_options(mountpoint: Path) -> set[str]:
    """The per-mount options /proc/self/mountinfo shows for `mountpoint` (its 6th field)."""
    with open("/proc/self/mountinfo") as f:
        found = [line.split()[5] for line in f if line.split()[4].replace("\\040", " ") == str(mountpoint)]
    assert found, f"nothing mounted at {mountpoint}"
    return set(found[-1].split(","))


@as_root
@pytest.mark.parametrize("fstype", ["ext2", "tmpfs"])
def test_a_scratch_filesystem_is_mounted_nosuid_nodev(fstype: str, workdir: Path,
                                                      cleanup: list[ScratchFs]) -> None:
    if fstype != "tmpfs" and not Path("/dev/loop-control").exists():
        pytest.skip("no loop devices here")
    settings = FsSettings.model_validate({"type": fstype, "size": "16MB", "mount_options": "noatime"})
    fs = ScratchFs("data", settings, workdir / "perflab-data-mnt", workdir / "perflab-data.img")
    cleanup.append(fs)
    fs.mount()
    try:
        assert {"nosuid", "nodev", "noatime"} <= _mount_options(fs.mountpoint)
    finally:
        fs.discard()
