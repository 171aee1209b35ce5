"""The NFS server perflab starts for `type = "nfs"` (hostctl.nfsserve):
nfs-ganesha and its rpcbind in a namespace of perflab's, served to a
userspace NFS client (libnfs's nfs-ls, nfs-cp, nfs-cat), so the server's
side runs even where the kernel has no NFS client to mount it; then undone,
by perflab and by its guardian after a SIGKILL."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from perflab.hostctl import netfs, netns, nfsserve
from perflab.hostctl.scratchfs import FsSettings
from perflab.proc import start_time
from test_storage_layouts import wait_until

CLIENT = ("nfs-ls", "nfs-cp", "nfs-cat")
MISSING = (("perflab starts namespaces and a server as root" if os.geteuid() != 0 else None)
           or nfsserve.server_missing()
           or next((f"{t} is not installed (Debian: libnfs-utils)" for t in CLIENT if shutil.which(t) is None), None))
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"the NFS server is not testable here: {MISSING}")

# The kernel's capability numbers (linux/capability.h) of what ganesha keeps in its bounding set.
CAP_NUMBERS = {"chown": 0, "dac_override": 1, "dac_read_search": 2, "fowner": 3, "fsetid": 4, "setgid": 6,
               "setuid": 7, "net_bind_service": 10, "sys_resource": 24}


def server_user() -> pwd.struct_passwd:
    """The database server's user where it exists (its uid is not nobody's, which a client shows for an owner
    it cannot read), else nobody."""
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.skip("no postgres or nobody user to serve the files as")


def in_namespace(ns: str) -> dict[int, tuple[str, object]]:
    """What runs in namespace `ns`: pid -> (command name, start time)."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    found = {}
    for pid in map(int, out.split()):
        try:
            found[pid] = (Path(f"/proc/{pid}/comm").read_text().strip(), start_time(pid))
        except OSError:
            continue
    return found


def alive(pid: int, start: object) -> bool:
    """Still running (a killed daemon, rpcbind, is a zombie until pid 1 reaps it: gone)."""
    try:
        return start_time(pid) == start and status_field(pid, "State")[:1] != "Z"
    except OSError:
        return False


