"""What a MariaDB or MySQL target's experiment file says: `[target]` with
`kind = "mariadb"` (managed, and its storage) or `kind = "mysql"` (a dsn)."""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from perflab.hostctl.cgroups import ResourceSettings
from perflab.hostctl.scratchfs import FsSettings
from perflab.secrets import mask_secrets
from perflab.settings_model import OsText
from perflab.targets.base import TargetSettings
from perflab.targets.config_values import one_line, option_file_value, option_line_problem
from perflab.targets.serverhome import RoleStorage
from perflab.units import Duration

# Options perflab sets itself to place and reach the server; a user value would break that.
RESERVED = ("datadir", "socket", "port", "bind-address", "skip-networking", "pid-file", "user", "log-error",
            "innodb-log-group-home-dir", "innodb-undo-directory", "basedir", "defaults-file", "no-defaults")
# Options that would open the server to anyone who reaches it: perflab's
# servers keep their grant tables (no server without authentication).
OPEN_OPTIONS = ("skip-grant-tables", "grant-tables")
NAME = re.compile(r"^(loose[-_])?[a-z][a-z0-9_-]*$")
SIZE_SUFFIX = re.compile(r"^\s*\d+(\.\d+)?\s*[kmgtpe]?\s*$", re.IGNORECASE)
BOOLEAN_WORDS = ("on", "off", "true", "false", "1", "0", "yes", "no")

SettingValue = str | int | float | bool
# A value as the option file holds it: one value on its line (config_values).
OptionValue = Annotated[SettingValue, AfterValidator(lambda v: one_line(v, "option file"))]
# How a generated data set is loaded: LOAD DATA LOCAL INFILE from a pipe, or
# multi-row INSERTs of the same rows (benchmarks/README.md measures both).
LoadMethod = Literal["load-data", "insert"]


def option_key(name: str) -> str:
    """An option's name as mariadbd compares it: lower case, with hyphens."""
    return name.strip().lower().replace("_", "-")


def option_line(name: str, value: SettingValue) -> str:
    """One setting as a line of the server's option file, read back as
    given: true and false as the flag and its skip- form (`log_bin = ON`
    would name the binary log "ON"), a string quoted by the file's rules."""
    if value is True:
        return name
    if value is False:
        return f"skip-{name}"
    return f"{name} = {option_file_value(str(value))}"


class Storage(RoleStorage):
    ROLES = ("data", "redo", "undo")

    # The data directory (empty or absent; relative to the experiment file).
    data_dir: OsText | None = None
    # The redo log's directory (innodb_log_group_home_dir), apart from the data.
    redo_dir: OsText | None = None
    # The undo tablespaces' directory (innodb_undo_directory), apart from the data.
    undo_dir: OsText | None = None
    # A filesystem perflab makes for each (false, as TOML has no null, is none).
    data_fs: FsSettings | Literal[False] | None = None
    redo_fs: FsSettings | Literal[False] | None = None
    undo_fs: FsSettings | Literal[False] | None = None


ROLES = Storage.ROLES


class MariadbSettings(TargetSettings):
    kind: Literal["mariadb"]
    # The directory of the server's binaries (default: mariadbd on this machine).
    bin_dir: OsText | None = None
    # Server options, by their option-file names (innodb_buffer_pool_size = "1G").
    settings: dict[str, OptionValue] = Field(default_factory=dict)
    # Where the data, the redo log and the undo tablespaces live (default: in the output directory).
    storage: Storage = Field(default_factory=Storage)
    # "on-change": the server is restarted when its settings change; "always": before every run (cold cache).
    restart: Literal["on-change", "always"] = "on-change"
    # Clients reach the server on its unix socket or on TCP (127.0.0.1, a free port).
    listen: Literal["unix", "tcp"] = "unix"
    # The database perflab creates and loads.
    database: str = Field(default="perflab", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # The OS user the server runs as (default: mysql when perflab runs as root; never root).
    run_as: OsText | None = None
    # How long the server may take to start.
    start_timeout: Duration = Field(default=120.0, gt=0)
    # Limits on the server's whole process tree (a cgroup).
    resources: ResourceSettings | None = None
    # How generated data sets (tpch, ssb, tpcc) go in: LOAD DATA LOCAL INFILE or multi-row INSERTs.
    load_method: LoadMethod = "load-data"

    def server_cpus(self) -> str | None:
        return self.resources.cpus if self.resources is not None else None

    @field_validator("settings")
    @classmethod
    def _setting_names(cls, value: dict[str, SettingValue]) -> dict[str, SettingValue]:
        for name in value:
            if not NAME.match(name):
                raise ValueError(f"got setting name {name!r}; allowed: mariadbd option names "
                                 "(e.g. innodb_buffer_pool_size)")
            if option_key(name) in RESERVED:
                raise ValueError(f"got {name!r}; perflab sets it to place and reach the server; allowed: any "
                                 "other option (target.storage places the data, redo and undo; "
                                 "`listen = \"tcp\"` for TCP)")
            if option_key(name).removeprefix("loose-") in OPEN_OPTIONS:
                raise ValueError(f"got {name!r}; a server without its grant tables lets anyone who reaches it "
                                 "in without a password; allowed: any other option")
            too_long = option_line_problem(option_line(name, value[name]))
            if too_long:
                raise ValueError(f"got {name} = a value of {len(str(value[name]))} characters: {too_long}; "
                                 "allowed: a shorter value")
        return value


class MysqlSettings(TargetSettings):
    kind: Literal["mysql"]
    # mysql://user:password@host:port/database, or ?unix_socket=/path for a socket
    dsn: str
    # Let perflab create its own marked databases on the server and write in them.
    allow_destructive: bool = False
    # "insert" for a server that refuses LOAD DATA LOCAL (MySQL 8's local_infile is OFF by default).
    load_method: LoadMethod = "load-data"

    @field_validator("dsn")
    @classmethod
    def _dsn_parses(cls, value: str) -> str:
        parse_dsn(value)
        return value


@dataclass(frozen=True)
class Dsn:
    host: str
    port: int
    user: str
    password: str | None
    database: str
    unix_socket: str | None

    def where(self) -> str:
        return f"socket {self.unix_socket}" if self.unix_socket else f"host {self.host} port {self.port}"


def parse_dsn(text: str) -> Dsn:
    """mysql://user[:password]@host[:port][/database][?unix_socket=/path]; the
    password may instead be in MYSQL_PWD."""
    bad = ValueError(f"got {mask_secrets(text)!r}; allowed: \"mysql://user:password@host:port/database\" "
                     "(or ?unix_socket=/path/to/socket instead of host:port)")
    try:
        url = urllib.parse.urlsplit(text)
        port = url.port or 3306
    except ValueError:
        raise bad from None
    if url.scheme not in ("mysql", "mariadb") or not url.username:
        raise bad
    query = urllib.parse.parse_qs(url.query)
    unknown = set(query) - {"unix_socket"}
    if unknown:
        raise ValueError(f"got parameter {sorted(unknown)[0]!r} in the dsn; allowed: unix_socket")
    password = urllib.parse.unquote(url.password) if url.password is not None else os.environ.get("MYSQL_PWD")
    return Dsn(host=url.hostname or "localhost", port=port, user=urllib.parse.unquote(url.username),
               password=password, database=url.path.lstrip("/"),
               unix_socket=query["unix_socket"][0] if "unix_socket" in query else None)

