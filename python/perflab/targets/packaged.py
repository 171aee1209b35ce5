"""What the web servers from a distribution's package share (apache,
lighttpd, h2o; nginx names its version the same way): the binary, found on
PATH or given as `target.binary`, refused at `check` with the package to
install; the server's version for tables ("Apache 2.4.71"); a configuration
file written whole from `target.settings` (a settings model of the server's
own: an unknown name is refused with the allowed list, and every value is a
number, a boolean or one of a list, so no text of the experiment's reaches
the file; the paths perflab chose are quoted, and refused with the fix where
a quote, a backslash or a line break would end the value, config_values); the
server's own test of that file at `check`, run as `run_as` in a scratch
directory; and a runtime directory its user may write (pid file, locks,
sockets) in the server's home, made afresh at each start.

The whole command runs as `run_as` (ManagedWebServer.whole_as_user): no
process of these servers is ever root, and none of them is told to change
user. The server runs in the foreground as perflab's child, its log on its
standard error (the target's server.log); see targets/webserver.py for the
start, the stop, the cgroup and the journal the guardian undoes.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from perflab.errors import UserError
from perflab.settings_model import OsText, StrictModel
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

RUN_DIR = "run"  # in the server's home: its user's, made afresh at each start
SBIN = "/usr/sbin:/usr/local/sbin:/usr/bin"
_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)*)")


class PackagedServerSettings(ManagedServerSettings):
    # The server's binary; default: found on PATH (or /usr/sbin).
    binary: OsText | None = None


class ServerOptions(StrictModel):
    """A server's own settings (`target.settings`): unknown names are refused
    with the allowed list; values typed (numbers, booleans, literals)."""

    def texts(self) -> dict[str, Any]:
        """The settings given, by name, with the server's defaults (None: unset)."""
        return self.model_dump()


def quoted(path: Path | str) -> str:
    """A path perflab chose, in double quotes (every format here reads them)."""
    text = str(path)
    if line_problem(text) or '"' in text or "\\" in text:
        raise UserError(f"perflab cannot write the path {text!r} into a server's configuration",
                        "use an output directory whose path has no quotes, backslashes or control characters")
    return f'"{text}"'


def on_off(value: bool) -> str:
    return "On" if value else "Off"


PackagedSettingsT = TypeVar("PackagedSettingsT", bound=PackagedServerSettings)


@functools.cache
def _version(binary: str, args: tuple[str, ...]) -> str | None:
    try:
        out = subprocess.run([binary, *args], capture_output=True, text=True, timeout=10, check=False,
                             env=server_env())
    except (OSError, subprocess.SubprocessError):
        return None
    found = _VERSION.search(out.stdout + out.stderr)
    return found.group(1) if found else None


def version_label(display: str, binary: str | None, args: tuple[str, ...] = ("-v",)) -> str | None:
    """"Apache 2.4.71": the server's name and the version its binary reports,
    or None where there is no such binary."""
    if binary is None:
        return None
    version = _version(binary, args)
    return f"{display} {version}" if version else None


