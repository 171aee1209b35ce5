"""A network filesystem for a server's data or WAL ([target.storage]
`data_fs`/`wal_fs` of type "sshfs" or "nfs"), over a link whose delay and
rate are factors:

    wal_fs = { type = "sshfs", delay = "1ms", rate = "1gbit" }

The file server runs in a network namespace perflab makes (hostctl.netns),
joined to this one by a veth pair; the client mounts its directory here:

    root namespace                           perflab-TAG-netfs
    sshfs -> [relay] -> 198.18.x.2:2222 -->  sshd (the server's user), internal-sftp
    [perflabTAGc, shaped]                    [perflabTAGs, shaped]

- NFS where the kernel has a client (hostctl.nfsserve): nfs-ganesha and its
  rpcbind in the namespace, exporting the server's user's directory, the
  kernel's client mounting it with the study's options (nfsvers, rsize,
  wsize). Where the kernel has no NFS client, or nfs-ganesha is not
  installed, `check` refuses `type = "nfs"` (exit 2) naming what is
  missing and the stand-in, sshfs.
- sshfs (FUSE) to an sshd perflab starts as the database server's user
  (never root: sshd runs unprivileged on a port of its own namespace, with
  its own host key and authorized_keys in a directory of that user's made for
  this mount; UsePAM, since without it sshd refuses a system account whose
  password is locked, as nobody's and postgres's are), serving that user's
  directory `<home>/perflab-<role>-export`:
  every file the database writes is its own. The client runs as root with
  `allow_other` (which needs no `user_allow_other` in /etc/fuse.conf: root
  may) and `default_permissions` (the kernel checks each file's mode and
  owner, as on a local filesystem). fsync() is sent to the server as the
  `fsync@openssh.com` extension (sshfs 2.5 and later; OpenSSH's sftp server
  has it since 6.5): the mount records whether the server offered it, and a
  mount without it is refused (a database's fsync would not reach the disk).
  Symbolic links are passed as they are (no_contain_symlinks, where sshfs
  refuses absolute ones by default): the server is perflab's own, and a
  data directory on sshfs reaches its WAL apart through pg_wal, an absolute
  link to a local directory.
- The link: netem (delay and rate) where the kernel has it; else tbf for the
  rate and perflab's delay relay (`_engine.DelayRelay`, in this process) for
  the delay, as driver.network does.

Journaled before each change, undone newest first by the guardian after a
SIGKILL: the mount (umount, lazily when busy), sshfs (kill-process), sshd
(kill-process; the namespace's undo kills what runs in it too), the sshd's
directory (remove-dir), the veth pair and the namespace.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from perflab import _engine
from perflab.errors import UserError
from perflab.guardian import TOKEN_VAR, journal, new_token
from perflab.hostctl import netns, nfsserve, scratchfs
from perflab.hostctl.mounts import mount_entry
from perflab.hostctl.scratchfs import FsSettings, ScratchFs, undo_mount
from perflab.model import not_setup
from perflab.proc import start_time

SSHD = "/usr/sbin/sshd"
SSHD_PORT = 2222  # in the namespace perflab made for this mount alone
STAND_IN = "sshfs (NFS not available in this kernel)"
START_TIMEOUT_S = 20.0
FSYNC_EXTENSION = "fsync@openssh.com"


def _kernel_has_nfs() -> bool:
    return scratchfs._kernel_has("nfs")


def netfs_note(key: str, settings: FsSettings) -> str:
    how = "netem" if netns.netem_status() else "tbf (rate) and perflab's delay relay (delay)"
    what = (f"NFSv{settings.nfsvers} from an nfs-ganesha of perflab's" if settings.type == "nfs"
            else "sshfs to an sshd of perflab's")
    return (f"{key}: {what} in a network namespace, over a veth link shaped by {how}: "
            f"delay {settings.delay * 1e3:g} ms each way, rate {_rate(settings.rate)}")


def netfs_problems(key: str, settings: FsSettings) -> list[tuple[str, str]]:
    """What would stop `NetFs.mount()`, found without changing anything."""
    problems = [(key, p) for p in netns.problems()]
    if settings.type == "nfs":
        client, server = nfsserve.client_missing(), nfsserve.server_missing()
        if client or server:
            needs = [*([("a kernel with an NFS client" if not _kernel_has_nfs() else "nfs-common (mount.nfs)")]
                       if client else []), *(["nfs-ganesha installed"] if server else [])]
            problems.append((f"{key}.type", f"NFS cannot run here: {'; '.join(m for m in (client, server) if m)}; "
                             "its stand-in is sshfs (FUSE) to an sshd of perflab's over the same shaped link; fix: "
                             f"type = \"sshfs\", or {' and '.join(needs)}"))
        return problems
    for tool, package in (("sshfs", "sshfs"), ("ssh-keygen", "openssh-client"), ("fusermount3", "fuse3")):
        if shutil.which(tool) is None:
            problems.append((f"{key}.type", f"sshfs needs {tool}, which is not on PATH; fix: install {package} "
                                            "(`./dev setup` installs it)"))
    if not os.access(SSHD, os.X_OK):
        problems.append((f"{key}.type", f"sshfs needs an sshd ({SSHD}) for perflab to start; fix: install "
                                        "openssh-server (`./dev setup` installs it; perflab starts no system service)"))
    if not Path("/dev/fuse").exists() or not scratchfs._kernel_has("fuse"):
        problems.append((f"{key}.type", "sshfs needs FUSE (/dev/fuse and fuse in the kernel); fix: `modprobe fuse`"))
    return problems


def _rate(bps: float | None) -> str:
    if not bps:
        return "unlimited"
    return f"{bps / 1e9:g} Gbit/s" if bps >= 1e9 else f"{bps / 1e6:g} Mbit/s"


def sshd_version() -> str | None:
    """The version of the sshd perflab starts ("9.2"): its internal-sftp is the file server."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        out = subprocess.run([SSHD, "-V"], capture_output=True, text=True, timeout=10)
        m = re.search(r"OpenSSH_(\d+\.\d+)", out.stdout + out.stderr)
        return m.group(1) if m else None
    return None


