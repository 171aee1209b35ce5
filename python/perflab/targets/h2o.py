"""The `h2o` target: h2o 2.2 from Debian's package, managed by perflab:
`num_threads` threads, each its own event loop, accepting on one socket.

perflab writes its whole YAML configuration (none of Debian's /etc/h2o)
into the server's runtime directory: 127.0.0.1 on a free port, the file set
as the one path's directory, no access log, the error log on standard error
(the target's server.log), the pid file in the runtime directory. It runs in
the foreground as `run_as`: never started as root, it has no `user` to
change to. `check` runs `h2o -t` on the configuration as that user. Every
value is a number or a literal: nothing of the experiment's is YAML text.
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
    on_off,
    quoted,
)


class H2oOptions(ServerOptions):
    # num-threads: the event loops (threads); unset: one per CPU, h2o's default.
    num_threads: int | None = Field(default=None, ge=1, le=1024)
    # max-connections; unset: h2o's default (1024).
    max_connections: int | None = Field(default=None, ge=1)
    # http1-request-timeout (s): how long an idle keep-alive connection is kept.
    request_timeout: int = Field(default=10, ge=1, le=3600)
    # file.send-gzip: serve a file's .gz beside it to a client that accepts gzip.
    send_gzip: bool = False
    # file.etag: ETag headers on file responses.
    etag: bool = True


class H2oSettings(PackagedServerSettings):
    kind: Literal["h2o"]
    # h2o's own settings, written into its configuration by perflab (an unknown name is refused).
    settings: H2oOptions = Field(default_factory=H2oOptions)


def render_config(options: H2oOptions, port: int, root: Path, run: Path) -> str:
    """h2o.conf (YAML): its own, every path in `run` but the document root."""
    limits = {"num-threads": options.num_threads, "max-connections": options.max_connections}
    return (
        "# Written by perflab from target.settings; do not edit.\n"
        f"pid-file: {quoted(run / 'h2o.pid')}\n"
        f"http1-request-timeout: {options.request_timeout}\n"
        + "".join(f"{name}: {value}\n" for name, value in limits.items() if value is not None)
        + "listen:\n"
        "  host: 127.0.0.1\n"
        f"  port: {port}\n"
        "hosts:\n"
        f'  "127.0.0.1:{port}":\n'
        "    paths:\n"
        "      /:\n"
        f"        file.dir: {quoted(root)}\n"
        f"        file.send-gzip: {on_off(options.send_gzip).upper()}\n"
        f"        file.etag: {on_off(options.etag).upper()}\n"
        "        file.dirlisting: OFF\n"
    )


class H2oTarget(PackagedWebServer[H2oSettings]):
    Settings: ClassVar[type[TargetSettings]] = H2oSettings
    server_name: ClassVar[str] = "h2o"
    binary_name: ClassVar[str] = "h2o"
    package: ClassVar[str] = "h2o"
    display_name: ClassVar[str] = "h2o"
    config_name: ClassVar[str] = "h2o.conf"
    label_settings: ClassVar[dict[str, str]] = {"num_threads": "{} threads"}  # "h2o 2.2.5 2 threads"

    @classmethod
    def setting_label(cls, name: str, value: object) -> str | None:
        return "1 thread" if name == "num_threads" and value == 1 else super().setting_label(name, value)

    @classmethod
    def render(cls, settings: H2oSettings, port: int, root: Path, run: Path) -> str:
        return render_config(settings.settings, port, root, run)

    @classmethod
    def foreground(cls, binary: str, conf: Path) -> list[str]:
        return [binary, "-m", "master", "-c", str(conf)]

    @classmethod
    def config_test(cls, binary: str, conf: Path) -> list[str]:
        return [binary, "-t", "-c", str(conf)]
