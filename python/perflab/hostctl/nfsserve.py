"""NFS for a network scratch filesystem (`type = "nfs"`, hostctl.netfs), on a
machine whose kernel has an NFS client:

    wal_fs = { type = "nfs", delay = "1ms", rate = "1gbit", nfsvers = "4.1", rsize = "1MB", wsize = "1MB" }

The server is nfs-ganesha (Debian: nfs-ganesha, nfs-ganesha-vfs), started
by perflab in the network namespace it made for this mount, exporting the
directory perflab made for the server's files (`<home>/perflab-<role>-export`,
the server's user's) as /perflab, NFSv4 over TCP only; the kernel's client
mounts it here over the same shaped link as sshfs (netem, or tbf and
perflab's delay relay), with the study's options: `nfsvers`, `rsize`,
`wsize`, `hard`, and `port=` (NFSv4 needs no rpcbind on the client's side).

What ganesha needs, and how perflab keeps it to the namespace:

- rpcbind: ganesha 4 registers its programs even when it serves NFSv4
  only, and stops when it cannot. perflab starts an rpcbind of its own
  beside it, in a mount namespace of theirs (`unshare --mount`) with a
  tmpfs on /run, so its socket and lock file (/run/rpcbind.sock,
  /run/rpcbind.lock) are not the host's, and its port 111 is the
  namespace's. ganesha's D-Bus control is not reachable there, which it
  only logs.
- its state (configuration, log, pid file, NFSv4 recovery directory) is in
  the directory perflab made for this mount (removed with it), not in
  /var/lib/nfs/ganesha or /var/log/ganesha.
- privileges: ganesha's VFS backend opens files by handle
  (open_by_handle_at, CAP_DAC_READ_SEARCH) and serves each caller's files
  as that caller (setfsuid/setfsgid, CAP_SETUID/CAP_SETGID): the kernel
  requires those of it, so it runs as root, with no capability beyond them
  and the file ones a server of other users' files needs (setpriv
  --bounding-set). rpcbind runs as its package built it (Debian's drops to
  its own user, _rpc).
- Squash = No_Root_Squash: perflab's own marks, written as root through
  the mount, stay root's (a data directory's perflab-created is trusted
  only so); the database server's files are its user's.
- owners cross as numbers (Only_Numeric_Owners): the client and the server
  are one machine, so a uid is the same user on both sides. Else ganesha
  sends names ("postgres@localdomain"), which a kernel client maps back only
  through an idmapd of the same domain, and otherwise shows as nobody's: a
  data directory PostgreSQL would refuse as not its own.
- sec=sys only (Active_krb5 = false): no Kerberos, so the host's
  /etc/krb5.keytab is not read.

The server's side runs without the kernel's client (tests/test_nfsserve.py:
NetFs.serve() alone, read and written by libnfs's userspace client, nfs-cp,
as the server's user and as root, then undone, also after a SIGKILL).

The kernel's own nfsd is not used: its export table is filled through the
host's /var/lib/nfs/etab by exportfs and rpc.mountd, the machine's NFS
server's, which perflab does not touch; and NFSv3 (MOUNT, NLM and statd
beside nfsd) is refused: nfsvers is 4.0, 4.1 or 4.2.

Everything started is journaled by hostctl.netfs (kill-process with a
token; the namespace's undo kills whatever still runs in it, rpcbind too).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

from perflab.hostctl import scratchfs

GANESHA = "/usr/bin/ganesha.nfsd"
RPCBIND = "/sbin/rpcbind"
NFS_PORT = 2049
PSEUDO = "/perflab"  # the export's NFSv4 path, what the client mounts
# What the VFS backend needs of root, and nothing else (setpriv's bounding set; ganesha drops
# sys_resource itself once it has raised its limits).
CAPABILITIES = ("dac_read_search", "dac_override", "chown", "fowner", "fsetid", "setuid", "setgid",
                "net_bind_service", "sys_resource")


def _vfs_backend() -> str | None:
    """ganesha's VFS backend library (nfs-ganesha-vfs), where Debian puts it."""
    found = sorted(glob.glob("/usr/lib/*/ganesha/libfsalvfs.so*") + glob.glob("/usr/lib/ganesha/libfsalvfs.so*"))
    return found[0] if found else None


