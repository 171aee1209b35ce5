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
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from perflab.endpoints import Endpoint, HttpEndpoint
from perflab.errors import RunFailure
from perflab.guardian import journal
from perflab.hostctl.cgroups import ResourceSettings, ServerCgroup, resource_problems
from perflab.targets.base import Target, TargetSettings
from perflab.targets.postgres import _free_port, _pid_alive
from perflab.units import Duration

TOKEN_VAR = "PERFLAB_SERVER_TOKEN"
LOG_FILE = "server.log"
DOCROOT = "docroot"  # a symlink the workload points at its file set
STOP_WAIT_S = 5.0


def server_processes(token: str, marker: str | None = None, session: int | None = None) -> list[int]:
    """Pids of one managed server: its environment holds
    PERFLAB_SERVER_TOKEN=token, or its command line names `marker` (the
    target's directory: nginx rewrites its environment area with its process
    title, which keeps the -p path), or it is in `session` (the server was
    started in a session of its own; its workers stay in it)."""
    needle = f"{TOKEN_VAR}={token}".encode()
    mark = marker.encode() if marker else None
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] in ("Z", "X"):
                continue
            mine = session is not None and int(fields[3]) == session
            if not mine and mark is not None:
                mine = mark in (entry / "cmdline").read_bytes()
            if not mine:
                mine = needle in (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if mine:
            found.append(int(entry.name))
    return found


def stop_server_processes(token: str, marker: str | None, session: int | None,
                          wait_s: float = STOP_WAIT_S) -> None:
    """SIGTERM every process of the server, then SIGKILL what is left after
    `wait_s`; returns when none is alive (or 2 s after the SIGKILL)."""
    for sig, seconds in ((signal.SIGTERM, wait_s), (signal.SIGKILL, 2.0)):
        pids = server_processes(token, marker, session)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
            time.sleep(0.02)


def undo_web_server(args: dict[str, Any]) -> None:
    """The guardian's undo of a managed web server (perflab died)."""
    stop_server_processes(str(args["token"]), args.get("marker"), args.get("session"), wait_s=2.0)


class ManagedServerSettings(TargetSettings):
    start_timeout: Duration = Field(default=30.0, gt=0)
    # Limits on the server's whole process tree (a cgroup).
    resources: ResourceSettings | None = None


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


class ManagedWebServer(Target):
    """A web server perflab starts on 127.0.0.1 and stops. A subclass says
    how to start it (`command`, after `write_config`) and where it is ready."""

    endpoint_type: ClassVar[type[Endpoint]] = HttpEndpoint
    ready_path: str = "/"
    # A short name for cgroups and messages ("nginx").
    server_name: ClassVar[str] = "server"

    @classmethod
    def for_distributed_driver(cls, settings: Any) -> tuple[Any, list[tuple[str, str]], str | None]:
        """The server listens on TCP (127.0.0.1): Ray workers on this machine reach it."""
        return settings, [], None

    def __init__(self, settings: Any, workdir: Path, base_dir: Path | None = None) -> None:
        super().__init__(settings, workdir, base_dir)
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.token: str | None = None
        self.cgroup: ServerCgroup | None = None
        self.started_settings: Any = None
        self._log_start = 0

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
        return self.workdir / DOCROOT

    def publish(self, directory: Path) -> None:
        """Serve `directory`: the document root becomes a link to it (swapped
        atomically, so a running server sees the old or the new one)."""
        tmp = self.workdir / f"{DOCROOT}.new"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(directory.resolve())
        os.replace(tmp, self.docroot)

    @classmethod
    def preflight(cls, settings: Any, base_dir: Path) -> list[tuple[str, str]]:
        return resource_problems(settings.resources) if settings.resources is not None else []

    # ---------------------------------------------------------- lifecycle

    def provision(self) -> Endpoint:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.docroot.is_symlink():
            empty = self.workdir / "empty"
            empty.mkdir(exist_ok=True)
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
        port = self.port or _free_port()
        self.write_config(port, self.docroot)
        argv = self.command(port, self.docroot)
        self._enter_cgroup()
        if self.cgroup is not None:
            argv = self.cgroup.wrap(argv)
        token = secrets.token_hex(8)
        # Before the server exists: if perflab dies from here on, its guardian stops it.
        journal().add("web-server", f"web-server:{self.workdir}", token=token, marker=str(self.workdir))
        self.token = token
        self.log_path.touch()
        self._log_start = self.log_path.stat().st_size
        env = dict(os.environ)
        env[TOKEN_VAR] = token
        with self.log_path.open("ab") as log:
            try:
                self.proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=env, cwd=self.workdir, start_new_session=True,
                )
            except OSError as exc:
                self._forget()
                raise RunFailure(f"{self.server_name} did not start: {exc}") from None
        # Its session too, so that workers outliving a killed master are found.
        journal().add("web-server", f"web-server:{self.workdir}", token=token, marker=str(self.workdir),
                      session=self.proc.pid)
        self.port = port
        deadline = time.monotonic() + float(self.settings.start_timeout)
        while True:
            if self.proc.poll() is not None:
                tail = self.log_tail(20)
                self._stop()
                raise RunFailure(
                    f"{self.server_name} exited at start with status {self.proc.returncode}", log_tail=tail
                )
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
            stop_server_processes(self.token, str(self.workdir), session)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
            self.proc = None
        self._forget()

    def _forget(self) -> None:
        journal().remove(f"web-server:{self.workdir}")
        self.token = None

    def reconfigure(self, settings: Any) -> bool:
        self.settings = settings
        if settings == self.started_settings and self.check_alive() is None:
            return False
        self._stop()
        self._start()
        return True

    def teardown(self) -> None:
        self._stop()
        if self.cgroup is not None:
            self.cgroup.remove(kill=True)
            self.cgroup = None

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
        pids = server_processes(self.token, str(self.workdir), main)
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
        }
        if self.cgroup is not None:
            info["resources"] = self.cgroup.describe()
        return info

    def data_locations(self) -> list[Path]:
        return []