class PackagedWebServer(ManagedWebServer[PackagedSettingsT]):
    """A web server from a package: a subclass names its binary, its package,
    and writes its configuration (`render`) and command line (`foreground`)."""

    binary_name: ClassVar[str] = ""
    package: ClassVar[str] = ""
    display_name: ClassVar[str] = ""
    config_name: ClassVar[str] = "server.conf"
    version_args: ClassVar[tuple[str, ...]] = ("-v",)
    # The settings that are the server's architecture, shown in its level's
    # label by value ("Apache 2.4.71 prefork", "h2o 2.2.5 2 threads"), not as
    # key=value: setting name -> the label's text, "{}" the value.
    label_settings: ClassVar[dict[str, str]] = {}

    # ---------------------------------------------------------- subclass

    @classmethod
    def render(cls, settings: PackagedSettingsT, port: int, root: Path, run: Path) -> str:
        raise NotImplementedError

    @classmethod
    def foreground(cls, binary: str, conf: Path) -> list[str]:
        """The command line that runs the server in the foreground on `conf`."""
        raise NotImplementedError

    @classmethod
    def config_test(cls, binary: str, conf: Path) -> list[str]:
        """The command line with which the server tests `conf` and exits."""
        raise NotImplementedError

    # ---------------------------------------------------------- binary and version

    @classmethod
    def find_binary(cls, explicit: str | None) -> str:
        found = shutil.which(explicit or cls.binary_name) or (
            None if explicit else shutil.which(cls.binary_name, path=SBIN))
        if not found:
            where = "is not an executable file" if explicit and "/" in explicit else "is not on PATH"
            raise UserError(f"{cls.server_name}: {explicit or cls.binary_name} {where}",
                            f"install it (./dev setup does: apt-get install {cls.package}), or set target.binary")
        return found

    @classmethod
    def server_label(cls, binary: str | None = None) -> str | None:
        """The server and its version, as tables name it ("Apache 2.4.71")."""
        try:
            return version_label(cls.display_name, cls.find_binary(binary), cls.version_args)
        except UserError:
            return None

    @classmethod
    def setting_label(cls, name: str, value: object) -> str | None:
        """A setting's value as the server's level label says it, where the
        class declares it (label_settings); else None (key=value)."""
        text = cls.label_settings.get(name)
        if text is None or isinstance(value, (dict, list, bool)) or value is None:
            return None
        return text.format(value)

    # ---------------------------------------------------------- check

    @classmethod
    def preflight(cls, settings: PackagedSettingsT, base_dir: Path) -> list[tuple[str, str]]:  # type: ignore[override]
        problems = super().preflight(settings, base_dir)
        try:
            binary = cls.find_binary(settings.binary)
        except UserError as exc:
            return [*problems, exc.as_problem("target.binary")]
        try:
            user = server_user(settings)
            argv_user = [setpriv(), *_as_user(user)] if user is not None else []
        except UserError:
            return problems  # said by the base's preflight (target.run_as)
        # The server's own test of the configuration these settings make, as
        # its user (never root), in a scratch directory that user owns.
        with tempfile.TemporaryDirectory(prefix=f"perflab-{cls.server_name}-check-") as scratch:
            work = Path(scratch)
            run = work / RUN_DIR
            run.mkdir()
            conf = run / cls.config_name
            conf.write_text(cls.render(settings, free_port(), work, run))
            if user is not None:
                uid, gid, _ = user_ids(user)
                for made in (work, run, conf):
                    os.chown(made, uid, gid)
            proc = subprocess.run([*argv_user, *cls.config_test(binary, conf)], capture_output=True, text=True,
                                  timeout=30, check=False, cwd=work, env=server_env())
            if proc.returncode != 0:
                words = (proc.stderr + proc.stdout).strip().replace(str(conf), cls.config_name)
                problems.append(("target.settings",
                                 f"{cls.server_name} refuses the configuration: {words[-400:]}"))
        return problems

    # ---------------------------------------------------------- start

    @property
    def run_dir(self) -> Path:
        return self.home / RUN_DIR

    @property
    def conf_path(self) -> Path:
        return self.run_dir / self.config_name

    def write_config(self, port: int, root: Path) -> None:
        # Made afresh at each start, in a home only perflab writes (nothing
        # in it is followed: rmtree does not follow links), then the user's.
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir.mkdir(mode=0o755)
        self.conf_path.write_text(self.render(self.settings, port, root, self.run_dir))
        if self.run_as is not None:
            uid, gid, _ = user_ids(self.run_as)
            os.chown(self.run_dir, uid, gid)

    def command(self, port: int, root: Path) -> list[str]:
        return self.foreground(self.find_binary(self.settings.binary), self.conf_path)

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        options = getattr(self.settings, "settings", None)
        if isinstance(options, ServerOptions):
            info["settings"] = {k: v for k, v in options.texts().items() if v is not None}
        label = self.server_label(self.settings.binary)
        if label is not None:
            info["version"] = label
        return info


def _as_user(user: str) -> list[str]:
    uid, gid, _ = user_ids(user)
    return [f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