def _version(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text or "")[:2]) or (0,)


def _sends_fsync(sshfs: str | None, sshd: str | None) -> bool:
    """Does fsync() on the mount reach the server's disk? sshfs sends the
    fsync@openssh.com extension since 2.5 when the server offers it, and
    OpenSSH's sftp server (internal-sftp here) has offered it since 6.5."""
    return _version(sshfs) >= (2, 5) and _version(sshd) >= (6, 5)


def contains_symlinks() -> bool:
    """Does this sshfs refuse absolute symbolic links (and those with ..) by
    default? Debian's 3.7.3-1.2 and later do (contain_symlinks, CVE-2026-47187):
    readlink() of one answers EPERM, so a data directory's pg_wal link to a
    WAL apart could not be followed."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        out = subprocess.run(["sshfs", "-h"], capture_output=True, text=True, timeout=10)
        return "no_contain_symlinks" in out.stdout + out.stderr
    return False


def sshfs_version() -> str | None:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        out = subprocess.run(["sshfs", "--version"], capture_output=True, text=True, timeout=10)
        m = re.search(r"SSHFS version (\S+)", out.stdout + out.stderr)
        return m.group(1) if m else None
    return None


class NetFs(ScratchFs):
    """A server's directory mounted here over a shaped link: `mount()` makes
    the namespace, link, sshd and mount; `unmount()` undoes them (the files
    stay, for a resume); `discard()` deletes the files too."""

    def __init__(self, name: str, settings: FsSettings, mountpoint: Path, export_dir: Path, run_as: str | None,
                 workdir: Path) -> None:
        super().__init__(name, settings, mountpoint, export_dir)
        self.export_dir = self.backing_file
        self.run_as = run_as
        self.workdir = workdir
        self.tag = ""
        self.ns = ""
        self.link: netns.Link | None = None
        self.server: subprocess.Popen[bytes] | None = None
        self.client: subprocess.Popen[bytes] | None = None
        self.relay: _engine.DelayRelay | None = None
        self.state: Path | None = None
        self.netem = False
        self.fsync = False
        self.version: str | None = None
        self._keys: list[str] = []
        self._source = ""  # what sshfs mounts ("user@host:dir"), the mount's source in /proc/mounts

    @property
    def loop_backed(self) -> bool:
        return False

    def _mount_sources(self) -> list[str]:
        return [self._source]

    def _user(self) -> pwd.struct_passwd:
        if self.run_as is None:
            raise UserError(f"{self.settings.type}: perflab serves the files as the server's user, and runs as root "
                            "for the namespace", "run perflab as root")
        return pwd.getpwnam(self.run_as)

    def mount(self) -> bool:
        if mount_entry(self.mountpoint) is not None:
            raise UserError(f"{self.mountpoint}: something is mounted there already",
                            f"unmount it (`umount {self.mountpoint}`) or choose another directory")
        fresh = self.serve()
        try:
            if self.settings.type == "nfs":
                self._mount_nfs()
            else:
                self._mount_sshfs(self._user())
        except BaseException:
            self.unmount()
            raise
        return fresh

    def serve(self) -> bool:
        """The server's side alone: the served directory, the namespace and
        its shaped link, the file server in it, accepting at `server_address`
        (nothing mounted here yet); `unmount()` undoes it. True when the
        directory is new."""
        user = self._user()
        fresh = self._export(user)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        try:
            self._namespace()
            if self.settings.type == "nfs":
                self._start_ganesha()
            else:
                self._start_sshd(user)
        except BaseException:
            self.unmount()
            raise
        return fresh

    @property
    def server_address(self) -> tuple[str, int]:
        """Where the file server accepts, the namespace's end of the link (unshaped by the delay relay)."""
        assert self.link is not None
        return str(self.link.b.v4.ip), nfsserve.NFS_PORT if self.settings.type == "nfs" else SSHD_PORT

    def _export(self, user: pwd.struct_passwd) -> bool:
        """The served directory, the server's user's; True when new."""
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.export_dir, 0o700)
            os.chown(self.export_dir, user.pw_uid, user.pw_gid)
            return True
        st = os.lstat(self.export_dir)
        if not os.path.isdir(self.export_dir) or os.path.islink(self.export_dir) or st.st_uid != user.pw_uid:
            raise UserError(f"{self.export_dir} is not the directory perflab made for {self.run_as}'s files",
                            f"remove {self.export_dir}")
        return False

    def _namespace(self) -> None:
        self.tag = netns.new_tag()
        self.ns = f"{netns.PREFIX}-{self.tag}-netfs"
        netns.create_netns(self.ns)
        self._keys.append(f"netns:{self.ns}")
        self.link = netns.create_veth(f"{netns.PREFIX}{self.tag}c", None, f"{netns.PREFIX}{self.tag}s", self.ns,
                                      netns.free_subnets(1)[0])
        self._keys.append(f"link:{self.link.a.dev}")
        known = netns.netem_status()
        self.netem = netns.try_netem(self.link.a) if known is None else known
        how = netns.Shape(delay_s=self.settings.delay if self.netem else 0.0, rate_bps=self.settings.rate)
        for end in (self.link.a, self.link.b):
            netns.shape(end, how, self.netem)

    def _start_sshd(self, user: pwd.struct_passwd) -> None:
        assert self.link is not None
        # the sshd's directory: made by root, filled, then given to the server's user (sshd reads its key as that user)
        self.state = self.mountpoint.parent / f"perflab-{self.tag}-sshd"  # the server's user reaches it
        journal().add("remove-dir", f"remove-dir:{self.state}", path=str(self.state))
        self._keys.append(f"remove-dir:{self.state}")
        os.mkdir(self.state, 0o700)
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"perflab-{self.tag}", "-f",
                            str(self.state / key)], check=True, capture_output=True, timeout=30)
        host_pub = (self.state / "host_key.pub").read_text().split()
        (self.state / "known_hosts").write_text(f"perflab-netfs-{self.tag} {host_pub[0]} {host_pub[1]}\n")
        server_dir = self.state / "server"
        os.mkdir(server_dir, 0o700)
        shutil.copy(self.state / "host_key", server_dir / "host_key")
        shutil.copy(self.state / "client_key.pub", server_dir / "authorized_keys")
        (server_dir / "sshd_config").write_text(_sshd_config(server_dir, str(self.link.b.v4.ip), user.pw_name))
        for path in (server_dir, *server_dir.iterdir()):
            os.chown(path, user.pw_uid, user.pw_gid)
        os.chmod(self.state, 0o711)  # the server's user passes through to its own directory only
        argv = ["ip", "netns", "exec", self.ns, "setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                "--clear-groups", "--", SSHD, "-D", "-e", "-f", str(server_dir / "sshd_config")]
        self.server = self._serve("sshd", argv, self.state / "sshd.log", self.state / "sshd.log", SSHD_PORT)

    def _serve(self, what: str, argv: list[str], log: Path, see: Path, port: int) -> subprocess.Popen[bytes]:
        """Start the file server (journaled by its token) and wait until it accepts on `port` in the namespace."""
        assert self.link is not None
        token = new_token()
        with open(log, "ab") as server_log:  # the child keeps its own copy of the fd
            server = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=server_log, cwd="/",
                                      env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", TOKEN_VAR: token})
        journal().add("kill-process", f"kill-process:{server.pid}", pid=server.pid,
                      start=start_time(server.pid), token=token)
        self._keys.append(f"kill-process:{server.pid}")
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection((str(self.link.b.v4.ip), port), 1.0):
                return server
            if server.poll() is not None or time.monotonic() > deadline:
                said = " / ".join(dict.fromkeys(_tail(f) for f in (log, see)))
                raise UserError(f"{what} in {self.ns} did not start: {said}", f"see {see}")
            time.sleep(0.05)

    def _start_ganesha(self) -> None:
        """nfs-ganesha and its rpcbind in the namespace (hostctl.nfsserve), its state in a directory of perflab's."""
        assert self.link is not None
        self.state = self.mountpoint.parent / f"perflab-{self.tag}-nfs"
        journal().add("remove-dir", f"remove-dir:{self.state}", path=str(self.state))
        self._keys.append(f"remove-dir:{self.state}")
        os.mkdir(self.state, 0o700)
        os.mkdir(self.state / "recovery", 0o700)
        (self.state / "ganesha.conf").write_text(
            nfsserve.ganesha_config(self.state, str(self.link.b.v4.ip), self.export_dir))
        self.version = nfsserve.ganesha_version()
        self.server = self._serve("nfs-ganesha", nfsserve.server_argv(self.ns, self.state), self.state / "start.log",
                                self.state / "ganesha.log", nfsserve.NFS_PORT)

    def _mount_nfs(self) -> None:
        """The kernel's NFS client mounts the export here, through the delay relay where netem is missing."""
        assert self.link is not None and self.state is not None
        host, port = str(self.link.b.v4.ip), nfsserve.NFS_PORT
        if self.settings.delay and not self.netem:
            self.relay = _engine.DelayRelay("127.0.0.1:0", f"{host}:{port}", self.settings.delay, 0.0, seed=1)
            host, port = "127.0.0.1", self.relay.port
        self._source = f"{host}:{nfsserve.PSEUDO}"
        options = nfsserve.mount_options(self.settings.nfsvers, self.settings.rsize, self.settings.wsize, port)
        argv = ["mount", "-t", "nfs", "-o", ",".join(options + self.settings.mount_option_list() + ["nosuid", "nodev"]),
                self._source, str(self.mountpoint)]
        journal().add("mount", self._mount_key, **self._mount_args())
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            proc = subprocess.CompletedProcess(argv, 1, "", "no answer within 60 s")
        if proc.returncode != 0 or mount_entry(self.mountpoint) is None:
            raise UserError(f"{shlex.join(argv)} failed: {scratchfs._last_lines(proc.stderr or proc.stdout)}; "
                            f"the server said: {_tail(self.state / 'ganesha.log')}",
                            f"see {self.state / 'ganesha.log'}")
        self.fsync = True  # fsync() is the client's COMMIT to the server, which writes through to its disk

    def _mount_sshfs(self, user: pwd.struct_passwd) -> None:
        assert self.link is not None and self.state is not None
        host, port = str(self.link.b.v4.ip), SSHD_PORT
        if self.settings.delay and not self.netem:
            self.relay = _engine.DelayRelay("127.0.0.1:0", f"{host}:{port}", self.settings.delay, 0.0, seed=1)
            host, port = "127.0.0.1", self.relay.port
        self.version = sshfs_version()
        self._source = f"{user.pw_name}@{host}:{self.export_dir}"
        token = new_token()
        argv = ["sshfs", "-f", "-o", "allow_other,default_permissions,noatime",
                "-o", f"port={port}", "-o", f"IdentityFile={self.state / 'client_key'}",
                "-o", f"UserKnownHostsFile={self.state / 'known_hosts'}", "-o", "StrictHostKeyChecking=yes",
                "-o", f"HostKeyAlias=perflab-netfs-{self.tag}", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                "-o", "Compression=no", "-o", "ServerAliveInterval=15",
                # the server is perflab's own sshd on this machine, serving the server's user's directory: a
                # link there is that user's, as on a local disk, and resolves here (pg_wal to a WAL apart)
                *(["-o", "no_contain_symlinks"] if contains_symlinks() else []),
                *(["-o", self.settings.mount_options] if self.settings.mount_options else []),
                self._source, str(self.mountpoint)]
        log = self.state / "sshfs.log"
        with open(log, "wb") as sshfs_log:  # the child keeps its own copy of the fd
            self.client = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                           stderr=sshfs_log, cwd="/", env={**os.environ, TOKEN_VAR: token})
        journal().add("kill-process", f"kill-process:{self.client.pid}", pid=self.client.pid,
                      start=start_time(self.client.pid), token=token)
        self._keys.append(f"kill-process:{self.client.pid}")
        journal().add("mount", self._mount_key, **self._mount_args())
        deadline = time.monotonic() + START_TIMEOUT_S
        while mount_entry(self.mountpoint) is None:
            if self.client.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if mount_entry(self.mountpoint) is None:
            raise UserError(f"{shlex.join(argv)} did not mount: {_tail(log)}", f"see {log}")
        self.fsync = _sends_fsync(self.version, sshd_version())
        if not self.fsync:
            raise UserError(f"the sftp server did not offer {FSYNC_EXTENSION}: a database's fsync on this sshfs "
                            "would not reach the server's disk, so perflab does not run on it",
                            "an OpenSSH of 6.5 or later (its sftp server has the extension)")

    def unmount(self) -> None:
        undo_mount(self._mount_args())
        journal().remove(self._mount_key)
        for proc in (self.client, self.server):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self.relay is not None:
            with contextlib.suppress(Exception):
                self.relay.stop()
        if self.link is not None:
            netns.delete_link(self.link.a.dev)
        if self.ns:
            netns.delete_netns(self.ns)
        if self.state is not None:
            shutil.rmtree(self.state, ignore_errors=True)
        for key in self._keys:
            journal().remove(key)
        self._keys, self.client, self.server, self.relay, self.link, self.ns, self.state = [], None, None, None, None, "", None

    def own(self, path: Path) -> None:
        """Make `path`, a file perflab wrote through the mount, root's on the
        server's side: written through sshfs it is the server's user's, and a
        mark of perflab's (a cluster's perflab-created) is trusted only as
        root's, as on a local disk. Walked from the export directory without
        following a link (the server's user owns every directory on the way)."""
        parts = path.relative_to(self.mountpoint).parts
        fd = os.open(self.export_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            for part in parts[:-1]:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = nxt
            os.chown(parts[-1], 0, 0, dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)

    def discard(self) -> int:
        self.unmount()
        freed = 0
        if os.path.isdir(self.export_dir) and not os.path.islink(self.export_dir):
            for root, _dirs, files in os.walk(self.export_dir):
                for f in files:
                    with contextlib.suppress(OSError):
                        freed += os.lstat(os.path.join(root, f)).st_blocks * 512
            shutil.rmtree(self.export_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.mountpoint.rmdir()
        return freed

    def describe(self) -> dict[str, Any]:
        entry = mount_entry(self.mountpoint)
        nfs = self.settings.type == "nfs"
        server: dict[str, Any] = {
            "served_by": "nfs-ganesha", "ganesha_version": self.version, "nfsvers": self.settings.nfsvers,
            "rsize": self.settings.rsize, "wsize": self.settings.wsize, "fsync": "NFS COMMIT",
        } if nfs else {
            "served_by": STAND_IN if not _kernel_has_nfs() else "sshfs",
            "sshfs_version": self.version,
            "fsync": FSYNC_EXTENSION if self.fsync else "not offered",
            "sshd_version": sshd_version(),
        }
        return not_setup({
            "name": self.name,
            "type": self.settings.type,
            **server,
            "network": True,
            "loop_backed": False,
            "delay_ms": self.settings.delay * 1e3,
            "rate": _rate(self.settings.rate),
            "delay_by": "netem" if self.netem else "perflab's relay" if self.settings.delay else "none",
            "rate_by": ("netem" if self.netem else "tbf") if self.settings.rate else "none",
            "namespace": self.ns,
            "export_dir": str(self.export_dir),
            "mountpoint": str(self.mountpoint),
            "mount_options": self.settings.mount_options,
            "mounted": entry is not None,
            "mounted_options": entry["options"] if entry is not None else None,
        }, "name", "namespace", "export_dir", "mountpoint", *(("ganesha_version",) if nfs else ("sshfs_version",
                                                                                            "sshd_version")))


def _sshd_config(state: Path, address: str, user: str) -> str:
    return "\n".join([
        f"ListenAddress {address}:{SSHD_PORT}",
        f"HostKey {state / 'host_key'}",
        f"AuthorizedKeysFile {state / 'authorized_keys'}",
        "PidFile none", "StrictModes no", "UsePAM yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "PermitRootLogin no",
        f"AllowUsers {user}", "Subsystem sftp internal-sftp", "ForceCommand internal-sftp",
        "AllowTcpForwarding no", "AllowAgentForwarding no", "X11Forwarding no", "PermitTTY no",
        "LogLevel ERROR", "",
    ])


def _tail(path: Path) -> str:
    with contextlib.suppress(OSError):
        return scratchfs._last_lines(path.read_text(errors="replace"))
    return "no message"
