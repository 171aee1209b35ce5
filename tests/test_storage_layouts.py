"""The storage study's layouts (issue 49): a striped scratch filesystem
(md RAID-0 where the kernel has md, else btrfs's own RAID-0) and a network
filesystem (sshfs to perflab's own sshd in a namespace of its own, NFS where
the kernel has a client), each made, used by a real short PostgreSQL run,
and removed, also after a SIGKILL of perflab; what this kernel cannot do
refused at `check` with exit 2, naming the lack and the stand-in."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import start_run_until
from perflab.hostctl import netfs, nfsserve, stripe

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loop devices, mounts and namespaces need root")

GONE_WITHIN_S = 60.0
NO_MD = stripe.md_missing()
HAS_NFS = netfs._kernel_has_nfs()
NFS_MISSING = nfsserve.client_missing() or nfsserve.server_missing()

STRIPE = 'type = "btrfs"\nsize = "512MB"\nraid = { level = 0, devices = 2 }\n'


def experiment(tmp: Path, data_fs: str = "", wal_fs: str = "", duration: str = "3s") -> Path:
    text = ("[experiment]\nname = \"layouts\"\nrepetitions = 1\n"
            "[target]\nkind = \"postgres\"\n[target.settings]\nshared_buffers = \"64MB\"\nmax_connections = 20\n")
    if data_fs:
        text += f"[target.storage.data_fs]\n{data_fs}"
    if wal_fs:
        text += f"[target.storage.wal_fs]\n{wal_fs}"
    text += (f"[workload]\nkind = \"tpcb\"\nscale = 1\nclients = 2\nduration = \"{duration}\"\n"
             "warmup = \"1s\"\n")
    path = tmp / "layouts.toml"
    path.write_text(text)
    return path


def wait_until(condition: Callable[[], bool], within: float = GONE_WITHIN_S) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def mounts_under(path: Path) -> list[str]:
    with open("/proc/mounts") as f:
        return [line for line in f if line.split()[1].startswith(str(path))]


def loops_on_files_under(path: Path) -> list[str]:
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(path) in line]


def run_description(out: Path) -> tuple[str, float | None, dict[str, Any]]:
    """The one run's status, tps and its scratch filesystems as the store describes them."""
    with sqlite3.connect(out / "perflab.sqlite") as db:
        run_id, status, target = db.execute("select id, status, target_json from run").fetchone()
        tps = db.execute("select value from metric where run_id = ? and name = 'tps'", (run_id,)).fetchone()
    return status, (tps[0] if tps else None), json.loads(target or "{}").get("scratch_fs", {})


# ------------------------------------------------------------------ check


