"""MariaDB, managed (`mariadb`), and any MySQL-protocol server by DSN (`mysql`).

Managed: perflab finds `mariadbd` and `mariadb-install-db` (PATH, /usr/sbin,
or `bin_dir`), makes a private data directory with mariadb-install-db, and
starts `mariadbd --defaults-file=<perflab's option file>`: the option file
perflab writes for each start is the only one read (/etc/mysql is never
read). It listens on a unix socket in a private 0700 directory, and on TCP
127.0.0.1 with a free port only with `listen = "tcp"`. The data directory,
the redo log and the undo tablespaces go where `target.storage` says,
scratch filesystems included, as PostgreSQL's data and WAL do. When perflab
runs as root the server runs as `run_as` (default `mysql`, Debian's
package's user; never root). The server carries a token in its environment
and runs in a session of its own, journaled before it starts
(perflab.targets.serverproc), so the guardian ends it within 5 s of a
SIGKILL of perflab. `resources` (a cgroup) and the host knobs apply as to
PostgreSQL.

External (`mysql`, a `dsn` to MySQL 8 or MariaDB): perflab only connects.
Sessions are read-only (SET SESSION TRANSACTION READ ONLY) and `check`
refuses a workload that writes, unless `allow_destructive = true`; even then
a workload that writes works only in a database of perflab's own,
`perflab_<workload>`, marked as its (perflab.targets.confine).

The Python client is PyMySQL (pure Python: no C library to build, the same
on every machine; `pip install 'perflab[mysql]'`). It serves the `sql`
workload, `check` and the `mysqlstat` collector; the load drivers need the
engine's own MySQL client, which is not written yet.

By job:
- settings.py: what the experiment file says (`[target]`, storage, the dsn);
- managed.py: MariadbTarget, a server perflab starts, owns and stops;
- external.py: MysqlTarget, a server reached by its dsn, and perflab's own
  database there (confine);
- binaries.py: which mariadbd and mariadb-install-db, of which version;
- setting_check.py: target.settings as this mariadbd would take them;
- endpoint.py: how workloads reach the server (PyMySQL), and what a run's
  record keeps of it.
"""

from perflab.targets.mariadb.binaries import find_binaries, server_version, version_label
from perflab.targets.mariadb.endpoint import MysqlEndpoint, MysqlSession, describe_server
from perflab.targets.mariadb.external import MysqlTarget, connect_failure
from perflab.targets.mariadb.managed import CREATED_MARK, MariadbTarget, current_run_as
from perflab.targets.mariadb.setting_check import server_options, setting_problems
from perflab.targets.mariadb.settings import Dsn, MariadbSettings, MysqlSettings, Storage, parse_dsn

__all__ = [
    "CREATED_MARK", "Dsn", "MariadbSettings", "MariadbTarget", "MysqlEndpoint", "MysqlSession", "MysqlSettings",
    "MysqlTarget", "Storage", "connect_failure", "current_run_as", "describe_server", "find_binaries",
    "parse_dsn", "server_options", "server_version", "setting_problems", "version_label",
]
