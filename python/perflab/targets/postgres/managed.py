"""A managed PostgreSQL (no `dsn`): perflab finds the binaries
(binaries.find_bin_dir, by target.version or bin_dir), runs initdb into its
home (homes), writes the run's settings to an included `perflab.conf`, and
starts the server on a unix socket in a private 0700 directory (TCP on
127.0.0.1 and a free port only with `listen = "tcp"`). A run whose settings
differ from the running server's restarts it; `restart = "always"` restarts
before every run. PostgreSQL refuses to run as root, so when perflab runs as
root the server runs as `run_as` (default `nobody`, users).

A managed server may run with limits on its whole process tree
(`resources`: a cgroup, perflab.hostctl.cgroups) and with its data or WAL on
a scratch filesystem perflab makes (`storage.data_fs`, `storage.wal_fs`: a
loop-backed file or a tmpfs, perflab.hostctl.scratchfs). Both are journaled
and undone at teardown, and after a SIGKILL by the guardian (postmaster.undo_server).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

from perflab.errors import RunFailure, SpecError, UserError
from perflab.guardian import journal, made_dir_problem, read_trusted, state_dir
from perflab.hostctl.cgroups import ServerCgroup, oom_cause, resource_problems
from perflab.hostctl.netfs import NetFs
from perflab.hostctl.scratchfs import ScratchFs
from perflab.hostctl.shareddir import open_append, private_dir_problem, write_file
from perflab.model import not_setup
from perflab.proc import pid_alive, stat_fields
from perflab.targets.base import CheckedWorkload
from perflab.targets.postgres.binaries import find_bin_dir, fmt_version, version_of
from perflab.targets.postgres.endpoint import PostgresEndpoint
from perflab.targets.postgres.homes import (
    CREATED_MARK,
    claim_home,
    cluster_home,
    created_mark,
    drop_emptied_home,
    foreign_home,
    home_digest,
    recorded_dirs,
    remove_path,
    size_bytes,
    storage_problems,
    sweep_orphan_homes,
    wal_dir_problems,
)
from perflab.targets.postgres.postmaster import (
    PID_FILE,
    is_postgres,
    kill_left_over,
    live_postmaster,
    passfile_of,
    postmaster_pid,
    server_processes,
)
from perflab.targets.postgres.setting_check import (
    developer_options,
    io_method_notes,
    setting_problems,
)
from perflab.targets.postgres.settings import PostgresSettings, SettingValue, conf_line
from perflab.targets.postgres.target import PostgresTarget
from perflab.targets.postgres.users import (
    as_user,
    chown,
    hba_text,
    ident_text,
    new_password,
    scram_verifier,
    write_passfile,
)
from perflab.targets.serverhome import (
    file_owner,
    free_port,
    reachable_by,
    resolve_run_as,
    scratch_filesystems,
    scratch_notes,
    scratch_problems,
)
from perflab.targets.serverlog import LoggedServer, ServerLog
from perflab.targets.serverproc import server_env

SUPERUSER = "perflab"
PIDFILE = "perflab-target.json"
# Log lines of a failed start that say why (the rest is routine).
START_FAILURE_LINE = re.compile(r"\b(FATAL|PANIC|ERROR):|LOG:.*(invalid|unrecognized|parameter|could not|out of)",
                                re.IGNORECASE)


def server_cgroup_name(data_dir: Path) -> str:
    """The cgroup of the managed server on `data_dir` ([target.resources]):
    one name per data directory, so two experiments never share one."""
    return f"perflab-pg-{hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]}"


class ManagedPostgres(LoggedServer, PostgresTarget):
    """A server perflab starts, owns and stops."""

    external_kind: ClassVar[bool | None] = False

    def __init__(self, settings: PostgresSettings, workdir: Path, base_dir: Path | None = None) -> None:
        super().__init__(settings, workdir, base_dir)
        self.run_as: str | None = None
        self.bin_dir: Path | None = None
        self.data_dir: Path | None = None
        self.socket_dir: Path | None = None
        self.port: int | None = None
        # The server's one log; each run keeps its part (serverlog.ServerLog):
        # what the server wrote since the previous run ended, including a
        # (re)start for this run's settings, or the words of a failed start.
        self.server_log = ServerLog(workdir / "server.log")
        self.running = False
        self.started_settings: dict[str, SettingValue] | None = None
        self.cgroup: ServerCgroup | None = None
        self.mounted: dict[str, ScratchFs] = {}
        # driver.network: one more address to listen on, and the driver's to trust
        self.remote: tuple[str, str] | None = None
        # perflab's role's password over TCP (users.py): new for each target, set at every start
        self.password = new_password()

    @classmethod
    def for_distributed_driver(cls, settings: PostgresSettings) -> tuple[PostgresSettings, list[tuple[str, str]], str | None]:
        """The managed server listens on TCP (127.0.0.1): a unix socket is out
        of the workers' reach."""
        if settings.listen == "tcp":
            return settings, [], None
        return settings.model_copy(update={"listen": "tcp"}), [], (
            "target.listen: the managed server listens on TCP (127.0.0.1, a free port), not on a unix "
            "socket only, because driver.kind = \"ray\": its workers connect over TCP")

    @classmethod
    def validate_for_workload(cls, settings: PostgresSettings, workload: CheckedWorkload) -> list[tuple[str, str]]:
        return setting_problems(settings)

    @classmethod
    def preflight(cls, settings: PostgresSettings, base_dir: Path) -> list[tuple[str, str]]:
        try:
            run_as = resolve_run_as(settings.run_as)
        except UserError as exc:
            return [exc.as_problem("target.run_as")]
        problems = []
        try:
            find_bin_dir(settings.bin_dir, run_as, settings.version)
        except UserError as exc:
            problems.append(exc.as_problem("target.version" if settings.version else "target.bin_dir"))
        if settings.resources is not None:
            problems += resource_problems(settings.resources)
        problems += scratch_problems(settings.storage, base_dir)
        # relative paths are the experiment file's, as the target takes them (path_from_file)
        wal = (base_dir / Path(settings.storage.wal_dir).expanduser()).resolve() if settings.storage.wal_dir else None
        if settings.storage.data_dir:
            data_dir = (base_dir / Path(settings.storage.data_dir).expanduser()).resolve()
            problems += storage_problems(data_dir, wal, run_as)
        elif wal is not None:  # the default data directory is new, in the new output directory
            problems += wal_dir_problems(wal)
        return problems

    @classmethod
    def preflight_notes(cls, settings: PostgresSettings) -> list[str]:
        """What `check` should say about settings it accepts: developer options."""
        notes = [f"target.settings.{name}: a developer option of this PostgreSQL (not in `postgres "
                 "--describe-config`), meant for testing the server; it may change or go between versions"
                 for name in developer_options(settings)]
        return notes + io_method_notes(settings) + scratch_notes(settings.storage)

    @classmethod
    def sizes_huge_pages(cls, settings: PostgresSettings) -> bool:
        return True

    @classmethod
    def remote_client_problem(cls, settings: PostgresSettings) -> str | None:
        if settings.listen != "tcp":
            return "the server listens on a unix socket only; set target.listen = \"tcp\""
        return None

    # -------------------------------------------------------------- provision

    def provision(self) -> PostgresEndpoint:
        self.run_as = resolve_run_as(self.settings.run_as)
        self.bin_dir = find_bin_dir(self.settings.bin_dir, self.run_as, self.settings.version)
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
        """Where the cluster (and scratch mount points) go (homes.cluster_home):
        the target's directory, unless the server's user cannot reach it; then
        a directory under /tmp, and a note says where. That one is kept for
        the next run in the same output directory, as a cluster in the output
        directory is, and removed by the first perflab to start a managed
        server after the output directory is gone (`sweep_orphan_homes`)."""
        home = cluster_home(self.workdir, self.run_as)
        note = (f"the output directory is not reachable by user {self.run_as}; the cluster is under {home}, "
                "kept for the next run here and removed once the output directory is gone")
        if home != self.workdir and note not in self.notes:
            self.notes.append(note)
        return home

    def _claim_home(self) -> None:
        """Remove orphaned homes under /tmp; when this cluster's home is one,
        mark it with this output directory, so that it goes once that does."""
        for home, owner in sweep_orphan_homes(mine_too=True):
            self.notes.append(f"removed {home}: the kept cluster of output directory {owner}, which is gone")
        home = self._home()
        if home == self.workdir:
            return
        claim_home(home, self.workdir.resolve())  # made, or taken again only when perflab's own

    # -------------------------------------------------------------- scratch filesystems

    def _scratch(self) -> dict[str, ScratchFs]:
        """The scratch filesystems the settings ask for (not yet mounted)."""
        return scratch_filesystems(self.settings.storage, self._home, self.workdir, home_digest(self.workdir),
                                   self.path_from_file, run_as=self.run_as)

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
        if new.get("wal") and created_mark(data_dir) is not None:
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
        # nothing of perflab's environment (no PG* variable, no password): the server inherits it
        env = server_env(user=self.run_as)
        argv = [str(self.bin_dir / args[0]), *args[1:]]
        user_args = as_user(self.run_as)
        if cgroup is not None:
            if user_args:
                argv = ["setpriv", f"--reuid={user_args['user']}", f"--regid={user_args['group']}", "--clear-groups",
                        "--", *argv]
            argv = cgroup.wrap(argv)
            user_args = {"cwd": "/"} if user_args else {}
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, **user_args)
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
        # evidence, not an order: only a record perflab's user wrote and no one else may have
        info, _ = read_trusted(record)
        if not isinstance(info, dict):
            record.unlink(missing_ok=True)
            return
        data_dir = Path(str(info.get("data_dir", "")))
        pid = postmaster_pid(data_dir) or int(info.get("postmaster_pid") or 0)
        if pid and is_postgres(pid, data_dir):
            self.notes.append(f"stopped a server left running by an earlier perflab (pid {pid})")
            self.data_dir = data_dir
            self._stop_server(pid)
        socket_dir = info.get("socket_dir")
        if isinstance(socket_dir, str) and made_dir_problem(socket_dir) is None:
            shutil.rmtree(socket_dir, ignore_errors=True)
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
        chown(data_dir, self.run_as)
        args = ["initdb", "-D", str(data_dir), "-U", SUPERUSER, "--auth-local=peer", "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C", "--no-sync"]
        created = "created by perflab initdb; perflab may drop and recreate it\n"
        if wal is not None:
            # the WAL directory is recorded as it is made: clean trusts this, never the stored experiment
            created += f"wal_dir{' created' if not wal.exists() else ''}: {wal}\n"
            wal.mkdir(parents=True, exist_ok=True, mode=0o700)
            chown(wal, self.run_as)
            args += ["-X", str(wal)]
        proc = self._pg(args, timeout=300)
        (self.workdir / "initdb.log").write_text(proc.stdout + proc.stderr)
        # the data directory is the server user's: nothing planted there is written through
        write_file(data_dir / CREATED_MARK, created)
        for fs in self.mounted.values():  # on sshfs, written as the server's user: made root's at the server
            if isinstance(fs, NetFs) and data_dir.is_relative_to(fs.mountpoint):
                fs.own(data_dir / CREATED_MARK)
        with os.fdopen(open_append(data_dir / "postgresql.conf"), "a") as f:
            f.write("\n# perflab: the run's settings\ninclude 'perflab.conf'\n")
        return True

    def _write_conf(self, settings: dict[str, SettingValue]) -> None:
        assert self.data_dir is not None
        if self.socket_dir is None:
            self.socket_dir = Path(tempfile.mkdtemp(prefix="perflab-pg-"))
            journal().add("remove-dir", f"socket-dir:{self.socket_dir}", path=str(self.socket_dir))
            os.chmod(self.socket_dir, 0o700)
            chown(self.socket_dir, self.run_as)
        if self.port is None:
            self.port = free_port() if self.settings.listen == "tcp" else 5432
        lines = [
            "# written by perflab for each run; do not edit",
            f"port = {self.port}",
            f"listen_addresses = '{self._listen_addresses()}'",
            f"unix_socket_directories = '{self.socket_dir}'",
            "unix_socket_permissions = 0700",
            "logging_collector = off",
        ]
        for name, value in settings.items():
            lines.append(conf_line(name, value))
        # in a directory the server's user owns: replaced, never written through (shareddir)
        write_file(self.data_dir / "perflab.conf", "\n".join(lines) + "\n", owner=file_owner(self.run_as))
        self._write_hba()

    def _listen_addresses(self) -> str:
        if self.settings.listen != "tcp":
            return ""
        return "127.0.0.1" + (f", {self.remote[0]}" if self.remote else "")

    def _write_hba(self) -> None:
        """pg_hba.conf and pg_ident.conf, whole, at every start (users.py): the
        socket by peer for root, perflab's user and the server's; TCP (and the
        driver's namespace address with driver.network) by scram-sha-256."""
        assert self.data_dir is not None
        for name, text in (("pg_hba.conf", hba_text(self.remote[1] if self.remote else None)),
                           ("pg_ident.conf", ident_text(SUPERUSER, self.run_as))):
            # a new file renamed into place: nothing the server's user planted there is written through
            write_file(self.data_dir / name, text, mode=0o600, owner=file_owner(self.run_as))

    def _clear_stale_lock(self) -> None:
        """A postmaster that was killed leaves postmaster.pid behind, and until
        its parent reaps it PostgreSQL's own check takes the zombie for a live
        server. Wait for the reaping; a lock whose process is dead is removed."""
        assert self.data_dir is not None
        lock = self.data_dir / PID_FILE
        pid = self.postmaster_pid()
        if pid is None:
            return
        if is_postgres(pid, self.data_dir):
            self.notes.append(f"stopped a server left running on this data directory (pid {pid})")
            self._stop_server(pid)
        deadline = time.monotonic() + 10
        while stat_fields(pid) is not None and time.monotonic() < deadline:  # until it is reaped
            time.sleep(0.05)
        if lock.exists() and not pid_alive(pid):
            lock.unlink(missing_ok=True)

    def _start(self) -> None:
        assert self.data_dir is not None
        self._clear_stale_lock()
        if not self.log_path.exists():
            self.log_path.touch()
        chown(self.log_path, self.run_as)
        if not reachable_by(self.log_path.parent, self.run_as):
            # The log must be writable by the server's user; keep it beside the data.
            moved = self.data_dir.parent / "server.log"
            moved.touch()
            chown(moved, self.run_as)
            self.server_log.move(moved)
        start_offset = self.log_path.stat().st_size
        timeout = int(self.settings.start_timeout)
        if self.before_start is not None:
            self.before_start()
        self._enter_cgroup()
        usage = self.resource_usage()  # the OOM killer's count so far: a start it kills fails naming it
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
            oom = oom_cause(self.resource_usage(), usage)
            raise RunFailure((f"{oom}; " if oom else "") + f"PostgreSQL did not start: {why}", log_tail=self.log_tail(40))
        self.running = True
        self.started_settings = dict(self.settings.settings)
        self._set_password()
        # 0644 whatever the umask, never through a link: _cleanup_leftover trusts only such a record
        write_file(self.workdir / PIDFILE, json.dumps({
            "postmaster_pid": self.postmaster_pid(), "data_dir": str(self.data_dir),
            "socket_dir": str(self.socket_dir), "perflab_pid": os.getpid()}))

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

    def allow_remote_client(self, listen: str, client: str) -> None:
        self.remote = (listen, client)

    def remote_endpoint(self, endpoint: PostgresEndpoint, host: str, port: int) -> PostgresEndpoint:
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
            version = version_of(self.bin_dir, self.run_as)
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
        # over TCP with the password (psycopg and the engine's client take it from the conninfo;
        # display() masks it); on the socket without one: peer
        password = self.password if self.settings.listen == "tcp" else None
        conninfo = make_conninfo(host=host, port=self.port, user=SUPERUSER, dbname=self.settings.database,
                                 password=password)
        return PostgresEndpoint(
            read_only=False, fresh=fresh, conninfo=conninfo, host=host,
            port=self.port, user=SUPERUSER, dbname=self.settings.database, password=password,
        )

    def _admin(self) -> str:
        """perflab's own session on the socket (peer: no password), to the maintenance database."""
        from psycopg.conninfo import make_conninfo

        assert self.port is not None and self.socket_dir is not None
        return make_conninfo(host=str(self.socket_dir), port=self.port, user=SUPERUSER, dbname="postgres")

    @property
    def passfile(self) -> Path:
        """Where the password is kept for `psql` by hand (users.write_passfile):
        perflab's own state directory, one file per data directory."""
        assert self.data_dir is not None
        return passfile_of(self.data_dir)

    def _set_password(self) -> None:
        """The role's password, new for this target, set on the socket as its
        SCRAM verifier (no statement log holds the password), and kept in a
        0600 passfile in perflab's state directory."""
        import psycopg

        assert self.port is not None
        with psycopg.connect(self._admin(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"ALTER ROLE {SUPERUSER} PASSWORD '{scram_verifier(self.password)}'")
        state = state_dir()
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        problem = private_dir_problem(state)
        if problem is None:
            write_passfile(self.passfile, self.port, SUPERUSER, self.password)
        elif (note := f"no passfile for psql by hand: perflab's state directory {state} {problem}") not in self.notes:
            self.notes.append(note)

    def _ensure_database(self) -> None:
        import psycopg

        with psycopg.connect(self._admin(), autocommit=True, connect_timeout=10) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.settings.database,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.settings.database}"')

    # -------------------------------------------------------------- per run

    def reconfigure(self, settings: PostgresSettings) -> bool:
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
        text = self.server_log.read_from(offset)
        lines = [line.strip() for line in text.splitlines() if START_FAILURE_LINE.search(line)]
        # without the timestamp and pid prefix: "LOG:  unrecognized ..."
        lines = [re.sub(r"^.*?\b(?=(FATAL|PANIC|ERROR|LOG):)", "", line) for line in lines]
        return "; ".join(dict.fromkeys(re.sub(r"\s+", " ", line) for line in lines))[-1000:]

    @property
    def log_path(self) -> Path:
        """Where the server writes its log now."""
        return self.server_log.path

    # -------------------------------------------------------------- state

    def postmaster_pid(self) -> int | None:
        return postmaster_pid(self.data_dir) if self.data_dir is not None else None

    server_pid = postmaster_pid  # Target.server_pid: the postmaster

    def check_alive(self) -> str | None:
        pid = self.postmaster_pid()
        if not self.running or pid is None or not pid_alive(pid):
            return "the PostgreSQL server is not running (it crashed or was stopped)"
        return None

    def processes(self) -> dict[int, str]:
        pid = self.postmaster_pid()
        if pid is None or not pid_alive(pid):
            return {}
        return server_processes(pid)

    def data_paths(self) -> dict[str, Path]:
        if self.data_dir is None:
            return {}
        wal = self.data_dir / "pg_wal"
        return {"data": self.data_dir, "wal": wal.resolve() if wal.exists() else wal}

    def server_info(self) -> dict[str, Any]:
        binary = version_of(self.bin_dir, self.run_as) if self.bin_dir is not None else None
        info: dict[str, Any] = dict(
            bin_dir=str(self.bin_dir), data_dir=str(self.data_dir), run_as=self.run_as,
            # the server's version as its binary says it ("PostgreSQL 18.6"), before any connection
            server=fmt_version(binary) if binary else None,
            wal_dir=str(self.data_paths().get("wal")), postmaster_pid=self.postmaster_pid(),
            requested_settings=self.settings.settings, restart=self.settings.restart,
        )
        if self.cgroup is not None:
            info["resources"] = self.cgroup.describe()
        if self.mounted:
            info["scratch_fs"] = {role: fs.describe() for role, fs in self.mounted.items()}
        # the pid, and the directories perflab picked itself (in its output
        # directory or on its scratch filesystem): a data_dir or wal_dir the
        # experiment gave is the set-up
        not_setup(info, "postmaster_pid")
        storage = self.settings.storage
        not_setup(info, *(["data_dir"] if not storage.data_dir else []),
                  *(["wal_dir"] if not storage.wal_dir else []))
        return info

    # -------------------------------------------------------------- teardown

    def _stop_server(self, pid: int | None) -> None:
        if self.data_dir is not None and (self.data_dir / PID_FILE).exists():
            # After an OOM kill the server recovers at its memory limit, crawling: stop it at once
            # (PostgreSQL's immediate mode; the next start recovers) rather than wait a minute for it.
            mode = "immediate" if oom_cause(self.resource_usage()) is not None else "fast"
            proc = self._pg(["pg_ctl", "stop", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60"],
                            timeout=90, check=False)
            if proc.returncode == 0:
                return
        if pid and pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)  # immediate shutdown
            deadline = time.monotonic() + 10
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def data_locations(self) -> list[Path]:
        self.run_as = resolve_run_as(self.settings.run_as)
        scratch = self._scratch()
        kept = [fs.backing_file for fs in scratch.values() if fs.backing_file.exists()]
        data_dir = None if "data" in scratch else self._data_dir()
        wal = None if "wal" in scratch or data_dir is None else self._made_wal(data_dir)
        if data_dir is not None and created_mark(data_dir) is None:
            data_dir = wal = None  # not a cluster perflab made: not its data (discard_data leaves it too)
        return kept + [p for p in (data_dir, wal) if p is not None and p.exists()]

    @staticmethod
    def _made_wal(data_dir: Path) -> Path | None:
        """The separate WAL directory of perflab's cluster in `data_dir`: the
        one its mark records (never the stored experiment's wal_dir, which
        anyone may edit), and only while the cluster's pg_wal link still
        leads there."""
        recorded = recorded_dirs(created_mark(data_dir), "wal_dir")
        link = data_dir / "pg_wal"
        if not recorded or not link.is_symlink():
            return None
        there = os.path.realpath(link)
        return next((w for w in recorded if os.path.realpath(w) == there), None)

    def discard_data(self) -> int:
        """Remove the cluster perflab created (and its separate WAL directory);
        the server must be stopped. A cluster without perflab's mark is not
        touched."""
        self.run_as = resolve_run_as(self.settings.run_as)
        if foreign_home(self._home(), self.workdir):
            return 0  # a home under /tmp another user made: nothing in it is perflab's
        scratch = self._scratch()
        freed = sum(fs.discard() for fs in scratch.values())  # a scratch filesystem goes whole
        if "data" in scratch:
            drop_emptied_home(self._home(), self.workdir)
            return freed
        data_dir = self._data_dir()
        mark = created_mark(data_dir)
        if mark is None:
            return freed
        if live_postmaster(data_dir) is not None:
            raise UserError(f"{data_dir}: the server is still running", "stop it before removing its data")
        wal = None if "wal" in scratch else self._made_wal(data_dir)
        freed += size_bytes(data_dir) + (size_bytes(wal) if wal else 0)
        # The mark goes last: a removal cut short is finished by the next one.
        for child in data_dir.iterdir():
            if child.name != CREATED_MARK:
                remove_path(child)
        if wal is not None and wal.is_dir():
            for child in wal.iterdir():
                remove_path(child)
            # a directory the user made (a mount point, say) stays, emptied
            if f"wal_dir created: {wal}" in mark.splitlines():
                with contextlib.suppress(OSError):
                    wal.rmdir()
        shutil.rmtree(data_dir, ignore_errors=True)
        drop_emptied_home(self._home(), self.workdir)
        return freed

    def teardown(self) -> None:
        if self.running or self.postmaster_pid():
            pid = self.postmaster_pid()
            if pid is not None and pid_alive(pid):
                self._stop_server(pid)
        if self.data_dir is not None:
            # A postmaster that was killed leaves its backends running: one
            # blocked on a lock never notices and would run on for good.
            kill_left_over(self.data_dir)
        self.running = False
        if self.data_dir is not None:
            journal().remove(f"postgres:{self.data_dir}")
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            journal().remove(f"socket-dir:{self.socket_dir}")
            self.socket_dir = None
        (self.workdir / PIDFILE).unlink(missing_ok=True)
        if self.data_dir is not None:
            self.passfile.unlink(missing_ok=True)
        if self.cgroup is not None:
            self.cgroup.remove(kill=True)
            self.cgroup = None
        self._unmount_scratch()
