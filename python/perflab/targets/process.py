"""The `process` target: any web server perflab starts from a command line
(lighttpd, apache2, the user's own), with `{port}` and `{root}` in it. perflab
picks a free port on 127.0.0.1, points `{root}` at the file set, starts the
command in its own session with the server token in its environment, waits
until `ready_path` answers, and stops every process the command started
(targets/webserver.py). The server must listen on 127.0.0.1:{port} only.
When perflab is root, the whole command runs as `target.run_as` (default
nobody; through setpriv), so the files and paths it names must be that
user's to read or write: perflab starts no server as root.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from perflab.targets.base import TargetSettings
from perflab.targets.webserver import ManagedServerSettings, ManagedWebServer


class ProcessSettings(ManagedServerSettings):
    kind: Literal["process"]
    # The command line, with {port} and {root}; split as a shell would, not run by one.
    command: str = Field(min_length=1)
    # Where the server answers once it is ready (any HTTP status counts).
    ready_path: str = Field(default="/", pattern=r"^/")

    @field_validator("command")
    @classmethod
    def _placeholders(cls, value: str) -> str:
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"got {value!r}: {exc}; allowed: a command line") from None
        if not words:
            raise ValueError("got an empty command; allowed: a command line with {port}")
        if "{port}" not in value:
            raise ValueError(f"got {value!r}; allowed: a command line with {{port}} (and {{root}}), "
                             "so the server listens where perflab says")
        try:
            value.format(port=1, root="/")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"got {value!r}: placeholder {exc}; allowed: {{port}} and {{root}} "
                             "(write {{ and }} for braces)") from None
        return value


class ProcessTarget(ManagedWebServer[ProcessSettings]):
    Settings: ClassVar[type[TargetSettings]] = ProcessSettings
    server_name: ClassVar[str] = "server"

    @property
    def ready_path(self) -> str:  # type: ignore[override]
        return self.settings.ready_path

    def command(self, port: int, root: Path) -> list[str]:
        return [w.format(port=port, root=root) for w in shlex.split(self.settings.command)]

    def describe(self) -> dict[str, Any]:
        return super().describe() | {"command": self.settings.command}
