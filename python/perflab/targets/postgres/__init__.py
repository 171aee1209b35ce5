"""PostgreSQL, managed or external: the `postgres` target kind.

By job:
- settings.py: what the experiment file says (`[target]`, storage);
- target.py: PostgresTarget, the kind the registry names; an object of it is
  a ManagedPostgres or an ExternalPostgres, as the settings ask;
- managed.py: a server perflab starts (initdb, pg_ctl, its settings, cgroup
  and scratch filesystems), owns and stops;
- external.py: a server reached by its dsn, read-only unless allowed, and
  perflab's own schema there (confine);
- binaries.py: which binaries, of which version (target.version);
- setting_check.py: target.settings as this PostgreSQL build would take them;
- homes.py: where a managed cluster lives, and the sweep of orphaned homes;
- postmaster.py: the server's processes, its lock file, the guardian's undo;
- users.py: PostgreSQL's programs run as the server's OS user (whom
  perflab.targets.serverhome picks, as for every server kind);
- endpoint.py: how workloads reach the server.
"""

from perflab.targets.postgres.binaries import (
    PYPI_PREFIX,
    candidate_bin_dirs,
    find_bin_dir,
    fmt_version,
    installed_servers,
    pypi_bin_dir,
    server_label,
    version_label,
    version_of,
    wheel_bin_dir,
)
from perflab.targets.postgres.endpoint import PostgresEndpoint
from perflab.targets.postgres.external import ExternalPostgres, connect_failure
from perflab.targets.postgres.homes import CREATED_MARK, sweep_orphan_homes
from perflab.targets.postgres.managed import SUPERUSER, ManagedPostgres, server_cgroup_name
from perflab.targets.postgres.postmaster import process_role, undo_server
from perflab.targets.postgres.setting_check import probe_setting, setting_problems
from perflab.targets.postgres.settings import PostgresSettings, Storage
from perflab.targets.postgres.target import PostgresTarget
from perflab.targets.serverhome import resolve_run_as

__all__ = [
    "CREATED_MARK", "PYPI_PREFIX", "SUPERUSER", "ExternalPostgres", "ManagedPostgres", "PostgresEndpoint",
    "PostgresSettings", "PostgresTarget", "Storage", "candidate_bin_dirs", "connect_failure", "find_bin_dir",
    "fmt_version", "installed_servers", "probe_setting", "process_role", "pypi_bin_dir",
    "resolve_run_as", "server_cgroup_name", "server_label", "setting_problems",
    "sweep_orphan_homes", "undo_server", "version_label", "version_of", "wheel_bin_dir",
]