@pytest.mark.skipif(NO_MD is None, reason="this kernel has md: a chunk is honoured (mdadm --chunk)")
def test_a_chunk_without_md_is_refused_naming_the_lack_and_the_stand_in(tmp_path: Path, run_cli: Any) -> None:
    path = experiment(tmp_path, data_fs=STRIPE.replace("devices = 2", 'devices = 2, chunk = "512KB"'))
    proc = run_cli("check", path, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert "target.storage.data_fs.raid.chunk" in said and "md" in said and "btrfs" in said
    assert "Traceback" not in said


@pytest.mark.skipif(NO_MD is None, reason="this kernel has md: an ext4 stripe is md's")
def test_a_stripe_of_another_type_without_md_is_refused(tmp_path: Path, run_cli: Any) -> None:
    path = experiment(tmp_path, wal_fs=STRIPE.replace('"btrfs"', '"ext4"'))
    proc = run_cli("check", path, check=False)
    assert proc.returncode == 2 and "target.storage.wal_fs.type" in proc.stdout + proc.stderr


@pytest.mark.skipif(NFS_MISSING is None, reason="this machine has an NFS client and nfs-ganesha: nfs is served")
def test_nfs_without_a_client_or_a_server_is_refused_naming_the_lack_and_the_stand_in(tmp_path: Path,
                                                                                     run_cli: Any) -> None:
    path = experiment(tmp_path, wal_fs='type = "nfs"\ndelay = "1ms"\nnfsvers = "4.2"\nrsize = "1MB"\n')
    proc = run_cli("check", path, check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    assert "target.storage.wal_fs.type" in said and 'type = "sshfs"' in said
    assert ("NFS client" in said) == (not HAS_NFS) and ("nfs-ganesha" in said) == (nfsserve.server_missing() is not None)
    assert "Traceback" not in said


def test_nfs_mount_options_only_on_nfs(tmp_path: Path, run_cli: Any) -> None:
    from perflab.hostctl.scratchfs import FsSettings
    nfs = FsSettings.model_validate({"type": "nfs", "nfsvers": "4.2", "rsize": "64KB", "wsize": "1MB"})
    assert (nfs.nfsvers, nfs.rsize, nfs.wsize) == ("4.2", 65536, 2**20)
    proc = run_cli("check", experiment(tmp_path, wal_fs='type = "sshfs"\nwsize = "64KB"\n'), check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "target.storage.wal_fs" in said and "wsize" in said and "Traceback" not in said


@pytest.mark.skipif(NFS_MISSING is not None, reason=f"the NFS path is not testable here: {NFS_MISSING}")
def test_nfs_layout_made_used_and_removed(tmp_path: Path, run_cli: Any, namespaces_as_found: set[str]) -> None:
    out = tmp_path / "out"
    layout = 'type = "nfs"\ndelay = "1ms"\nnfsvers = "4.1"\nrsize = "256KB"\nwsize = "256KB"\n'
    run_cli("run", experiment(tmp_path, data_fs=layout, wal_fs=layout), "--out", out, "--quiet", "--no-report")
    status, tps, described = run_description(out)
    assert status == "done" and tps and tps > 0
    for role in ("data", "wal"):
        assert described[role]["served_by"] == "nfs-ganesha" and described[role]["nfsvers"] == "4.1"
        assert "rsize=262144" in described[role]["mounted_options"]
    assert not mounts_under(tmp_path) and not [line for line in open("/proc/mounts") if " nfs" in line
                                               and "/perflab" in line.split()[0]]
    assert not _left_by(described["data"]["namespace"]) | _left_by(described["wal"]["namespace"])


def test_the_database_on_the_network_with_its_wal_local(tmp_path: Path, namespaces_as_found: set[str]) -> None:
    # pg_wal is an absolute symbolic link on sshfs, which sshfs refuses to read back by default (contain_symlinks):
    # perflab's mount passes links as they are, so the data goes through sshfs and the WAL stays local
    out = tmp_path / "out"
    path = experiment(tmp_path, data_fs='type = "sshfs"\ndelay = "1ms"\n', wal_fs='type = "ext4"\nsize = "256MB"\n',
                      duration="30s")
    before = _points_by_type()

    def placed() -> tuple[Path, Path] | None:
        new = _points_by_type() - before
        data = next((Path(p) for p, t in new if t == "fuse.sshfs" and p.endswith("perflab-data-fs")), None)
        wal = next((Path(p) for p, t in new if t == "ext4" and p.endswith("perflab-wal-fs")), None)
        ready = data and wal and (data / "pgdata" / "base").is_dir() and _segments(wal / "pg_wal")
        return (data, wal) if ready and data and wal else None

    run = start_run_until(path, out, lambda: placed() is not None)
    placement = placed()
    assert placement is not None
    data, wal = placement
    try:
        assert os.readlink(data / "pgdata" / "pg_wal") == str(wal / "pg_wal")  # read back through sshfs
        segments = _segments(data / "pgdata" / "pg_wal")
        assert segments and all(p.stat().st_dev == os.stat(wal).st_dev for p in segments)  # written locally
    finally:
        assert run.wait(timeout=300) == 0, (out.parent / "perflab.log").read_text()
    status, tps, described = run_description(out)
    assert status == "done" and tps and tps > 0
    assert described["data"]["type"] == "sshfs" and described["wal"]["type"] == "ext4"
    assert not {p for p, _ in _points_by_type() - before} & {str(data), str(wal)}
    assert not _left_by(described["data"]["namespace"])


def test_a_database_on_the_network_is_used_again_after_another_layout(tmp_path: Path, run_cli: Any) -> None:
    # its perflab-created mark, written through sshfs as the server's user, is made root's at the server: the
    # next run trusts it (else: "a cluster that perflab did not create", and the experiment stopped)
    # in 3 blocks of two layouts, the network one is made again after the other one at least once
    path = experiment(tmp_path, duration="2s")
    path.write_text(path.read_text().replace("repetitions = 1", 'repetitions = 3\norder = "blocks"\nseed = 1') +
                    '[factors]\n"target.storage.data_fs" = [{ type = "sshfs" }, { type = "tmpfs", size = "256MB" }]\n')
    out = tmp_path / "out"
    run_cli("run", path, "--out", out, "--quiet", "--no-report")
    with sqlite3.connect(out / "perflab.sqlite") as db:
        assert [s for (s,) in db.execute("select status from run order by id")] == ["done"] * 6


def _segments(pg_wal: Path) -> list[Path]:
    with contextlib.suppress(OSError):
        return [p for p in pg_wal.iterdir() if len(p.name) == 24]
    return []


def _points_by_type() -> set[tuple[str, str]]:
    with open("/proc/mounts") as f:
        return {(line.split()[1], line.split()[2]) for line in f}


def test_check_says_which_stripe_will_run(tmp_path: Path, run_cli: Any) -> None:
    proc = run_cli("check", experiment(tmp_path, data_fs=STRIPE))
    assert "target.storage.data_fs.raid" in proc.stdout + proc.stderr
    assert ("btrfs RAID-0" if NO_MD else "md RAID-0") in proc.stdout + proc.stderr


@pytest.mark.parametrize("raw, key", [
    ({"type": "btrfs", "size": "512MB", "backing_dir": ["/a"], "raid": {"devices": 2}}, "backing_dir"),
    ({"type": "btrfs", "size": "120MB", "raid": {"devices": 2}}, "size"),
    ({"type": "tmpfs", "raid": {"devices": 2}}, "raid"),
    ({"type": "ext4", "size": "1GB", "raid": {"chunk": "3KB"}}, "raid.chunk"),
    ({"type": "sshfs", "size": "1GB"}, "size"),
    ({"type": "ext4", "size": "1GB", "delay": "1ms"}, ""),
])
def test_settings_refuse_with_the_key(raw: dict[str, Any], key: str) -> None:
    from pydantic import ValidationError

    from perflab.hostctl.scratchfs import FsSettings
    with pytest.raises(ValidationError) as e:
        FsSettings.model_validate(raw)
    assert any(".".join(map(str, err["loc"])) == key for err in e.value.errors()) or not key


def test_the_storage_probe_takes_no_interval(tmp_path: Path, run_cli: Any) -> None:
    # fio runs once per layout: an interval would be a key that does nothing
    path = experiment(tmp_path)
    path.write_text(path.read_text() + '[collect]\nstorage = { interval = "1s" }\n')
    proc = run_cli("check", path, check=False)
    assert proc.returncode == 2 and "collect.storage.interval" in proc.stdout + proc.stderr


# ------------------------------------------------------------------ striped


def test_a_stripe_is_made_used_and_removed(tmp_path: Path, run_cli: Any) -> None:
    out = tmp_path / "out"
    disks = [tmp_path / "disk0", tmp_path / "disk1"]
    layout = STRIPE + f"backing_dir = {json.dumps([str(d) for d in disks])}\n"
    run_cli("run", experiment(tmp_path, data_fs=layout), "--out", out, "--quiet", "--no-report")
    status, tps, described = run_description(out)
    assert status == "done" and tps and tps > 0
    raid = described["data"]["raid"]
    assert raid["devices"] == 2 and raid["by"] == ("btrfs" if NO_MD else "md")
    # each device on its own disk's file
    assert [Path(f).parent.parent for f in described["data"]["backing_files"]] == disks
    assert not mounts_under(tmp_path) and not loops_on_files_under(tmp_path)


@pytest.mark.skipif(NO_MD is not None, reason=f"md path not testable here: {NO_MD}")
def test_md_applies_the_chunk_and_the_stride(tmp_path: Path) -> None:
    from perflab.hostctl.scratchfs import FsSettings
    fs = stripe.StripedFs("perflab-md-test", FsSettings.model_validate(
        {"type": "ext4", "size": "256MB", "raid": {"devices": 2, "chunk": "128KB"}}),
        tmp_path / "perflab-fs", [tmp_path / "perflab-img" / f"perflab-{i}.img" for i in range(2)])
    try:
        fs.mount()
        detail = subprocess.run(["mdadm", "--detail", fs.md_device], capture_output=True, text=True).stdout
        assert "Chunk Size : 128K" in detail
        dump = subprocess.run(["dumpe2fs", "-h", fs.md_device], capture_output=True, text=True).stdout
        assert "RAID stride:              32" in dump and "RAID stripe width:        64" in dump
    finally:
        fs.discard()
    assert not Path(os.path.realpath(fs.md_device)).name.startswith("md") or not Path(fs.md_device).exists()


def mounted_from(devices: list[str]) -> list[str]:
    with open("/proc/mounts") as f:
        return [line for line in f if line.split()[0] in devices]


def test_a_sigkill_mid_run_leaves_no_loop_device_or_mount(tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = experiment(tmp_path, data_fs=STRIPE, duration="60s")

    def loops() -> list[str]:
        return [line.split(":", 1)[0] for line in loops_on_files_under(tmp_path)]

    run = start_run_until(path, out, lambda: len(loops()) == 2 and bool(mounted_from(loops())))
    devices = loops()
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert wait_until(lambda: not mounted_from(devices) and not loops_on_files_under(tmp_path)), \
        f"left: {mounted_from(devices)} {loops_on_files_under(tmp_path)}"


# ------------------------------------------------------------------ network

SSHFS = 'type = "sshfs"\ndelay = "1ms"\nrate = "1gbit"\n'


def test_a_network_wal_is_made_used_and_removed(tmp_path: Path, run_cli: Any,
                                                namespaces_as_found: set[str]) -> None:
    out = tmp_path / "out"
    run_cli("run", experiment(tmp_path, wal_fs=SSHFS), "--out", out, "--quiet", "--no-report")
    status, tps, described = run_description(out)
    assert status == "done" and tps and tps > 0
    wal = described["wal"]
    assert wal["type"] == "sshfs" and wal["fsync"] == netfs.FSYNC_EXTENSION and wal["delay_ms"] == 1.0
    assert wal["served_by"] == (netfs.STAND_IN if not HAS_NFS else "sshfs")
    assert not _left_by(wal["namespace"])
    assert not _sshd_of(wal["namespace"])


def _left_by(namespace: str) -> set[str]:
    """What is left on this machine of the network layout whose namespace is
    `namespace` (perflab-TAG-netfs): every name it made holds its tag, and no
    other object of perflab's takes a tag that a name on the machine holds
    (netns.new_tag). Another test's or experiment's objects, made meanwhile,
    are not this test's to count."""
    from perflab.hostctl import netns
    tag = namespace.removeprefix(f"{netns.PREFIX}-").removesuffix("-netfs")
    assert len(tag) == 4, namespace
    return {name for name in netns.leftovers() if tag in name}


def _sshd_of(namespace: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.split()[:1] == [namespace]]


def _sshfs_points() -> set[str]:
    with open("/proc/mounts") as f:
        return {line.split()[1] for line in f if line.split()[2] == "fuse.sshfs"}


def test_a_sigkill_mid_run_leaves_no_sshd_mount_or_namespace(tmp_path: Path) -> None:
    from conftest import journaled_network_objects
    from perflab.hostctl import netns
    out = tmp_path / "out"
    path = experiment(tmp_path, data_fs=SSHFS, duration="60s")
    before = _sshfs_points()

    def new_points() -> set[str]:
        return {p for p in _sshfs_points() - before if p.endswith("perflab-data-fs")}

    run = start_run_until(path, out, lambda: bool(journaled_network_objects(out)) and bool(new_points()))
    made, points = journaled_network_objects(out), new_points()
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert wait_until(lambda: not made & set(netns.leftovers())), f"left: {made & set(netns.leftovers())}"
    assert wait_until(lambda: not points & _sshfs_points()), f"left mounted: {points & _sshfs_points()}"


# ------------------------------------------------------------------ the placement table


def test_the_placement_table_pivots_data_by_wal_with_intervals(tmp_path: Path) -> None:
    from test_headline_tables import make_store, noisy, report_html, table_with

    # the placement as two factors (the store's spec holds them as TOML: scalar levels here)
    factors = {"target.storage.data_fs.type": ["ext4", "btrfs"], "target.storage.wal_fs.type": ["ext4", "sshfs"]}

    def metrics(f: dict[str, Any], rep: int) -> dict[str, float]:
        return {"tps": noisy(100.0 if f["target.storage.wal_fs.type"] == "ext4" else 40.0), "latency_p50_ms": 2.0,
                "latency_p99_ms": 9.0}

    html = report_html(make_store(tmp_path, "tpcb", factors, 3, metrics))
    table = table_with(html, "TPS by data_fs.type (rows) and wal_fs.type (columns)")
    assert len(table["headers"]) == 3 and len(table["rows"]) == 2  # 2 x 2 cells, not 12 runs
    assert all("[" in cell for row in table["rows"] for cell in row[1:])  # 3 repetitions: a 95% interval


# ------------------------------------------------------------------ the raw characterisation (fio)


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (Debian: fio)")
def test_the_storage_probe_stores_fio_figures_per_role(tmp_path: Path, run_cli: Any) -> None:
    out = tmp_path / "out"
    path = experiment(tmp_path, data_fs='type = "ext4"\nsize = "256MB"\n', wal_fs=STRIPE)
    path.write_text(path.read_text() + '[collect]\nstorage = { size = "8MB", runtime = "1s" }\n')
    run_cli("run", path, "--out", out, "--quiet")
    with sqlite3.connect(out / "perflab.sqlite") as db:
        got = dict(db.execute("select name, value from metric where name like 'storage.%'").fetchall())
        kinds = {k for (k,) in db.execute("select kind from event")}
    for role in ("data", "wal"):
        for name in ("seq_write_MBps", "seq_read_MBps", "randwrite_8k_iops", "fdatasync_8k_mean_us"):
            assert got.get(f"storage.{role}.{name}", 0) > 0, (role, name, got)
    assert "storage-probe-short" in kinds  # 8 MB is read and written in far less than 200 ms: said
    assert "Raw storage per layout (fio)" in (out / "report.html").read_text()
    assert not list(tmp_path.rglob("perflab-fio-*"))  # its files went with it


# ------------------------------------------------------------------ MariaDB


def _has_mariadb() -> bool:
    from perflab.errors import UserError
    from perflab.targets.mariadb import find_binaries
    try:
        find_binaries(None)
    except UserError:
        return False
    return True


@pytest.mark.skipif(not _has_mariadb(), reason="MariaDB is not installed (Debian: mariadb-server)")
def test_mariadb_redo_log_on_sshfs_is_served_as_its_user(workdir: Path, namespaces_as_found: set[str]) -> None:
    # the network filesystem serves the files as the server's user: without run_as, the mount had no user
    from perflab.hostctl.mounts import mount_entry
    from perflab.targets.mariadb import MariadbSettings, MariadbTarget

    target = MariadbTarget(MariadbSettings(kind="mariadb", storage={"redo_fs": {"type": "sshfs"}}), workdir / "target")
    try:
        target.provision()
        redo = next(fc.directory for fc in target.file_classes() if fc.name == "redo")
        entry = mount_entry(redo.parent)
        assert entry is not None and entry["type"] == "fuse.sshfs"
        assert (redo / "ib_logfile0").stat().st_uid == os.stat(redo).st_uid != 0  # the server's user's file
        redo_fs = target.describe()["scratch_fs"]["redo"]
        assert redo_fs["served_by"] == (netfs.STAND_IN if not HAS_NFS else "sshfs")
    finally:
        target.teardown()
    assert mount_entry(workdir / "target" / "perflab-redo-fs") is None
    assert not _left_by(redo_fs["namespace"])


@pytest.mark.skipif(not _has_mariadb(), reason="MariaDB is not installed (Debian: mariadb-server)")
def test_mariadb_data_directory_on_sshfs_commits_and_reads_back(workdir: Path, namespaces_as_found: set[str]) -> None:
    # InnoDB's data files, doublewrite buffer and redo log all through sshfs: its fsync reaches the
    # server as fsync@openssh.com; a committed row is read back after a restart from the server's files
    from perflab.hostctl.mounts import mount_entry
    from perflab.targets.mariadb import MariadbSettings, MariadbTarget

    target = MariadbTarget(MariadbSettings(kind="mariadb", storage={"data_fs": {"type": "sshfs"}}), workdir / "target")
    try:
        endpoint = target.provision()
        data = next(fc.directory for fc in target.file_classes() if fc.name == "data")
        entry = mount_entry(data.parent)
        assert entry is not None and entry["type"] == "fuse.sshfs"
        described = target.describe()["scratch_fs"]["data"]
        assert described["fsync"] == netfs.FSYNC_EXTENSION
        with endpoint.connect() as conn:
            conn.execute("create table perflab_sshfs (id int primary key, v varchar(20)) engine=innodb")
            conn.execute("insert into perflab_sshfs values (1, 'through sshfs')")
            conn.execute("commit")
        target.teardown()
        endpoint = target.provision()  # the same files, mounted again through a new sshd and sshfs
        with endpoint.connect() as conn:
            assert list(conn.execute("select v from perflab_sshfs where id = 1").fetchall()) == [("through sshfs",)]
    finally:
        target.teardown()
    assert mount_entry(data.parent) is None
    assert not _left_by(described["namespace"])
