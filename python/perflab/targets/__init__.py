"""Targets: the systems under test. One module per kind, one registry line each."""

from perflab.registry import Registry

TARGETS = Registry("target")
TARGETS.register(
    "postgres",
    "perflab.targets.postgres:PostgresTarget",
    "PostgreSQL: managed (initdb/pg_ctl by perflab) or external by dsn",
)
TARGETS.register(
    "mariadb",
    "perflab.targets.mariadb:MariadbTarget",
    "MariaDB, managed: mariadb-install-db and mariadbd by perflab, its own option file",
    needs=("pymysql",),
)
TARGETS.register(
    "mysql",
    "perflab.targets.mariadb:MysqlTarget",
    "an external MySQL 8 or MariaDB server by dsn (read-only unless allow_destructive)",
    needs=("pymysql",),
)
TARGETS.register(
    "duckdb",
    "perflab.targets.duckdb:DuckDbTarget",
    "DuckDB, embedded in perflab's process: a database file, no server",
    needs=("duckdb",),
)
TARGETS.register(
    "nginx",
    "perflab.targets.nginx:NginxTarget",
    "nginx from PATH, managed: configuration from target.settings, 127.0.0.1 on a free port",
)
TARGETS.register(
    "apache",
    "perflab.targets.apache:ApacheTarget",
    "Apache httpd 2.4, managed: its own configuration from target.settings (mpm prefork, worker or event)",
)
TARGETS.register(
    "lighttpd",
    "perflab.targets.lighttpd:LighttpdTarget",
    "lighttpd 1.4, managed: one process, one event loop, its own configuration from target.settings",
)
TARGETS.register(
    "h2o",
    "perflab.targets.h2o:H2oTarget",
    "h2o 2.2, managed: num_threads event loops, its own YAML configuration from target.settings",
)
TARGETS.register(
    "process",
    "perflab.targets.process:ProcessTarget",
    "any web server started from a command line with {port} and {root}, ready when a URL answers",
)
TARGETS.register(
    "http",
    "perflab.targets.http:HttpTarget",
    "an external web server at a loopback base URL (read-only: the file set must be there)",
)
TARGETS.register(
    "router",
    "perflab.targets.router:RouterTarget",
    "a Linux router between a client and a server namespace, with netfilter rule sets (root)",
)
