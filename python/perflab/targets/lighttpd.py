"""The `lighttpd` target: lighttpd 1.4 from Debian's package, managed by
perflab: one process, one event loop (epoll), every connection in it.

perflab writes its whole configuration (none of Debian's /etc/lighttpd)
into the server's runtime directory: 127.0.0.1 on a free port, the file set
as document root, no module, no access log, the error log on standard error
(the target's server.log). It runs in the foreground (-D) as `run_as`: never
started as root, it never changes user. `check` runs `lighttpd -tt` on the
configuration as that user.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from perflab.targets.base import TargetSettings
from perflab.targets.packaged import (
    PackagedServerSettings,
    PackagedWebServer,
    ServerOptions,
    quoted,
)


class LighttpdOptions(ServerOptions):
    # server.network-backend: sendfile (the kernel sends a file's bytes) or writev (read, then write).
    sendfile: bool = True
    # server.max-keep-alive-requests: requests per connection (0: no keep-alive).
    keepalive_requests: int = Field(default=65535, ge=0, le=65535)

    # server.max-keep-alive-idle (s): how long an idle connection is kept.
    keepalive_idle: int = Field(default=5, ge=0, le=65535)

    # server.max-connections; unset: lighttpd's default.
    max_connections: int | None = Field(default=None, ge=1, le=65535)

    # server.max-fds: the file descriptors it may open; unset: lighttpd's default.
    max_fds: int | None = Field(default=None, ge=1, le=1048576)
    # server.event-handler: linux-sysepoll (epoll) or poll.
    event_handler: Literal["linux-sysepoll", "poll"] = "linux-sysepoll"
    # server.stat-cache-engine: how file metadata is cached.
    stat_cache: Literal["simple", "disable", "inotify"] = "simple"


class LighttpdSettings(PackagedServerSettings):
    kind: Literal["lighttpd"]
    # lighttpd's own settings, written into its configuration by perflab (an unknown name is refused).
    settings: LighttpdOptions = Field(default_factory=LighttpdOptions)


def render_config(options: LighttpdOptions, port: int, root: Path, run: Path) -> str:
    """lighttpd.conf: its own, every path in `run` but the document root."""
    limits = {"server.max-connections": options.max_connections, "server.max-fds": options.max_fds}
    return (
        "# Written by perflab from target.settings; do not edit.\n"
        "server.modules = ()\n"
        f"server.document-root = {quoted(root)}\n"
        'server.bind = "127.0.0.1"\n'
        f"server.port = {port}\n"
        f"server.upload-dirs = ( {quoted(run)} )\n"
        f'server.network-backend = "{"sendfile" if options.sendfile else "writev"}"\n'
        f'server.event-handler = "{options.event_handler}"\n'
        f'server.stat-cache-engine = "{options.stat_cache}"\n'
        f"server.max-keep-alive-requests = {options.keepalive_requests}\n"
        f"server.max-keep-alive-idle = {options.keepalive_idle}\n"
        'server.follow-symlink = "enable"\n'
        + "".join(f"{name} = {value}\n" for name, value in limits.items() if value is not None)
    )


class LighttpdTarget(PackagedWebServer[LighttpdSettings]):
    Settings: ClassVar[type[TargetSettings]] = LighttpdSettings
    server_name: ClassVar[str] = "lighttpd"
    binary_name: ClassVar[str] = "lighttpd"
    package: ClassVar[str] = "lighttpd"
    display_name: ClassVar[str] = "lighttpd"
    config_name: ClassVar[str] = "lighttpd.conf"

    @classmethod
    def render(cls, settings: LighttpdSettings, port: int, root: Path, run: Path) -> str:
        return render_config(settings.settings, port, root, run)

    @classmethod
    def foreground(cls, binary: str, conf: Path) -> list[str]:
        return [binary, "-D", "-f", str(conf)]

    @classmethod
    def config_test(cls, binary: str, conf: Path) -> list[str]:
        return [binary, "-tt", "-f", str(conf)]
