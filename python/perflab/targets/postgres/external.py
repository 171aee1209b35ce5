"""An external PostgreSQL (`dsn`): perflab only connects. Nothing is
created or dropped, and every session is read-only, unless
`allow_destructive = true`; even then a workload that writes works only in
a schema of perflab's own, marked as its (`confine`,
perflab.targets.confine), and nothing outside it is touched."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
from pathlib import Path
from typing import Any, ClassVar

from perflab.errors import RunFailure, UserError
from perflab.secrets import mask_secrets
from perflab.targets import confine as confine_mod
from perflab.targets.base import REACH_TIMEOUT_S, CheckedWorkload
from perflab.targets.confine import Leftover, Owner, Removal
from perflab.targets.postgres.endpoint import PostgresEndpoint
from perflab.targets.postgres.settings import PostgresSettings, Storage
from perflab.targets.postgres.target import PostgresTarget

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


class ExternalPostgres(PostgresTarget):
    """A server perflab did not start, reached by its dsn."""

    external_kind: ClassVar[bool | None] = True

    def __init__(self, settings: PostgresSettings, workdir: Path, base_dir: Path | None = None) -> None:
        super().__init__(settings, workdir, base_dir)
        self.external = True
        # perflab's own schemas (confine), each with the session that holds
        # its advisory lock while this target lives.
        self.claims: dict[str, tuple[Any, PostgresEndpoint]] = {}

    @classmethod
    def for_distributed_driver(cls, settings: PostgresSettings) -> tuple[PostgresSettings, list[tuple[str, str]], str | None]:
        """The dsn must name a TCP host: a unix socket is out of the workers' reach."""
        from psycopg.conninfo import conninfo_to_dict

        assert settings.dsn is not None
        params = conninfo_to_dict(settings.dsn)
        hosts = [h for h in str(params.get("hostaddr") or params.get("host") or "").split(",") if h]
        if not hosts or any(h.startswith(("/", "@")) for h in hosts):
            return settings, [("target.dsn", "connects through a unix socket (its host is "
                               f"{', '.join(hosts) or 'not given'}), which the Ray driver's workers cannot "
                               "reach; allowed: a dsn with a TCP host, e.g. \"host=127.0.0.1 port=5432\"")], None
        return settings, [], None

    @classmethod
    def validate_for_workload(cls, settings: PostgresSettings, workload: CheckedWorkload) -> list[tuple[str, str]]:
        problems = []
        managed_only = [k for k in ("bin_dir", "version", "run_as") if getattr(settings, k) is not None]
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
    def preflight(cls, settings: PostgresSettings, base_dir: Path) -> list[tuple[str, str]]:
        return []  # reaching the server is `reach`'s job

    @classmethod
    def preflight_notes(cls, settings: PostgresSettings) -> list[str]:
        return []

    @classmethod
    def reach(cls, settings: PostgresSettings, timeout_s: float = REACH_TIMEOUT_S) -> list[tuple[str, str]]:
        """An external server (dsn): one connection, opened and closed, within
        `timeout_s` (libpq's connect_timeout, whole seconds, 2 at least)."""
        import psycopg

        assert settings.dsn is not None
        try:
            with psycopg.connect(settings.dsn, autocommit=True, connect_timeout=max(2, math.ceil(timeout_s)),
                                 application_name="perflab-check"):
                pass
        except Exception as exc:
            return [UserError(*connect_failure(exc, settings.dsn, max(2, math.ceil(timeout_s))))
                    .as_problem("target.dsn")]
        return []

    @classmethod
    def sizes_huge_pages(cls, settings: PostgresSettings) -> bool:
        return False

    @classmethod
    def remote_client_problem(cls, settings: PostgresSettings) -> str | None:
        return ("an external server (dsn) is reached as it is; driver.network needs a managed server, which "
                "perflab makes listen on the namespace's link")

    def provision(self) -> PostgresEndpoint:
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

    def reconfigure(self, settings: PostgresSettings) -> bool:
        return False  # an external server is used as it is

    def confine(self, endpoint: PostgresEndpoint, schema: str, owner: Owner) -> PostgresEndpoint:
        """An external server with allow_destructive: the run's sessions work
        in perflab's own schema `schema` only (search_path, in the conninfo
        both psycopg and the engine's client take)."""
        if endpoint.read_only:
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
        return confine_mod.claimed_leftovers(self.claims, confine_mod.pg_measure, mask_secrets(self.settings.dsn or ""))

    def remove_leftover(self, leftover: dict[str, Any], owner: Owner) -> Removal:
        import psycopg

        if self.settings.dsn is None:
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

    def teardown(self) -> None:
        self._release_claims()
