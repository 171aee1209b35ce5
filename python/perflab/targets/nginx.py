"""The `nginx` target: nginx from PATH, managed by perflab.

perflab writes the whole configuration from `target.settings` (directive ->
value): main-context directives (worker_processes, ...) go at the top,
events-context ones (worker_connections, ...) in `events`, every other one
in `http`. The defaults are a static file server's: one worker, sendfile,
tcp_nopush, an open file cache, many keep-alive requests, no access log.
perflab itself sets where it listens (127.0.0.1 on a free port), the
document root, the pid file, the logs and the temporary paths; those names
are refused in `settings`, and so is every directive that names a file or a
directory (nginx's master, root, would make or read it: `takes_path`), but
`access_log = "NAME"`, a file name alone, written in the target's directory.
`check` runs `nginx -t` as `run_as`, never as root, in a scratch directory. The server runs in the foreground (`daemon off`)
as perflab's child, in its own session; see targets/webserver.py for the
start, the stop and the journal. When perflab is root, the workers run as
`target.run_as` (default nobody: `user nobody nogroup;`), never as root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from perflab.errors import UserError
from perflab.hostctl.shareddir import own_dir
from perflab.targets.base import TargetSettings
from perflab.targets.config_values import line_problem
from perflab.targets.serverhome import free_port
from perflab.targets.serverproc import server_env
from perflab.targets.webserver import (
    ManagedServerSettings,
    ManagedWebServer,
    server_user,
    setpriv,
    user_ids,
)

DirectiveValue = str | int | bool
DEFAULTS: dict[str, DirectiveValue] = {
    "worker_processes": 1,
    "sendfile": True,
    "tcp_nopush": True,
    "open_file_cache": "max=10000 inactive=60s",
    "keepalive_requests": 100000,
    "access_log": "off",
}
MAIN_CONTEXT = {"worker_processes", "worker_rlimit_nofile", "worker_cpu_affinity", "worker_priority",
                "timer_resolution", "pcre_jit", "thread_pool", "worker_shutdown_timeout"}
EVENTS_CONTEXT = {"worker_connections", "multi_accept", "use", "accept_mutex", "accept_mutex_delay"}
RESERVED = {"listen", "root", "alias", "pid", "error_log", "daemon", "master_process", "user", "include",
            "server", "location", "events", "http", "client_body_temp_path", "proxy_temp_path",
            "fastcgi_temp_path", "uwsgi_temp_path", "scgi_temp_path", "load_module"}
NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
# Directives that name a file or a directory: nginx's master (root, at a run)
# creates, opens or reads them, so none may come from the experiment; perflab
# places the server's own files (pid, logs, temporary paths) in the target's
# directory. The one exception is access_log: `off`, or a file name alone,
# which nginx opens in its prefix (-p: the target's directory).
PATH_DIRECTIVES = {"access_log", "error_log", "working_directory", "lock_file", "google_perftools_profiles",
                   "env"}
PATH_SUFFIXES = ("_path", "_file", "_store", "_directory", "_certificate", "_certificate_key", "_dhparam", "_crl",
                 "_modules", "_require", "_import", "_include", "_stylesheet", "_entities", "_profiles")
PATH_PREFIXES = ("geoip", "perl", "js_", "xslt", "xml_")
FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


def takes_path(name: str) -> bool:
    """Whether directive `name` names a file or a directory (or is TLS's,
    whose every file directive does)."""
    return (name in PATH_DIRECTIVES or "ssl" in name.split("_") or name.startswith(PATH_PREFIXES)
            or name.endswith(PATH_SUFFIXES))


def path_problem(name: str, value: DirectiveValue) -> str | None:
    """Why directive `name` = `value` may not be given (it names a path), or None."""
    if name == "access_log":
        first = _text(value).split()[0] if _text(value).split() else ""
        if first == "off" or FILE_NAME.match(first):
            return None
        return (f"got access_log = {value!r}: nginx opens its log as root; allowed: off, or a file name alone "
                "(no /), which nginx writes in the target's directory")
    if takes_path(name):
        return (f"got {name!r}: it names a file or a directory, and nginx's master (root) would make or read "
                "it; perflab places the server's files itself (pid, logs, temporary paths, in the target's "
                "directory); allowed: any directive that names no path (access_log: off or a file name)")
    return None


def _text(value: DirectiveValue) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


class NginxSettings(ManagedServerSettings):
    kind: Literal["nginx"]
    # The nginx binary; default: `nginx` on PATH (or /usr/sbin/nginx).
    binary: str | None = None
    # nginx directives, name = value: each goes in its context (main, events or http; perflab writes the whole file).
    settings: dict[str, DirectiveValue] = Field(default_factory=dict)

    @field_validator("settings")
    @classmethod
    def _directives(cls, value: dict[str, DirectiveValue]) -> dict[str, DirectiveValue]:
        for name, v in value.items():
            if not NAME.match(name):
                raise ValueError(f"got directive name {name!r}; allowed: nginx directive names (e.g. sendfile)")
            if name in RESERVED:
                raise ValueError(f"got {name!r}; perflab sets it (listen, root, logs, pid, paths); "
                                 "allowed: any other directive")
            if (problem := path_problem(name, v)) is not None:
                raise ValueError(problem)
            # one directive's arguments: a ; { } or # would end it, open a block or a comment,
            # and a line break or another control character has no place in it (config_values)
            broken = line_problem(_text(v))
            if broken or any(c in _text(v) for c in ";{}#"):
                raise ValueError(f"got {name} = {v!r}{': ' + broken if broken else ''}; allowed: one "
                                 "directive's arguments, without ; { } # or line breaks and control characters")
        return value

    def directives(self) -> dict[str, DirectiveValue]:
        return DEFAULTS | self.settings


def find_nginx(explicit: str | None) -> str:
    found = shutil.which(explicit or "nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if explicit and not found and Path(explicit).is_file() and os.access(explicit, os.X_OK):
        found = explicit
    if not found:
        raise UserError(
            f"nginx: {explicit or 'nginx'} is not on PATH",
            "install it (./dev setup does: apt-get install nginx), or set target.binary",
        )
    return found


def render_config(settings: NginxSettings, workdir: Path, port: int, root: Path, user: str | None = None,
                  tmp: Path | None = None) -> str:
    """nginx.conf: its pid file and logs in `workdir`, the document root
    `root`, the temporary paths under `tmp` (default workdir/tmp), and the
    workers' `user` (None: nginx's own user, perflab's when it is not root)."""
    main: list[str] = []
    events: list[str] = []
    http: list[str] = []
    for name, value in settings.directives().items():
        line = f"{name} {_text(value)};"
        (main if name in MAIN_CONTEXT else events if name in EVENTS_CONTEXT else http).append(line)
    user_line = f"user {user} {user_ids(user)[2]};\n" if user is not None else ""
    tmp = tmp if tmp is not None else workdir / "tmp"
    temps = "\n".join(f"    {k}_temp_path {tmp / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    indent = "\n    "
    return (
        "# Written by perflab from target.settings; do not edit.\n"
        "daemon off;\nmaster_process on;\n"
        f"{user_line}pid {workdir / 'nginx.pid'};\n"
        f"error_log {workdir / 'server.log'} warn;\n"
        + "".join(f"{line}\n" for line in main)
        + "events {" + "".join(indent + line for line in events) + "\n}\n"
        + "http {\n"
        f"{temps}\n"
        "    default_type application/octet-stream;"
        + "".join(indent + line for line in http)
        + "\n    server {\n"
        f"        listen 127.0.0.1:{port};\n"
        f"        root {root};\n"
        "    }\n}\n"
    )


class NginxTarget(ManagedWebServer[NginxSettings]):
    Settings: ClassVar[type[TargetSettings]] = NginxSettings
    server_name: ClassVar[str] = "nginx"
    whole_as_user: ClassVar[bool] = False  # the master starts its workers as `user`

    @property
    def conf_path(self) -> Path:
        return self.workdir / "nginx.conf"

    @classmethod
    def server_label(cls, binary: str | None = None) -> str | None:
        """"nginx 1.22.1": the server and its version, as tables name a level of target.kind."""
        from perflab.targets.packaged import version_label

        try:
            return version_label("nginx", find_nginx(binary))
        except UserError:
            return None

    @classmethod
    def preflight(cls, settings: NginxSettings, base_dir: Path) -> list[tuple[str, str]]:
        problems = super().preflight(settings, base_dir)
        try:
            binary = find_nginx(settings.binary)
        except UserError as exc:
            return [*problems, exc.as_problem("target.binary")]
        try:
            user = server_user(settings)
        except UserError:
            return problems  # said by the base's preflight (target.run_as)
        # nginx -t on the configuration these settings make, in a scratch directory, as the
        # workers' user (never root: what it opens or makes is that user's, and only where it may)
        with tempfile.TemporaryDirectory(prefix="perflab-nginx-check-") as scratch:
            work = Path(scratch)
            (work / "tmp").mkdir()
            conf = work / "nginx.conf"
            # as that user, a `user` line is nginx's to ignore (and warn of); a port it may bind
            conf.write_text(render_config(settings, work, free_port(), work))
            argv = [binary, "-t", "-q", "-p", str(work), "-c", str(conf), "-e", str(work / "e.log")]
            if user is not None:
                uid, gid, _ = user_ids(user)
                for made in (work, work / "tmp"):
                    os.chown(made, uid, gid)
                try:
                    argv = [setpriv(), f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]
                except UserError:
                    return problems  # said by the base's preflight (target.run_as)
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, cwd=work,
                                  env=server_env())
            if proc.returncode != 0:
                words = (proc.stderr or proc.stdout).strip().replace(str(conf), "nginx.conf")
                problems.append(("target.settings", f"nginx refuses the configuration: {words[-400:]}"))
        return problems

    def write_config(self, port: int, root: Path) -> None:
        # The workers write request bodies there: in the home their user reaches.
        tmp = own_dir(self.home / "tmp", 0o755)  # made, or perflab's own from an earlier start: never followed
        self.conf_path.write_text(render_config(self.settings, self.workdir, port, root, self.run_as, tmp))

    def command(self, port: int, root: Path) -> list[str]:
        binary = find_nginx(self.settings.binary)
        return [binary, "-p", str(self.workdir), "-c", str(self.conf_path), "-e", str(self.log_path)]

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["settings"] = {k: _text(v) for k, v in self.settings.directives().items()}
        try:
            binary = find_nginx(self.settings.binary)
            out = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10, check=False)
            info["version"] = (out.stderr or out.stdout).strip()
        except (UserError, OSError, subprocess.SubprocessError):
            pass
        return info
