"""A MariaDB server perflab starts (mariadb-install-db, mariadbd with its
own option file), owns and stops: its data, redo and undo directories or
scratch filesystems, its cgroup, its OS user."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

from perflab.endpoints import Endpoint
from perflab.errors import RunFailure, SpecError, UserError
from perflab.guardian import journal, start_time
from perflab.hostctl.cgroups import ServerCgroup, cgroup_to_start_in, oom_cause, resource_problems
from perflab.hostctl.netfs import NetFs
from perflab.hostctl.scratchfs import ScratchFs
from perflab.hostctl.shareddir import write_file
from perflab.model import not_setup
from perflab.targets.base import (
    CheckedWorkload,
    FileClass,
    Target,
    TargetSettings,
    creatable_problems,
)
from perflab.targets.mariadb.binaries import INSTALL_BIN, find_binaries, server_version
from perflab.targets.mariadb.endpoint import MysqlEndpoint, describe_server
from perflab.targets.mariadb.setting_check import setting_problems
from perflab.targets.mariadb.settings import (
    ROLES,
    MariadbSettings,
    SettingValue,
    option_key,
    option_line,
)
from perflab.targets.postgres.homes import (
    claim_home,
    cluster_home,
    created_mark,
    foreign_home,
    home_digest,
    recorded_dirs,
    sweep_orphan_homes,
)
from perflab.targets.serverhome import (
    free_port,
    reachable_by,
    resolve_run_as,
    scratch_filesystems,
    scratch_problems,
)
from perflab.targets.serverlog import LoggedServer, ServerLog
from perflab.targets.serverproc import server_env, server_processes, stop_server_processes
from perflab.targets.webserver import setpriv, user_ids

USER = "perflab"
DEFAULT_RUN_AS = "mysql"
CREATED_MARK = "perflab-created"
MADE = "installed: complete"  # the mark's last line once mariadb-install-db has succeeded
OPTION_FILE = "perflab-mariadb.cnf"
INIT_FILE = "perflab-init.sql"  # in the 0700 socket directory, read by mariadbd as it starts


def storage_problems(key: str, path: Path, made_by_us: bool) -> list[tuple[str, str]]:
    """What stops perflab from making its data (or redo, undo) directory at `path`."""
    if made_by_us:
        return []
    if path.exists() and not path.is_dir():
        return [(key, f"{path} is not a directory; allowed: an empty or new directory")]
    if path.is_dir() and any(path.iterdir()):
        return [(key, f"{path} is not empty and is not a perflab MariaDB data directory; nothing was changed; "
                 "allowed: an empty or new directory")]
    return creatable_problems(key, path)


def access_sql(user: str, password: str) -> str:
    """What mariadbd runs as it starts, before it takes a connection
    (--init-file): mariadb-install-db's root accounts for TCP (127.0.0.1, ::1,
    this host's name: no password) and any anonymous one go, so root comes
    in on the 0700 socket only; perflab's `user` gets `password` (as its
    mysql_native_password hash, which the engine's client speaks: no
    password in any file or log) on the socket and on 127.0.0.1."""
    digest = "*" + hashlib.sha1(hashlib.sha1(password.encode()).digest()).hexdigest().upper()
    name = socket.gethostname()
    hosts = ["127.0.0.1", "::1", "%"] + ([name] if name.isprintable() and not {"'", "\\"} & set(name) else [])
    accounts = ", ".join(f"'{who}'@'{host}'" for who in ("root", "") for host in hosts)
    lines = [f"DROP USER IF EXISTS {accounts};", "DROP USER IF EXISTS ''@'localhost';"]
    for host in ("localhost", "127.0.0.1"):
        lines += [f"CREATE USER IF NOT EXISTS '{user}'@'{host}';",
                  f"ALTER USER '{user}'@'{host}' IDENTIFIED BY PASSWORD '{digest}';",
                  f"GRANT ALL PRIVILEGES ON *.* TO '{user}'@'{host}' WITH GRANT OPTION;"]
    return "\n".join(lines) + "\n"


def _chown(path: Path, user: str | None) -> None:
    """Give `path` to `user`: the path itself, never a symlink's target."""
    if user is not None:
        uid, gid, _ = user_ids(user)
        os.chown(path, uid, gid, follow_symlinks=False)


