"""What a PostgreSQL target's experiment file says: `[target]` with
`kind = "postgres"`, managed (no dsn) or external (dsn), and its storage."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from perflab.hostctl.cgroups import ResourceSettings
from perflab.hostctl.scratchfs import FsSettings
from perflab.secrets import mask_secrets
from perflab.settings_model import OsText
from perflab.targets.base import TargetSettings
from perflab.targets.config_values import one_line, postgres_quoted
from perflab.targets.serverhome import RoleStorage
from perflab.units import Duration

SETTING_NAME = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$")
# Settings perflab sets itself to reach the server; a user value would break that.
RESERVED_SETTINGS = ("port", "listen_addresses", "unix_socket_directories", "unix_socket_permissions")
# Names that place the server's files or read another file: postgresql.conf's
# include directives, and the files perflab writes (pg_hba.conf: who may connect).
FILE_SETTINGS = ("include", "include_dir", "include_if_exists", "config_file", "hba_file", "ident_file",
                 "data_directory")

SettingValue = str | int | float | bool
# A value as perflab.conf holds it: one value on its line (config_values).
ConfValue = Annotated[SettingValue, AfterValidator(lambda v: one_line(v, "perflab.conf"))]


def conf_line(name: str, value: SettingValue) -> str:
    """One setting as a line of perflab.conf: a string in single quotes by
    the file's own rules, a number or boolean as it is."""
    if isinstance(value, bool):
        return f"{name} = {'on' if value else 'off'}"
    if isinstance(value, (int, float)):
        return f"{name} = {value}"
    return f"{name} = {postgres_quoted(value)}"


class Storage(RoleStorage):
    ROLES = ("data", "wal")

    # The data directory (empty or absent; relative to the experiment file).
    data_dir: OsText | None = None
    # The WAL directory, apart from the data (empty or absent).
    wal_dir: OsText | None = None
    # A filesystem perflab makes for the data directory or the WAL; false
    # (TOML has no null) is none, so a factor can compare with and without.
    data_fs: FsSettings | Literal[False] | None = None
    wal_fs: FsSettings | Literal[False] | None = None


class PostgresSettings(TargetSettings):
    kind: Literal["postgres"]
    # An external server's connection string (libpq): perflab then starts nothing and reaches it there.
    dsn: str | None = None
    # On an external server: let perflab create its own marked schemas and write in them.
    allow_destructive: bool = False
    # The directory of the server's binaries (default: found on this machine, by `version`).
    bin_dir: OsText | None = None
    # The server's version ("15", "18", "18.6"): perflab finds a matching
    # server (binaries), and each version is its own cluster (identity).
    version: str | None = Field(default=None, pattern=r"^[0-9]{1,3}(\.[0-9]{1,4})?$")
    # postgresql.conf settings, name = value, checked against the server's own list.
    settings: dict[str, ConfValue] = Field(default_factory=dict)
    # Where the data directory and the WAL live (default: in the output directory).
    storage: Storage = Field(default_factory=Storage)
    # "on-change": the server is restarted when its settings change; "always": before every run (cold cache).
    restart: Literal["on-change", "always"] = "on-change"
    # Clients reach the server on its unix socket or on TCP (127.0.0.1, a free port).
    listen: Literal["unix", "tcp"] = "unix"
    # The database perflab creates and loads.
    database: str = Field(default="perflab", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # The OS user the server runs as (default: nobody when perflab runs as root; never root).
    run_as: OsText | None = None
    # How long the server may take to start.
    start_timeout: Duration = Field(default=120.0, gt=0)
    # Limits on the server's whole process tree (a cgroup).
    resources: ResourceSettings | None = None

    def server_cpus(self) -> str | None:
        return self.resources.cpus if self.resources is not None else None

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        # `version = 18` in TOML is the same as "18"; a float (18.6) would lose "18.10"'s zero
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

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
            if name in FILE_SETTINGS:
                raise ValueError(f"got {name!r}; perflab writes the server's configuration and places its files "
                                 "(target.storage places the data); allowed: any other setting")
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
