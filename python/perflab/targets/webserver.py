"""What every managed web server shares (nginx, and any server started from
a command line): a free port on 127.0.0.1, a document root perflab points
at a file set, the start with a readiness check, the stop, the log tail, the
cgroup of `resources`, and the journal entry that lets the guardian stop it
after a SIGKILL of perflab.

Every process of a server perflab starts carries PERFLAB_SERVER_TOKEN in its
environment, inherited by its workers and children, and runs in a session
of its own. The journal entry ("web-server") holds the token and the
target's directory, written *before* the server starts, and the session
once it has; the undo finds the processes by any of them in /proc and ends
them, so a master killed before its workers, or workers a crash orphaned,
are found too.

No server runs as root. When perflab is root, the server's processes that
answer requests run as `target.run_as` (default `nobody`, as PostgreSQL's):
nginx's workers (its master, which only reads the configuration and opens
the logs and the socket, stays root as nginx intends), and a `process`
command's every process (started through setpriv). What they read must be
reachable by that user: the document root and the temporary paths live in
the target's directory when the user can reach it, else in a directory of
perflab's under /tmp (`perflab-web-<digest>-<random>`, made afresh: never
one another user made first; journaled, removed at teardown). A published
directory the user cannot reach (the file set in root's cache) is served
through a tree of hard links to its files made there (a copy only where the
two are on different filesystems): no byte is copied, and the server reads
the same inodes (sendfile, page cache). The tree holds only what the user
could read in the directory itself: no link out of it, no file its mode
keeps from that user.
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import http.client
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import Field

from perflab.endpoints import Endpoint, HttpEndpoint
from perflab.errors import RunFailure, UserError
from perflab.guardian import journal, start_time
from perflab.hostctl.cgroups import ResourceSettings, ServerCgroup, resource_problems
from perflab.hostctl.shareddir import own_dir
from perflab.model import not_setup
from perflab.settings_model import OsText
from perflab.targets.base import Target, TargetSettings
from perflab.targets.serverhome import free_port, reachable_by, resolve_run_as
from perflab.targets.serverproc import server_env, server_processes, stop_server_processes
from perflab.units import Duration

LOG_FILE = "server.log"
DOCROOT = "docroot"  # a symlink the workload points at its file set


class ManagedServerSettings(TargetSettings):
    # How long the server may take to start answering.
    start_timeout: Duration = Field(default=30.0, gt=0)
    # Limits on the server's whole process tree (a cgroup).
    resources: ResourceSettings | None = None
    # The OS user the server's workers run as when perflab is root (default nobody).
    run_as: OsText | None = None

    def server_cpus(self) -> str | None:
        return self.resources.cpus if self.resources is not None else None


def server_user(settings: ManagedServerSettings) -> str | None:
    """The OS user a managed web server's workers run as: None (this user)
    unless perflab is root; then `run_as`, default `nobody`, as PostgreSQL's
    (postgres.resolve_run_as). Never root."""
    return resolve_run_as(settings.run_as)


def setpriv() -> str:
    """util-linux's setpriv, which runs a command as another user."""
    found = shutil.which("setpriv") or shutil.which("setpriv", path="/usr/bin:/bin")
    if not found:
        raise UserError("setpriv is not on PATH; perflab needs it to run the server as target.run_as",
                        "install util-linux")
    return found


def user_ids(user: str) -> tuple[int, int, str]:
    """uid, gid and the group's name of `user`."""
    pw = pwd.getpwnam(user)
    try:
        group = grp.getgrgid(pw.pw_gid).gr_name
    except KeyError:
        group = str(pw.pw_gid)
    return pw.pw_uid, pw.pw_gid, group


def _readable_by(directory: Path, user: str) -> bool:
    """Whether `user` can reach `directory` and read every file and
    directory under it (from the mode bits)."""
    if not reachable_by(directory, user):
        return False
    uid, gid, _ = user_ids(user)

    def ok(st: os.stat_result, want: int) -> bool:
        shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
        return (st.st_mode >> shift) & want == want

    for base, dirs, files in os.walk(directory):
        for name in dirs:
            if not ok(os.lstat(os.path.join(base, name)), 0o5):
                return False
        for name in files:
            if not ok(os.stat(os.path.join(base, name)), 0o4):
                return False
    return ok(os.stat(directory), 0o5)


def _may_read(st: os.stat_result, uid: int, gid: int) -> bool:
    """Whether the user (uid, gid) may read a file of this stat, by its mode."""
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    return bool((st.st_mode >> shift) & 0o4)