def current_run_as(settings: MariadbSettings) -> str | None:
    """None (this user) unless perflab is root; then run_as, default `mysql`
    (or `nobody` where there is no such user). Never root."""
    if os.geteuid() != 0 or settings.run_as:
        return resolve_run_as(settings.run_as)
    try:
        user_ids(DEFAULT_RUN_AS)
    except KeyError:
        return resolve_run_as(None)
    return resolve_run_as(DEFAULT_RUN_AS)



class MariadbTarget(LoggedServer, Target[MariadbSettings, MysqlEndpoint]):
    Settings: ClassVar[type[TargetSettings]] = MariadbSettings
    endpoint_type: ClassVar[type[Endpoint]] = MysqlEndpoint

    settings: MariadbSettings

    def __init__(self, settings: MariadbSettings, workdir: Path, base_dir: Path | None = None) -> None:
        super().__init__(settings, workdir, base_dir)
        self.run_as: str | None = None
        self.server: Path | None = None
        self.install: Path | None = None
        self.data_dir: Path | None = None
        self.socket_dir: Path | None = None
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.token: str | None = None
        self.endpoint: MysqlEndpoint | None = None
        self.started_settings: dict[str, SettingValue] | None = None
        self.cgroup: ServerCgroup | None = None
        self.mounted: dict[str, ScratchFs] = {}
        self.notes: list[str] = []
        self.server_log = ServerLog(workdir / "server.log")
        # perflab's user's password (access_sql): new for each target, set at every start
        self.password = secrets.token_urlsafe(32)

    # -------------------------------------------------------------- validation

    @classmethod
    def identity(cls, settings: MariadbSettings) -> str:
        keep = settings.model_dump(exclude={"settings", "restart", "start_timeout", "keep_data", "resources"})
        return json.dumps(keep, sort_keys=True)

    @classmethod
    def validate_for_workload(cls, settings: MariadbSettings, workload: CheckedWorkload) -> list[tuple[str, str]]:
        return setting_problems(settings)

    @classmethod
    def preflight(cls, settings: MariadbSettings, base_dir: Path) -> list[tuple[str, str]]:
        try:
            current_run_as(settings)
        except UserError as exc:
            return [exc.as_problem("target.run_as")]
        problems = []
        try:
            find_binaries(settings.bin_dir)
        except UserError as exc:
            problems.append(exc.as_problem("target.bin_dir"))
        if settings.resources is not None:
            problems += resource_problems(settings.resources)
        problems += scratch_problems(settings.storage, base_dir)
        for role in ROLES:
            given = getattr(settings.storage, f"{role}_dir")
            if given:
                path = (base_dir / Path(given).expanduser()).resolve()
                ours = created_mark(path) is not None if role == "data" else False
                if role != "data":
                    data = settings.storage.data_dir
                    ours = bool(data and created_mark((base_dir / Path(data).expanduser()).resolve()) is not None)
                problems += storage_problems(f"target.storage.{role}_dir", path, ours)
        return problems

    @classmethod
    def for_distributed_driver(cls, settings: MariadbSettings) -> tuple[MariadbSettings, list[tuple[str, str]], str | None]:
        if settings.listen == "tcp":
            return settings, [], None
        return settings.model_copy(update={"listen": "tcp"}), [], (
            "target.listen: the managed server listens on TCP (127.0.0.1, a free port) because "
            "driver.kind = \"ray\": its workers connect over TCP")

    # -------------------------------------------------------------- places

    def _home(self) -> Path:
        """The target's directory, unless the server's user cannot reach it:
        then a directory under /tmp, marked with the output directory and
        removed once that is gone (as PostgreSQL's: postgres.homes.cluster_home)."""
        home = cluster_home(self.workdir, self.run_as)
        if home == self.workdir:
            return home
        note = (f"the output directory is not reachable by user {self.run_as}; the data directory is under {home}, "
                "kept for the next run here and removed once the output directory is gone")
        if note not in self.notes:
            self.notes.append(note)
        return home

    def _dir(self, role: str) -> Path | None:
        given = getattr(self.settings.storage, f"{role}_dir")
        if given:
            return self.path_from_file(given)
        if getattr(self.settings.storage, f"{role}_fs") is not None:
            return self._home() / f"perflab-{role}-fs" / role
        return self._home() / "mariadb-data" if role == "data" else None

    def _scratch(self) -> dict[str, ScratchFs]:
        return scratch_filesystems(self.settings.storage, self._home, self.workdir, home_digest(self.workdir),
                                   self.path_from_file, tag="my", run_as=self.run_as)  # sshfs serves as run_as

    def _mount_scratch(self) -> None:
        fresh = False
        for role, fs in self._scratch().items():
            fs.mountpoint.mkdir(parents=True, exist_ok=True)
            fresh = fs.mount() or fresh
            self.mounted[role] = fs
            os.chmod(fs.mountpoint, 0o755)
        data = self._dir("data")
        # a new (or emptied tmpfs) filesystem under one part of a kept server: the
        # other parts are of no use alone; all are perflab's, so it starts again
        if fresh and data is not None and created_mark(data) is not None:
            self._remove_made_dirs()

    def _unmount_scratch(self) -> None:
        for role in list(self.mounted)[::-1]:
            self.mounted.pop(role).unmount()

    # -------------------------------------------------------------- provision

    def provision(self) -> MysqlEndpoint:
        self.run_as = current_run_as(self.settings)
        self.server, self.install = find_binaries(self.settings.bin_dir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        home = self._home()
        for removed, owner in sweep_orphan_homes(mine_too=True):
            self.notes.append(f"removed {removed}: the kept data of output directory {owner}, which is gone")
        if home != self.workdir:
            claim_home(home, self.workdir.resolve())  # made, or taken again only when perflab's own
        self._mount_scratch()
        fresh = self._init_datadir()
        self._start()
        self._ensure_database()
        self.endpoint = self._endpoint(fresh)
        return self.endpoint

    def _option_file(self) -> Path:
        return self._home() / OPTION_FILE

    def _write_options(self, settings: dict[str, SettingValue]) -> None:
        data = self._dir("data")
        assert data is not None
        if self.socket_dir is None:
            self.socket_dir = Path(tempfile.mkdtemp(prefix="perflab-my-"))
            journal().add("remove-dir", f"socket-dir:{self.socket_dir}", path=str(self.socket_dir))
            os.chmod(self.socket_dir, 0o700)
            _chown(self.socket_dir, self.run_as)
        if self.settings.listen == "tcp" and self.port is None:
            self.port = free_port()
        lines = ["# written by perflab for each start; mariadbd reads no other option file", "[mysqld]",
                 f"datadir = {data}", f"socket = {self.socket_dir / 'mysqld.sock'}",
                 f"pid-file = {self.socket_dir / 'mariadbd.pid'}", f"log-error = {self._log_file()}"]
        if self.settings.listen == "tcp":
            lines += [f"port = {self.port}", "bind-address = 127.0.0.1"]
        else:
            lines += ["skip-networking"]
        # LOAD DATA LOCAL INFILE: how the tpch and ssb loads stream their rows in (a setting may turn it off)
        lines += ["skip-name-resolve", "local-infile = ON"]
        redo, undo = self._dir("redo"), self._dir("undo")
        if redo is not None:
            lines.append(f"innodb-log-group-home-dir = {redo}")
        if undo is not None:
            lines.append(f"innodb-undo-directory = {undo}")
            if not any(option_key(n) == "innodb-undo-tablespaces" for n in settings):
                lines.append("innodb-undo-tablespaces = 3")  # the undo logs live outside the system tablespace
        # each a line of its own, read back as given (settings.option_line)
        lines += [option_line(name, value) for name, value in settings.items()]
        path = self._option_file()
        path.write_text("\n".join(lines) + "\n")
        _chown(path, self.run_as)

    def _log_file(self) -> Path:
        """The server's log: in the target's directory, else (the server's user
        cannot reach that) beside the data."""
        if reachable_by(self.workdir, self.run_as):
            return self.workdir / "server.log"
        return self._home() / "server.log"

    def _as_user(self, argv: list[str]) -> list[str]:
        if self.run_as is None:
            return argv
        uid, gid, _ = user_ids(self.run_as)
        return [setpriv(), f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]

    def _made_dirs(self) -> list[Path]:
        return [d for d in (self._dir(r) for r in ROLES) if d is not None]

    @staticmethod
    def _recorded_dirs(data: Path) -> list[Path]:
        """The redo and undo directories perflab made for the server in `data`,
        as its mark recorded them when it made them (never the stored
        experiment's redo_dir and undo_dir, which anyone may edit)."""
        mark = created_mark(data)
        return [d for role in ("redo", "undo") for d in recorded_dirs(mark, f"{role}_dir") if d != data]

    def _remove_made_dirs(self) -> None:
        data = self._dir("data")
        assert data is not None
        for d in self._recorded_dirs(data):
            if d.is_dir() and not d.is_symlink():
                for child in d.iterdir():
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        for child in data.iterdir():
            if child.name != CREATED_MARK:
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        (data / CREATED_MARK).unlink(missing_ok=True)  # last: a removal cut short is finished by the next

    def _init_datadir(self) -> bool:
        data = self._dir("data")
        assert data is not None and self.install is not None and self.server is not None
        self.data_dir = data
        mark = created_mark(data)
        ours = mark is not None
        problems = []
        for role in ROLES:
            d = self._dir(role)
            if d is not None:
                problems += storage_problems(f"target.storage.{role}_dir", d, ours)
        if problems:
            raise SpecError(problems, "the target's storage")
        if mark is not None and MADE in mark.splitlines():
            self._write_options(self.settings.settings)
            return False
        if ours:  # an install cut short (perflab or the server killed): perflab's own, made again
            self._remove_made_dirs()
        for d in self._made_dirs():
            d.mkdir(parents=True, exist_ok=True, mode=0o750)
            _chown(d, self.run_as)
        self._write_options(self.settings.settings)
        log = self._log_file()
        log.touch()
        _chown(log, self.run_as)
        # marked before anything is made in it: whatever is left of a failed install is perflab's; the
        # redo and undo directories recorded as they are made (clean trusts this, not the stored experiment)
        mark = "created by perflab (mariadb-install-db); perflab may remove it\n" + "".join(
            f"{role}_dir: {d}\n" for role in ("redo", "undo") if (d := self._dir(role)) is not None and d != data)
        self._write_mark(data, mark)
        argv = [str(self.install), f"--defaults-file={self._option_file()}", f"--datadir={data}",
                "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"]
        if self.settings.bin_dir:
            argv.append(f"--basedir={self.server.parent.parent}")
        try:
            proc = subprocess.run(self._as_user(argv), capture_output=True, text=True, timeout=300, cwd="/",
                                  env=server_env(user=self.run_as))
        except (OSError, subprocess.SubprocessError) as exc:
            raise RunFailure(f"{INSTALL_BIN} failed: {exc}") from None
        (self.workdir / "install-db.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise RunFailure(f"{INSTALL_BIN} failed (exit {proc.returncode}): "
                             f"{(proc.stderr or proc.stdout).strip()[-1500:]}", log_tail=self.log_tail(40))
        self._write_mark(data, f"{mark}{MADE}\n")
        return True

    def _write_mark(self, data: Path, text: str) -> None:
        write_file(data / CREATED_MARK, text)
        for fs in self.mounted.values():  # on sshfs, written as the server's user: made root's at the server
            if isinstance(fs, NetFs) and data.is_relative_to(fs.mountpoint):
                fs.own(data / CREATED_MARK)

    def _enter_cgroup(self) -> None:
        assert self.data_dir is not None
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
        self.cgroup = cgroup_to_start_in(self.cgroup, self.settings.resources, f"perflab-my-{digest}")

    def _start(self) -> None:
        assert self.server is not None and self.socket_dir is not None
        log = self._log_file()
        log.touch()
        _chown(log, self.run_as)
        if log != self.server_log.path:
            self.server_log.move(log)
        start_offset = self.server_log.size()
        if self.before_start is not None:
            self.before_start()
        self._enter_cgroup()
        usage = self.resource_usage()  # the OOM killer's count so far: a start it kills fails at once, naming it
        argv = self._as_user([str(self.server), f"--defaults-file={self._option_file()}",
                              f"--init-file={self._write_init_file()}"])
        if self.cgroup is not None:
            argv = self.cgroup.wrap(argv)
        token = secrets.token_hex(8)
        key = f"mariadb:{self.workdir}"
        # Before the server exists: if perflab dies from here on, its guardian stops it.
        journal().add("server-process", key, token=token)
        self.token = token
        env = server_env(token, self.run_as)  # nothing of perflab's environment: no MYSQL_*, no PG*
        with log.open("ab") as out:
            try:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                             env=env, cwd="/", start_new_session=True)
            except OSError as exc:
                self._forget()
                raise RunFailure(f"mariadbd did not start: {exc}") from None
        journal().add("server-process", key, token=token, session=self.proc.pid,
                      session_start=start_time(self.proc.pid))
        deadline = time.monotonic() + float(self.settings.start_timeout)
        sock = self.socket_dir / "mysqld.sock"
        while True:
            oom = oom_cause(self.resource_usage(), usage)
            if self.proc.poll() is not None or oom is not None:
                why = self._start_failure_lines(start_offset)
                self._stop()
                raise RunFailure((f"{oom}; " if oom else "") + f"MariaDB did not start (exit "
                                 f"{self.proc.returncode if self.proc else '?'}): {why or 'see the server log'}",
                                 log_tail=self.log_tail(40))
            if sock.exists() and self._answers():
                break
            if time.monotonic() > deadline:
                why = self._start_failure_lines(start_offset)
                self._stop()
                raise RunFailure(f"MariaDB did not answer within {float(self.settings.start_timeout):g} s "
                                 f"(target.start_timeout){': ' + why if why else ''}", log_tail=self.log_tail(40))
            time.sleep(0.05)
        (self.socket_dir / INIT_FILE).unlink(missing_ok=True)
        self.started_settings = dict(self.settings.settings)

    def _write_init_file(self) -> Path:
        """access_sql in the socket directory, the server's user's to read:
        a new file (O_EXCL, O_NOFOLLOW), since that user may write there."""
        assert self.socket_dir is not None
        path = self.socket_dir / INIT_FILE
        owner = user_ids(self.run_as)[:2] if self.run_as is not None else None
        write_file(path, access_sql(USER, self.password), mode=0o600, owner=owner)
        return path

    def _root(self) -> Any:
        import pymysql

        assert self.socket_dir is not None
        return pymysql.connect(unix_socket=str(self.socket_dir / "mysqld.sock"), user="root", password="",
                               autocommit=True, connect_timeout=5)

    def _answers(self) -> bool:
        import pymysql  # outside the probe: a missing library is no server that is not up yet

        try:
            with contextlib.closing(self._root()):
                return True
        except (pymysql.Error, OSError):
            return False

    def _ensure_database(self) -> None:
        with contextlib.closing(self._root()) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.settings.database}`")

    def _endpoint(self, fresh: bool) -> MysqlEndpoint:
        assert self.socket_dir is not None
        tcp = self.settings.listen == "tcp"
        return MysqlEndpoint(read_only=False, fresh=fresh, host="127.0.0.1" if tcp else "localhost",
                             port=self.port or 0, user=USER, password=self.password, database=self.settings.database,
                             unix_socket=None if tcp else str(self.socket_dir / "mysqld.sock"),
                             load_method=self.settings.load_method, info={"server": self._server_label()})

    def _server_label(self) -> str | None:
        version = server_version(self.server) if self.server is not None else None
        return f"MariaDB {version}" if version else None

    def _start_failure_lines(self, offset: int) -> str:
        text = self.server_log.read_from(offset)
        lines = [re.sub(r"^.*?\[ERROR\]\s*", "", ln).strip() for ln in text.splitlines() if "[ERROR]" in ln]
        return "; ".join(dict.fromkeys(lines))[-1000:]

    # -------------------------------------------------------------- per run

    def reconfigure(self, settings: MariadbSettings) -> bool:
        self.settings = settings
        restart = settings.restart == "always" or settings.settings != self.started_settings
        restart = restart or (self.cgroup.settings if self.cgroup else None) != settings.resources
        alive = self.check_alive()
        if not restart and alive is None:
            return False
        if alive is None:
            self._stop()
        self._write_options(settings.settings)
        self._start()
        if self.endpoint is not None:
            self.endpoint.fresh = False
        return True

    # -------------------------------------------------------------- state

    def server_pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def check_alive(self) -> str | None:
        if self.proc is None or self.proc.poll() is not None:
            code = self.proc.returncode if self.proc is not None else None
            return ("the MariaDB server is not running (it crashed or was stopped"
                    + (f"; exit status {code}" if code is not None else "") + ")")
        return None

    def processes(self) -> dict[int, str]:
        if self.token is None:
            return {}
        return {pid: "mariadbd" for pid in server_processes(self.token, self.server_pid())}

    def data_paths(self) -> dict[str, Path]:
        if self.data_dir is None:
            return {}
        out = {"data": self.data_dir, "wal": self._dir("redo") or self.data_dir}
        undo = self._dir("undo")
        if undo is not None:
            out["undo"] = undo
        return out

    def resource_usage(self) -> dict[str, float]:
        return self.cgroup.stats() if self.cgroup is not None else {}

    def file_classes(self) -> list[FileClass]:
        """InnoDB's files: the redo log (ib_logfile*), the undo tablespaces
        (undo*), the binary log, and the data (ibdata* and the databases' files)."""
        if self.data_dir is None:
            return []
        data = self.data_dir.resolve()
        classes = [FileClass("redo", (self._dir("redo") or data).resolve(), 1, "ib_logfile"),
                   FileClass("undo", (self._dir("undo") or data).resolve(), 1, "undo")]
        try:  # the binary log where the running server says it is (its default name varies)
            with contextlib.closing(self._root()) as conn, conn.cursor() as cur:
                cur.execute("SELECT @@log_bin, @@log_bin_basename")
                on, basename = cur.fetchone()
            if on and basename:
                classes.append(FileClass("binlog", Path(basename).parent.resolve(), 1, Path(basename).name + "."))
        except Exception:
            pass  # not running: no binary log to trace
        classes += [FileClass("data", data, 1, "ibdata"), FileClass("data", data, 2)]
        return classes

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"kind": "mariadb", "managed": True, "server": self._server_label(),
                                "mariadbd": str(self.server), "data_dir": str(self.data_dir),
                                "redo_dir": str(self._dir("redo") or self.data_dir),
                                "undo_dir": str(self._dir("undo") or self.data_dir), "run_as": self.run_as,
                                "option_file": str(self._option_file()), "server_pid": self.server_pid(),
                                "requested_settings": self.settings.settings, "restart": self.settings.restart}
        if self.endpoint is not None:
            info["endpoint"] = self.endpoint.display()
        if self.cgroup is not None:
            info["resources"] = self.cgroup.describe()
        if self.mounted:
            info["scratch_fs"] = {role: fs.describe() for role, fs in self.mounted.items()}
        if self.notes:
            info["notes"] = list(self.notes)
        if self.endpoint is not None:
            info.update(describe_server(self.endpoint, self.settings.settings))
        # how perflab reaches and runs it (pid, option file, endpoint), its notes, the
        # settings as asked; and the directories it picked itself: one the experiment gave is the set-up
        storage = self.settings.storage
        return not_setup(info, "server_pid", "option_file", "endpoint", "notes", "requested_settings",
                         *(f"{role}_dir" for role in ("data", "redo", "undo") if not getattr(storage, f"{role}_dir")))

    # -------------------------------------------------------------- teardown

    def _forget(self) -> None:
        journal().remove(f"mariadb:{self.workdir}")
        self.token = None

    def _stop(self) -> None:
        if self.token is not None:
            stop_server_processes(self.token, self.proc.pid if self.proc is not None else None,
                                  wait_s=60.0)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self._forget()

    def teardown(self) -> None:
        self._stop()
        self.proc = None
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            journal().remove(f"socket-dir:{self.socket_dir}")
            self.socket_dir = None
        if self.cgroup is not None:
            self.cgroup.remove(kill=True)
            self.cgroup = None
        self._unmount_scratch()

    def data_locations(self) -> list[Path]:
        self.run_as = current_run_as(self.settings)
        scratch = self._scratch()
        data = self._dir("data")
        kept = [fs.backing_file for fs in scratch.values() if fs.backing_file.exists()]
        if data is None or "data" in scratch or created_mark(data) is None:
            return kept
        return kept + [d for d in [data, *self._recorded_dirs(data)] if d.exists() and not any(
            d.is_relative_to(fs.mountpoint) for fs in scratch.values())]

    def discard_data(self) -> int:
        """Remove the data directory perflab made (and its redo and undo
        directories' contents); the server must be stopped. A directory
        without perflab's mark is not touched."""
        self.run_as = current_run_as(self.settings)
        if foreign_home(self._home(), self.workdir):
            return 0  # a home under /tmp another user made: nothing in it is perflab's
        scratch = self._scratch()
        freed = sum(fs.discard() for fs in scratch.values())
        data = self._dir("data")
        if data is None or "data" in scratch or created_mark(data) is None:
            return freed
        if self.server_pid() is not None:
            raise UserError(f"{data}: the server is still running", "stop it before removing its data")
        freed += sum(p.stat().st_size for d in [data, *self._recorded_dirs(data)] if d.exists()
                     for p in d.rglob("*") if p.is_file() and not p.is_symlink())
        self._remove_made_dirs()
        shutil.rmtree(data, ignore_errors=True)
        return freed