def _mount_helper() -> str | None:
    return shutil.which("mount.nfs") or next((p for p in ("/sbin/mount.nfs", "/usr/sbin/mount.nfs")
                                              if os.access(p, os.X_OK)), None)


def client_missing() -> str | None:
    """Why this machine cannot mount NFS (None: it can): the kernel's client and mount.nfs."""
    if not (scratchfs._kernel_has("nfs") or scratchfs._kernel_has("nfs4")):
        return (f"this kernel ({os.uname().release}) has no NFS client (no nfs or nfs4 in /proc/filesystems nor "
                "a module of it)")
    if _mount_helper() is None:
        return "mount.nfs is not installed (Debian: nfs-common)"
    return None


def server_missing() -> str | None:
    """Why perflab cannot serve NFS here (None: it can): nfs-ganesha with its VFS backend, rpcbind, unshare."""
    if not os.access(GANESHA, os.X_OK):
        return f"nfs-ganesha is not installed ({GANESHA}; Debian: nfs-ganesha nfs-ganesha-vfs)"
    if _vfs_backend() is None:
        return "nfs-ganesha's VFS backend is not installed (libfsalvfs.so; Debian: nfs-ganesha-vfs)"
    if not os.access(RPCBIND, os.X_OK):
        return f"rpcbind is not installed ({RPCBIND}; Debian: rpcbind), which ganesha registers with"
    for tool in ("unshare", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH (Debian: util-linux)"
    return None


def ganesha_version() -> str | None:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        out = subprocess.run([GANESHA, "-v"], capture_output=True, text=True, timeout=10)
        m = re.search(r"Release\s*=\s*V?(\S+)|(\d+\.\d+(?:\.\d+)?)", out.stdout + out.stderr)
        return (m.group(1) or m.group(2)) if m else None
    return None


def ganesha_config(state: Path, address: str, export_dir: Path) -> str:
    """ganesha.conf: NFSv4 over TCP on `address` only, one export, all state in `state`."""
    return f"""NFS_CORE_PARAM {{
    Protocols = 4;
    NFS_Port = {NFS_PORT};
    Bind_addr = {address};
    Enable_NLM = false;
    Enable_RQUOTA = false;
}}
NFS_KRB5 {{
    Active_krb5 = false;
}}
NFSV4 {{
    Graceless = true;
    Only_Numeric_Owners = true;
    RecoveryBackend = fs;
    RecoveryRoot = "{state / 'recovery'}";
}}
EXPORT {{
    Export_Id = 1;
    Path = "{export_dir}";
    Pseudo = "{PSEUDO}";
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys;
    Protocols = 4;
    Transports = TCP;
    FSAL {{ Name = VFS; }}
}}
LOG {{
    Default_Log_Level = EVENT;
}}
"""


def server_argv(ns: str, state: Path) -> list[str]:
    """ganesha and its rpcbind in namespace `ns`, in a mount namespace of
    their own with a private /run; the shell becomes ganesha (exec), so the
    process perflab journals is the server."""
    script = (f"mount -t tmpfs -o mode=0755,nosuid,nodev perflab-nfs-run /run && {RPCBIND} && "
              f"exec setpriv --bounding-set=-all,{','.join('+' + c for c in CAPABILITIES)} -- "
              f"{GANESHA} -F -f {state / 'ganesha.conf'} -L {state / 'ganesha.log'} -p {state / 'ganesha.pid'}")
    return ["ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script]


def mount_options(nfsvers: str, rsize: int | None, wsize: int | None, port: int) -> list[str]:
    """The client's options: the study's (version, rsize, wsize), a hard mount, TCP to `port`."""
    return [f"vers={nfsvers}", "proto=tcp", f"port={port}", "hard",
            *([f"rsize={rsize}"] if rsize else []), *([f"wsize={wsize}"] if wsize else [])]
