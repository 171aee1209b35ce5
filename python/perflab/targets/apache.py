"""The `apache` target: Apache httpd 2.4 from Debian's package (apache2),
managed by perflab, with its multi-processing module as a setting: `prefork`
(a process per connection, the Flash study's Apache), `worker` (threads in
a few processes) or `event` (threads, idle keep-alive connections left to a
listener thread).

perflab writes the whole configuration (none of Debian's /etc/apache2:
the modules it needs are loaded from /usr/lib/apache2/modules) into the
server's runtime directory, with the pid file, the locks and the runtime
files there, the error log on standard error (the target's server.log), no
access log; the server listens on 127.0.0.1 on a free port and serves the
file set. It runs in the foreground (-DFOREGROUND) as `run_as`, every
process of it: it is never started as root, so it never changes user.
`check` runs `apache2 -t` on the configuration as that user.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from perflab.targets.base import TargetSettings
from perflab.targets.packaged import (
    PackagedServerSettings,
    PackagedWebServer,
    ServerOptions,
    on_off,
    quoted,
)

MODULES = "/usr/lib/apache2/modules"
MIME_TYPES = Path("/etc/mime.types")


class ApacheOptions(ServerOptions):
    # The multi-processing module: prefork (a process per connection), worker or event (threads).
    mpm: Literal["prefork", "worker", "event"] = "event"
    # EnableSendfile: the kernel sends a file's bytes (else read and write).
    sendfile: bool = True
    # EnableMMAP: a file mapped into memory to be sent, where sendfile is off.
    mmap: bool = True
    # KeepAlive: more than one request per connection.
    keepalive: bool = True

    # MaxKeepAliveRequests: requests per connection (0: unlimited).
    keepalive_requests: int = Field(default=100000, ge=0)

    # KeepAliveTimeout (s): how long an idle connection is kept.
    keepalive_timeout: int = Field(default=5, ge=1, le=3600)

    # Timeout (s): how long a request may wait for the network.
    timeout: int = Field(default=60, ge=1, le=3600)

    # StartServers: processes at the start; unset: Apache's default.
    start_servers: int | None = Field(default=None, ge=1)

    # MaxRequestWorkers: connections served at once; unset: Apache's default.
    max_request_workers: int | None = Field(default=None, ge=1)

    # ServerLimit: the most processes; unset: Apache's default.
    server_limit: int | None = Field(default=None, ge=1)

    # ThreadsPerChild (worker and event only); unset: Apache's default.
    threads_per_child: int | None = Field(default=None, ge=1)

    # ListenBacklog: the listening socket's queue; unset: Apache's default.
    listen_backlog: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _threads(self) -> ApacheOptions:
        if self.mpm == "prefork" and self.threads_per_child is not None:
            raise ValueError(f"got threads_per_child = {self.threads_per_child} with mpm = \"prefork\", whose "
                             "processes have one thread each; allowed: threads_per_child with mpm = \"worker\" "
                             "or \"event\"")
        return self


class ApacheSettings(PackagedServerSettings):
    kind: Literal["apache"]
    # Apache's own settings, written into its configuration by perflab (an unknown name is refused).
    settings: ApacheOptions = Field(default_factory=ApacheOptions)


def render_config(options: ApacheOptions, port: int, root: Path, run: Path) -> str:
    """apache2.conf: its own, every path in `run` but the document root."""
    limits = {"StartServers": options.start_servers, "MaxRequestWorkers": options.max_request_workers,
              "ServerLimit": options.server_limit, "ThreadsPerChild": options.threads_per_child,
              "ListenBacklog": options.listen_backlog}
    modules = [f"mpm_{options.mpm}", "authz_core", "mime"]
    return (
        "# Written by perflab from target.settings; do not edit.\n"
        f"ServerRoot {quoted(run)}\n"
        f"DefaultRuntimeDir {quoted(run)}\n"
        f"PidFile {quoted(run / 'apache2.pid')}\n"
        f"Mutex file:{run} default\n"
        "ErrorLog \"||/bin/cat\"\n"  # a logger whose standard output is the target's server.log
        "LogLevel warn\n"
        + "".join(f"LoadModule {m}_module {MODULES}/mod_{m}.so\n" for m in modules)
        + f"Listen 127.0.0.1:{port}\n"
        "ServerName 127.0.0.1\n"
        f"TypesConfig {quoted(MIME_TYPES if MIME_TYPES.is_file() else '/dev/null')}\n"
        f"DocumentRoot {quoted(root)}\n"
        "<Directory />\n    Options FollowSymLinks\n    AllowOverride None\n    Require all granted\n</Directory>\n"
        f"EnableSendfile {on_off(options.sendfile)}\n"
        f"EnableMMAP {on_off(options.mmap)}\n"
        f"KeepAlive {on_off(options.keepalive)}\n"
        f"MaxKeepAliveRequests {options.keepalive_requests}\n"
        f"KeepAliveTimeout {options.keepalive_timeout}\n"
        f"Timeout {options.timeout}\n"
        + "".join(f"{name} {value}\n" for name, value in limits.items() if value is not None)
    )


class ApacheTarget(PackagedWebServer[ApacheSettings]):
    Settings: ClassVar[type[TargetSettings]] = ApacheSettings
    server_name: ClassVar[str] = "apache"
    binary_name: ClassVar[str] = "apache2"
    package: ClassVar[str] = "apache2"
    display_name: ClassVar[str] = "Apache"
    config_name: ClassVar[str] = "apache2.conf"
    label_settings: ClassVar[dict[str, str]] = {"mpm": "{}"}  # "Apache 2.4.71 prefork"

    @classmethod
    def render(cls, settings: ApacheSettings, port: int, root: Path, run: Path) -> str:
        return render_config(settings.settings, port, root, run)

    @classmethod
    def foreground(cls, binary: str, conf: Path) -> list[str]:
        return [binary, "-f", str(conf), "-DFOREGROUND"]

    @classmethod
    def config_test(cls, binary: str, conf: Path) -> list[str]:
        return [binary, "-t", "-f", str(conf)]
