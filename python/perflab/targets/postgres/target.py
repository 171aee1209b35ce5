"""The `postgres` target kind: one class the registry names, whose objects
are a managed server (managed.ManagedPostgres, no dsn) or an external one
(external.ExternalPostgres, dsn), as the settings ask; its class methods
answer for the one the settings ask for. What both share is here: the
settings, the endpoint, the identity and the description of a live server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from perflab.endpoints import Endpoint, one_row
from perflab.model import not_setup
from perflab.secrets import mask_secrets
from perflab.targets.base import REACH_TIMEOUT_S, CheckedWorkload, Target, TargetSettings
from perflab.targets.postgres.endpoint import PostgresEndpoint
from perflab.targets.postgres.settings import RESERVED_SETTINGS, PostgresSettings

# PostgreSQL's max_connections when postgresql.conf does not set it (every version since 8.x).
DEFAULT_MAX_CONNECTIONS = 100


def too_many_clients(settings: PostgresSettings, workload: CheckedWorkload) -> list[tuple[str, str]]:
    """A managed server's max_connections below the workload's clients: every
    run would lose clients at connect ("sorry, too many clients already")
    after the load; refused at check. (The clients connect as the superuser,
    which may use every slot.)"""
    clients_of = getattr(workload.settings, "effective_clients", None)
    given = settings.settings.get("max_connections", DEFAULT_MAX_CONNECTIONS)
    try:
        allowed = int(given)
    except (TypeError, ValueError):
        return []  # the server's own check names a bad value
    clients = clients_of() if callable(clients_of) else None
    if not isinstance(clients, int) or clients <= allowed:
        return []
    return [("workload.clients", f"got {clients}, more than the managed server's max_connections = {allowed}"
             + ("" if "max_connections" in settings.settings else " (PostgreSQL's default)")
             + f"; allowed: at most {allowed} clients, or target.settings.max_connections = {clients + 5}")]


class PostgresTarget(Target[PostgresSettings, PostgresEndpoint]):
    Settings: ClassVar[type[TargetSettings]] = PostgresSettings
    endpoint_type: ClassVar[type[Endpoint]] = PostgresEndpoint
    # Set by each subclass: the one for external settings (a dsn) or not.
    external_kind: ClassVar[bool | None] = None
    _kinds: ClassVar[dict[bool, type[PostgresTarget]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.external_kind is not None:
            PostgresTarget._kinds[cls.external_kind] = cls

    def __new__(cls, settings: PostgresSettings, workdir: Path, base_dir: Path | None = None) -> PostgresTarget:
        return super().__new__(cls._kind(settings))

    def __init__(self, settings: PostgresSettings, workdir: Path, base_dir: Path | None = None) -> None:
        super().__init__(settings, workdir, base_dir)
        self.endpoint: PostgresEndpoint | None = None

    @classmethod
    def _kind(cls, settings: PostgresSettings) -> type[PostgresTarget]:
        """The class for `settings`: this one, or, asked of PostgresTarget,
        the managed or the external target."""
        return PostgresTarget._kinds[settings.dsn is not None] if cls is PostgresTarget else cls

    @classmethod
    def identity(cls, settings: PostgresSettings) -> str:
        # Resources are not the server's identity: a change restarts the same
        # cluster in a new cgroup.
        keep = settings.model_dump(exclude={"settings", "restart", "start_timeout", "keep_data", "resources"})
        # The identity is stored (dataset table): never with a password in it.
        return mask_secrets(json.dumps(keep, sort_keys=True))

    # The kind's questions before anything starts, answered by the managed or the external target.

    @classmethod
    def for_distributed_driver(cls, settings: PostgresSettings) -> tuple[PostgresSettings, list[tuple[str, str]], str | None]:
        kind = cls._kind(settings)
        return super().for_distributed_driver(settings) if kind is cls else kind.for_distributed_driver(settings)

    @classmethod
    def validate_for_workload(cls, settings: PostgresSettings, workload: CheckedWorkload) -> list[tuple[str, str]]:
        kind = cls._kind(settings)
        problems = super().validate_for_workload(settings, workload) if kind is cls else \
            kind.validate_for_workload(settings, workload)
        return problems + (too_many_clients(settings, workload) if settings.dsn is None else [])

    @classmethod
    def preflight(cls, settings: PostgresSettings, base_dir: Path) -> list[tuple[str, str]]:
        kind = cls._kind(settings)
        return super().preflight(settings, base_dir) if kind is cls else kind.preflight(settings, base_dir)

    @classmethod
    def preflight_notes(cls, settings: PostgresSettings) -> list[str]:
        """What `check` should say about settings it accepts (developer options, io_uring)."""
        kind = cls._kind(settings)
        return [] if kind is cls else kind.preflight_notes(settings)

    @classmethod
    def reach(cls, settings: PostgresSettings, timeout_s: float = REACH_TIMEOUT_S) -> list[tuple[str, str]]:
        kind = cls._kind(settings)
        return [] if kind is cls else kind.reach(settings, timeout_s)

    @classmethod
    def sizes_huge_pages(cls, settings: PostgresSettings) -> bool:
        kind = cls._kind(settings)
        return super().sizes_huge_pages(settings) if kind is cls else kind.sizes_huge_pages(settings)

    @classmethod
    def remote_client_problem(cls, settings: PostgresSettings) -> str | None:
        kind = cls._kind(settings)
        return super().remote_client_problem(settings) if kind is cls else kind.remote_client_problem(settings)

    @classmethod
    def reachable_off_host(cls, settings: PostgresSettings) -> bool:
        """An external server (dsn) is reached at its own address."""
        return settings.dsn is not None

    # -------------------------------------------------------------- state

    def server_info(self) -> dict[str, Any]:
        """What describe() says of the server before connecting (a managed one's paths, version, pid)."""
        return {}

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"kind": "postgres", "managed": not self.external}
        if self.endpoint is not None:
            info["endpoint"] = self.endpoint.display()
        info.update(self.server_info())
        # how perflab reaches the server (a port, a fresh socket directory per
        # start), its notes, and the settings as asked (the effective ones ran)
        not_setup(info, "endpoint", "notes", "connection_settings", "requested_settings")
        if self.notes:
            info["notes"] = list(self.notes)
        if self.endpoint is None:
            return info
        try:
            with self.endpoint.connect() as conn:
                info["version"] = one_row(conn.execute("SELECT version()"))[0]
                info["server_version_num"] = int(one_row(conn.execute("SHOW server_version_num"))[0])
                info["server_version"] = one_row(conn.execute("SHOW server_version"))[0]
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
                    k: one_row(conn.execute(f"SHOW {k}"))[0] for k in key
                }
        except Exception as exc:  # describing must never fail a run
            info["describe_error"] = mask_secrets(str(exc))
        return info