def status_field(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def url(host: str, name: str, uid: int, gid: int) -> str:
    return f"nfs://{host}{nfsserve.PSEUDO}/{name}?version=4&uid={uid}&gid={gid}"


def nfs(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def served(tmp_path: Path, namespaces_as_found: set[str]) -> Iterator[netfs.NetFs]:
    user = server_user()
    fs = netfs.NetFs("wal", FsSettings(type="nfs", delay="1ms", rate="1gbit"), tmp_path / "perflab-wal-fs",
                     tmp_path / "perflab-wal-export", user.pw_name, tmp_path)
    assert fs.serve() is True
    try:
        yield fs
    finally:
        fs.unmount()


def test_ganesha_serves_the_export_to_a_client_as_each_caller_and_is_undone(served: netfs.NetFs) -> None:
    fs, user = served, server_user()
    assert fs.server is not None and fs.state is not None
    host, port = fs.server_address
    assert port == nfsserve.NFS_PORT
    running = in_namespace(fs.ns)
    assert fs.server.pid in running and running[fs.server.pid][0].startswith("ganesha")
    rpcbinds = {pid: st for pid, (comm, st) in running.items() if comm == "rpcbind"}
    assert rpcbinds, f"no rpcbind of perflab's in {fs.ns}: {running}"
    # rpcbind drops root; ganesha keeps root with only the capabilities the VFS backend needs
    assert all(status_field(pid, "Uid").split()[0] != "0" for pid in rpcbinds)
    kept = sum(1 << CAP_NUMBERS[c] for c in nfsserve.CAPABILITIES)  # ganesha may drop more (sys_resource, once used)
    for field in ("CapBnd", "CapEff"):
        assert int(status_field(fs.server.pid, field), 16) & ~kept == 0, field

    source = fs.state / "source.txt"
    source.write_text("written through perflab's NFS server\n")
    listed = nfs("nfs-ls", url(host, "", user.pw_uid, user.pw_gid))
    assert listed.returncode == 0, listed.stderr
    # as the server's user: the file is that user's in the exported directory, and reads back
    copied = nfs("nfs-cp", str(source), url(host, "mine.txt", user.pw_uid, user.pw_gid))
    assert copied.returncode == 0, copied.stderr
    st = os.stat(fs.export_dir / "mine.txt")
    assert (st.st_uid, st.st_gid) == (user.pw_uid, user.pw_gid)
    back = nfs("nfs-cat", url(host, "mine.txt", user.pw_uid, user.pw_gid))
    assert back.returncode == 0 and back.stdout == source.read_text(), back.stderr
    # as root (No_Root_Squash: perflab's own marks stay root's)
    assert nfs("nfs-cp", str(source), url(host, "root.txt", 0, 0)).returncode == 0
    assert os.stat(fs.export_dir / "root.txt").st_uid == 0
    # owners cross as numbers (Only_Numeric_Owners), as the kernel's client reads them without an idmapd
    listing = nfs("nfs-ls", url(host, "", user.pw_uid, user.pw_gid)).stdout.splitlines()
    owners = {line.split()[-1]: (int(line.split()[2]), int(line.split()[3])) for line in listing}
    assert owners == {"mine.txt": (user.pw_uid, user.pw_gid), "root.txt": (0, 0)}, listing
    # another user is refused: the server acts as each caller (the export is its user's, mode 0700)
    other = 65533 if user.pw_uid != 65533 else 65532
    refused = nfs("nfs-cp", str(source), url(host, "theirs.txt", other, other))
    assert refused.returncode != 0 and not (fs.export_dir / "theirs.txt").exists()

    ns, state, ganesha = fs.ns, fs.state, (fs.server.pid, running[fs.server.pid][1])
    fs.unmount()
    assert not alive(*ganesha)
    assert not [pid for pid, st in rpcbinds.items() if alive(pid, st)]
    assert f"netns {ns}" not in netns.leftovers() and not state.exists()
    assert (fs.export_dir / "mine.txt").exists()  # the files stay (a resume), as on any scratch filesystem


SERVE = """
import sys, time
from pathlib import Path
from perflab.hostctl import netfs
from perflab.hostctl.scratchfs import FsSettings
base = Path(sys.argv[1])
fs = netfs.NetFs("wal", FsSettings(type="nfs"), base / "perflab-wal-fs", base / "perflab-wal-export", sys.argv[2],
                 base)
fs.serve()
print(fs.ns, fs.server.pid, fs.state, flush=True)
time.sleep(600)
"""


def test_a_sigkill_of_perflab_leaves_no_ganesha_rpcbind_or_namespace(tmp_path: Path,
                                                                     namespaces_as_found: set[str]) -> None:
    script = tmp_path / "serve.py"
    script.write_text(SERVE)
    with subprocess.Popen([sys.executable, str(script), str(tmp_path), server_user().pw_name],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            line = proc.stdout.readline().split()
            if not line:
                proc.wait()
                raise AssertionError(f"the server did not start: {proc.stderr.read()}")
            ns, state = line[0], Path(line[2])
            running = in_namespace(ns)
            assert int(line[1]) in running and "rpcbind" in {comm for comm, _ in running.values()}, running
        finally:
            proc.send_signal(signal.SIGKILL)  # perflab's process, with the guardian its journal started
            proc.wait()
    assert wait_until(lambda: not [p for p, (_, st) in running.items() if alive(p, st)]), in_namespace(ns)
    assert wait_until(lambda: f"netns {ns}" not in netns.leftovers()), netns.leftovers()
    assert wait_until(lambda: not state.exists()), f"{state} left"
    assert not [line for line in Path("/proc/mounts").read_text().splitlines() if str(tmp_path) in line]