def _copy_file(src: str, st: os.stat_result, dst: Path) -> bool:
    """Copy regular file `src` (the one `st` describes: opened without
    following a link, and checked) to new file `dst`, with its mode and owner."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as fin:
        have = os.fstat(fin.fileno())
        if not stat.S_ISREG(have.st_mode) or (have.st_dev, have.st_ino) != (st.st_dev, st.st_ino):
            return False  # changed since it was looked at
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(out, "wb") as fout:
            shutil.copyfileobj(fin, fout)
            os.fchown(fout.fileno(), have.st_uid, have.st_gid)
            os.fchmod(fout.fileno(), stat.S_IMODE(have.st_mode) & 0o755)
    return True


def linked_tree(source: Path, into: Path, user: str) -> str:
    """A tree at `into` of hard links to the files under `source` that
    `user` may read by their own mode (what stops `user` is a directory on
    the way to them), its directories 0755 (perflab's own); a file on
    another filesystem is copied with its mode and owner. No link is
    followed out of `source`: a symlink is served only when it points at a
    regular file inside `source` (as that file); one that points out of
    it, a linked directory, a file `user` could not read, a device or a
    FIFO is left out. Nothing becomes readable through the tree that
    `user` could not read in `source`.
    Returns "hard links", "a copy" or "hard links and copies"."""
    uid, gid, _ = user_ids(user)
    inside = os.path.realpath(source)
    partial = into.with_name(into.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(mode=0o755)
    how = set()
    for base, dirs, files in os.walk(source):  # links to directories are listed, not entered
        rel = Path(base).relative_to(source)
        for name in list(dirs):
            if os.path.islink(os.path.join(base, name)):
                dirs.remove(name)
                continue
            (partial / rel / name).mkdir(mode=0o755)
        for name in files:
            src, dst = os.path.join(base, name), partial / rel / name
            try:
                st = os.lstat(src)
                if stat.S_ISLNK(st.st_mode):
                    src = os.path.realpath(src)
                    if os.path.commonpath([inside, src]) != inside:
                        continue  # out of the source: never served
                    st = os.lstat(src)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or not _may_read(st, uid, gid):
                continue
            try:
                os.link(src, dst, follow_symlinks=False)
                how.add("hard links")
                continue
            except OSError:
                pass  # another filesystem (EXDEV), or links refused: copy
            if _copy_file(src, st, dst):
                how.add("a copy")
    shutil.rmtree(into, ignore_errors=True)
    os.replace(partial, into)
    return "hard links and copies" if len(how) == 2 else how.pop() if how else "hard links"


def _is_ready(port: int, path: str) -> bool:
    """Whether the server answers an HTTP request (any status) on the port."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        conn.request("GET", path)
        conn.getresponse().read()
        return True
    except OSError:
        return False
    except http.client.HTTPException:
        return False
    finally:
        conn.close()


# The settings of a kind of managed web server (nginx's, a process's).
ServerSettingsT = TypeVar("ServerSettingsT", bound=ManagedServerSettings)


class ManagedWebServer(Target[ServerSettingsT, HttpEndpoint]):
    """A web server perflab starts on 127.0.0.1 and stops. A subclass says
    how to start it (`command`, after `write_config`) and where it is ready."""

    endpoint_type: ClassVar[type[Endpoint]] = HttpEndpoint
    ready_path: str = "/"
    # A short name for cgroups and messages ("nginx").
    server_name: ClassVar[str] = "server"
    # Whether perflab runs the whole command as run_as (a server that does not
    # change user itself); nginx changes its workers' user itself.
    whole_as_user: ClassVar[bool] = True

    @classmethod
    def for_distributed_driver(cls, settings: ServerSettingsT) -> tuple[ServerSettingsT, list[tuple[str, str]], str | None]:
        """The server listens on TCP (127.0.0.1): Ray workers on this machine reach it."""
        return settings, [], None

    def __init__(self, settings: ServerSettingsT, workdir: Path, base_dir: Path | None = None) -> None:
        super().__init__(settings, workdir, base_dir)
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.token: str | None = None
        self.cgroup: ServerCgroup | None = None
        self.started_settings: ManagedServerSettings | None = None
        self._log_start = 0
        # Who the workers run as (None: this user), and where what they read lives.
        self.run_as: str | None = None
        self.home = workdir
        self.served: tuple[Path, Path, str] | None = None  # published directory, what is served, how

    # ---------------------------------------------------------- subclass

    def command(self, port: int, root: Path) -> list[str]:
        raise NotImplementedError

    def write_config(self, port: int, root: Path) -> None:  # noqa: B027 - optional hook
        """Write the server's configuration before a start."""

    # ---------------------------------------------------------- paths

    @property
    def log_path(self) -> Path:
        return self.workdir / LOG_FILE

    @property
    def docroot(self) -> Path:
        return self.home / DOCROOT

    def _home(self) -> Path:
        """Where the document root and the temporary paths go: the target's
        directory, unless the workers' user cannot reach it (root, with the
        output under /root): then /tmp/perflab-web-<digest>-<random>, a name
        no other user can make first (it is made afresh at each start)."""
        if reachable_by(self.workdir, self.run_as):
            return self.workdir
        digest = hashlib.sha256(str(self.workdir.resolve()).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"perflab-web-{digest}-{secrets.token_hex(6)}"

    def _make_home(self) -> None:
        self.run_as = server_user(self.settings)
        self.home = self._home()
        if self.home != self.workdir:
            # Journaled first: after a SIGKILL the guardian removes it.
            journal().add("remove-dir", f"web-home:{self.home}", path=str(self.home))
            try:
                own_dir(self.home, 0o755, reuse=False)  # never one that was there before
            except BaseException:
                journal().remove(f"web-home:{self.home}")
                self.home = self.workdir
                raise

    def publish(self, directory: Path) -> None:
        """Serve `directory`: the document root becomes a link to it (swapped
        atomically, so a running server sees the old or the new one). When
        the workers' user cannot read it, a tree of hard links to its files
        in the server's home is served instead (`linked_tree`)."""
        source = directory.resolve()
        if self.served is not None and self.served[0] == source and self.served[1].is_dir():
            serve = self.served[1]
            how = self.served[2]
        elif self.run_as is None or _readable_by(source, self.run_as):
            serve, how = source, "symlink"
        else:
            digest = hashlib.sha256(str(source).encode()).hexdigest()[:12]
            serve = self.home / f"files-{digest}"
            how = linked_tree(source, serve, self.run_as)
        tmp = self.home / f"{DOCROOT}.new"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(serve)
        os.replace(tmp, self.docroot)
        for old in self.home.glob("files-*"):  # trees of sets served before
            if old != serve:
                shutil.rmtree(old, ignore_errors=True)
        self.served = (source, serve, how)

    @classmethod
    def preflight(cls, settings: ServerSettingsT, base_dir: Path) -> list[tuple[str, str]]:
        problems = resource_problems(settings.resources) if settings.resources is not None else []
        try:
            if server_user(settings) is not None and cls.whole_as_user:
                setpriv()
        except UserError as exc:
            problems.append(exc.as_problem("target.run_as"))
        return problems

    # ---------------------------------------------------------- lifecycle

    def provision(self) -> HttpEndpoint:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._make_home()
        # No document root, or a link left by a server this directory ran
        # before to a tree of links since removed (a server that checks its
        # root at start, Apache, would refuse it): the empty one until the
        # workload publishes its set.
        if not self.docroot.is_dir():
            empty = self.home / "empty"
            empty.mkdir(mode=0o755, exist_ok=True)
            self.publish(empty)
        self._start()
        assert self.port is not None
        return HttpEndpoint(
            address=f"127.0.0.1:{self.port}",
            host_header=f"127.0.0.1:{self.port}",
            publish=self.publish,
            fresh=True,
            info={"server": self.server_name},
        )

    def _start(self) -> None:
        port = self.port or free_port()
        self.write_config(port, self.docroot)
        argv = self.command(port, self.docroot)
        if self.run_as is not None and self.whole_as_user:
            # Every process of the command as run_as: setpriv changes user, then execs it.
            uid, gid, _ = user_ids(self.run_as)
            argv = [setpriv(), f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]
        self._enter_cgroup()
        if self.cgroup is not None:
            argv = self.cgroup.wrap(argv)
        token = secrets.token_hex(8)
        # Before the server exists: if perflab dies from here on, its guardian stops it.
        journal().add("web-server", f"web-server:{self.workdir}", token=token)
        self.token = token
        self.log_path.touch()
        self._log_start = self.log_path.stat().st_size
        # nothing of perflab's own environment (serverproc.server_env)
        env = server_env(token, self.run_as if self.whole_as_user else None)
        with self.log_path.open("ab") as log:
            try:
                self.proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=env, cwd=self.home, start_new_session=True,
                )
            except OSError as exc:
                self._forget()
                raise RunFailure(f"{self.server_name} did not start: {exc}") from None
        # Its session too, so that workers outliving a killed master are found.
        journal().add("web-server", f"web-server:{self.workdir}", token=token,
                      session=self.proc.pid, session_start=start_time(self.proc.pid))
        self.port = port
        deadline = time.monotonic() + float(self.settings.start_timeout)
        while True:
            if (status := self.proc.poll()) is not None:  # read before _stop forgets the process
                tail = self.log_tail(20)
                self._stop()
                last = next((line for line in reversed((tail or "").splitlines()) if line.strip()), "")
                raise RunFailure(f"{self.server_name} exited at start with status {status}"
                                 + (f": {last.strip()[:200]}" if last else " and wrote nothing"), log_tail=tail)
            if _is_ready(port, self.ready_path):
                break
            if time.monotonic() > deadline:
                tail = self.log_tail(20)
                self._stop()
                raise RunFailure(
                    f"{self.server_name} did not answer http://127.0.0.1:{port}{self.ready_path} within "
                    f"{float(self.settings.start_timeout):g} s (target.start_timeout)", log_tail=tail,
                )
            time.sleep(0.05)
        self.started_settings = self.settings

    def _enter_cgroup(self) -> None:
        wanted = self.settings.resources
        if self.cgroup is not None and self.cgroup.settings != wanted:
            self.cgroup.remove(kill=True)
            self.cgroup = None
        if wanted is not None and self.cgroup is None:
            digest = hashlib.sha256(str(self.workdir).encode()).hexdigest()[:12]
            cgroup = ServerCgroup(f"perflab-web-{digest}", wanted)
            cgroup.create()
            self.cgroup = cgroup

    def _stop(self) -> None:
        if self.token is not None:
            session = self.proc.pid if self.proc is not None else None
            stop_server_processes(self.token, session)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
            self.proc = None
        self._forget()

    def _forget(self) -> None:
        journal().remove(f"web-server:{self.workdir}")
        self.token = None

    def reconfigure(self, settings: ServerSettingsT) -> bool:
        self.settings = settings
        if settings == self.started_settings and self.check_alive() is None:
            return False
        self._stop()
        if server_user(settings) != self.run_as:  # another user: another home, the set published again
            published = self.served[0] if self.served is not None else None
            self._remove_home()
            self.docroot.unlink(missing_ok=True)
            self._make_home()
            empty = self.home / "empty"
            empty.mkdir(mode=0o755, exist_ok=True)
            self.publish(published if published is not None and published.is_dir() else empty)
        self._start()
        return True

    def teardown(self) -> None:
        self._stop()
        if self.cgroup is not None:
            self.cgroup.remove(kill=True)
            self.cgroup = None
        self._remove_home()

    def _remove_home(self) -> None:
        """Remove the trees of links made for the workers, and the home under
        /tmp (with its journal entry)."""
        self.served = None
        if self.home != self.workdir:
            shutil.rmtree(self.home, ignore_errors=True)
            journal().remove(f"web-home:{self.home}")
        else:
            for tree in self.home.glob("files-*"):
                shutil.rmtree(tree, ignore_errors=True)

    # ---------------------------------------------------------- facts

    def check_alive(self) -> str | None:
        if self.proc is None:
            return f"{self.server_name} is not running"
        code = self.proc.poll()
        if code is not None:
            return f"{self.server_name} exited with status {code}"
        return None

    def processes(self) -> dict[int, str]:
        if self.token is None:
            return {}
        main = self.proc.pid if self.proc is not None else None
        pids = server_processes(self.token, main)
        return {pid: ("master" if pid == main else "worker") for pid in pids}

    def resource_usage(self) -> dict[str, float]:
        return self.cgroup.stats() if self.cgroup is not None else {}

    def log_tail(self, lines: int = 40) -> str | None:
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._log_start)
                text = f.read().decode(errors="replace")
        except OSError:
            return None
        tail = text.splitlines()[-lines:]
        return "\n".join(tail) if tail else None

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "kind": self.settings.kind,
            "address": f"127.0.0.1:{self.port}" if self.port else None,
            "root": str(self.docroot.resolve()) if self.docroot.exists() else None,
            "pids": sorted(self.processes()),
            # The workers' user (None: perflab's own, not root), and how the set reaches them.
            "run_as": self.run_as,
            "served": self.served[2] if self.served is not None else None,
        }
        if self.cgroup is not None:
            info["resources"] = self.cgroup.describe()
        # the port, the pids and the published file set's path are perflab's choice
        return not_setup(info, "address", "pids", "root")

    def data_locations(self) -> list[Path]:
        return []
