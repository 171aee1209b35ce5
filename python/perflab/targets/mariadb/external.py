"""A MySQL 8 or MariaDB server perflab did not start, reached by its dsn:
read-only unless allowed, and perflab's own database there (confine)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

from perflab.endpoints import Endpoint
from perflab.errors import RunFailure, UserError
from perflab.model import not_setup
from perflab.secrets import mask_secrets
from perflab.targets import confine as confine_mod
from perflab.targets.base import REACH_TIMEOUT_S, CheckedWorkload, Target, TargetSettings
from perflab.targets.confine import Leftover, Owner, Removal
from perflab.targets.mariadb.endpoint import MysqlEndpoint, MysqlSession, describe_server
from perflab.targets.mariadb.settings import MysqlSettings, parse_dsn


def connect_failure(exc: BaseException, where: str, user: str) -> tuple[str, str]:
    """(message, fix) for a failed login to a MySQL-protocol server, by cause
    (MySQL's error code); never with the password in it."""
    args: tuple[Any, ...] = exc.args
    code = args[0] if args and isinstance(args[0], int) else None
    words = mask_secrets(str(args[1]) if len(args) > 1 else str(exc)).strip()
    if code == 1045:
        return (f"target.dsn: the server at {where} refused the login as user \"{user}\": {words}",
                "give the right password for that user in the dsn (mysql://user:password@...) or in MYSQL_PWD; "
                "perflab never stores or prints it")
    if code == 1049:
        return (f"target.dsn: the server at {where} has no such database: {words}",
                "give an existing database in the dsn's path, or none")
    if code in (2002, 2003, 2005, 2013):
        return (f"target.dsn: cannot reach a MySQL server at {where}: {words}",
                "start the server, or correct the dsn's host and port (or unix_socket)")
    return (f"target.dsn: cannot connect as user \"{user}\" to the server at {where}: {words}",
            "check that the server is up and the dsn (host, port, user, database, password) is right")



class MysqlTarget(Target[MysqlSettings, MysqlEndpoint]):
    """A MySQL 8 or MariaDB server perflab did not start, by `dsn`."""

    Settings: ClassVar[type[TargetSettings]] = MysqlSettings
    endpoint_type: ClassVar[type[Endpoint]] = MysqlEndpoint

    def __init__(self, settings: MysqlSettings, workdir: Path, base_dir: Path | None = None) -> None:
        super().__init__(settings, workdir, base_dir)
        self.external = True
        self.dsn = parse_dsn(settings.dsn)
        self.endpoint: MysqlEndpoint | None = None
        # perflab's own databases (confine), each with the session that holds its named lock
        self.claims: dict[str, tuple[MysqlSession, MysqlEndpoint]] = {}

    @classmethod
    def identity(cls, settings: MysqlSettings) -> str:
        return mask_secrets(json.dumps(settings.model_dump(exclude={"keep_data"}), sort_keys=True))

    @classmethod
    def for_distributed_driver(cls, settings: MysqlSettings) -> tuple[MysqlSettings, list[tuple[str, str]], str | None]:
        if parse_dsn(settings.dsn).unix_socket:
            return settings, [("target.dsn", "connects through a unix socket, which the Ray driver's workers "
                               "cannot reach; allowed: a dsn with a TCP host")], None
        return settings, [], None

    @classmethod
    def reachable_off_host(cls, settings: MysqlSettings) -> bool:
        """Reached at the dsn's own address."""
        return True

    @classmethod
    def validate_for_workload(cls, settings: MysqlSettings, workload: CheckedWorkload) -> list[tuple[str, str]]:
        if workload.writes() and not settings.allow_destructive:
            return [("target.allow_destructive",
                     f"workload {workload.settings.kind!r} writes to the database, and perflab never writes to a "
                     "database it did not create; allowed: true, to let it (then it works only in a database of "
                     f"its own there, {confine_mod.schema_for(workload.settings.kind)}, and leaves everything "
                     "else alone)")]
        return []

    @classmethod
    def _endpoint_of(cls, settings: MysqlSettings) -> MysqlEndpoint:
        dsn = parse_dsn(settings.dsn)
        return MysqlEndpoint(read_only=not settings.allow_destructive, fresh=False, host=dsn.host, port=dsn.port,
                             user=dsn.user, password=dsn.password, database=dsn.database,
                             unix_socket=dsn.unix_socket, load_method=settings.load_method)

    @classmethod
    def reach(cls, settings: MysqlSettings, timeout_s: float = REACH_TIMEOUT_S) -> list[tuple[str, str]]:
        """One connection, opened and closed within `timeout_s`; nothing changed."""
        import pymysql

        dsn = parse_dsn(settings.dsn)
        try:
            conn = pymysql.connect(host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password or "",
                                   database=dsn.database or None, unix_socket=dsn.unix_socket,
                                   connect_timeout=max(1, int(timeout_s)), program_name="perflab-check")
            conn.close()
        except Exception as exc:
            return [UserError(*connect_failure(exc, dsn.where(), dsn.user)).as_problem("target.dsn")]
        return []

    def provision(self) -> MysqlEndpoint:
        ep = self._endpoint_of(self.settings)
        try:
            with ep.connect() as conn:
                ep.info["server"] = "MySQL-protocol " + str(conn.execute("SELECT VERSION()").fetchone()[0])
        except Exception as exc:
            raise UserError(*connect_failure(exc, self.dsn.where(), self.dsn.user)) from None
        self.endpoint = ep
        return ep

    def reconfigure(self, settings: MysqlSettings) -> bool:
        return False

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"kind": "mysql", "managed": False}
        if self.endpoint is not None:
            info["endpoint"] = self.endpoint.display()
            info.update(describe_server(self.endpoint, {}))
            info["server"] = f"MySQL-protocol {info.get('version', '?')}"
        return not_setup(info, "endpoint")

    def confine(self, endpoint: MysqlEndpoint, schema: str, owner: Owner) -> MysqlEndpoint:
        """With allow_destructive: the run's sessions work in perflab's own
        database `schema` (made and marked here, or already perflab's)."""
        if endpoint.read_only:
            return endpoint
        if schema in self.claims:
            return self.claims[schema][1]
        where = self.settings.dsn and mask_secrets(self.settings.dsn)
        try:
            conn = endpoint.connect(database="")
        except Exception as exc:
            raise RunFailure(connect_failure(exc, self.dsn.where(), self.dsn.user)[0]) from None
        try:
            if not confine_mod.my_try_lock(conn, schema):
                raise UserError(f"{where}: perflab's database {schema} is in use by another running perflab "
                                "experiment; nothing was touched", "wait for it to finish, or use another server")
            made, done = confine_mod.my_claim(conn, schema, owner, where)
        except BaseException:
            conn.close()
            raise
        confined = dataclasses.replace(endpoint, database=schema, schema=schema, fresh=made)
        self.claims[schema] = (conn, confined)
        self.said.append(done)
        return confined

    def leftovers(self) -> list[Leftover]:
        return confine_mod.claimed_leftovers(self.claims, confine_mod.my_measure, mask_secrets(self.settings.dsn))

    def remove_leftover(self, leftover: dict[str, Any], owner: Owner) -> Removal:
        where = mask_secrets(self.settings.dsn)
        try:
            conn = self._endpoint_of(self.settings.model_copy(update={"allow_destructive": True})).connect(database="")
        except Exception as exc:
            return Removal(False, f"database {leftover['name']} in {where}: not removed: "
                                  f"{connect_failure(exc, self.dsn.where(), self.dsn.user)[0]}")
        with conn:
            return confine_mod.my_remove(conn, leftover["name"], owner, where)

    def teardown(self) -> None:
        for conn, _ in self.claims.values():
            conn.close()  # its named lock goes with it
        self.claims = {}

