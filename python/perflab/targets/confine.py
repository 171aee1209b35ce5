"""perflab's own schemas in a database it did not create.

On an external PostgreSQL server (`dsn` with `allow_destructive = true`), and
in a DuckDB file perflab did not create, a workload that writes works only
inside a schema of perflab's own, one per workload kind: `perflab_tpcc`,
`perflab_tpch`, `perflab_ssb`, `perflab_tpcb`, `perflab_sql`,
`perflab_queries` (`schema_for`). Every session the workload opens has that
schema, and no other, as its search_path, so its tables, indexes and
functions go there, and an unqualified name never reaches the user's own.

A schema is perflab's when it holds the marker table `perflab_owner`: one
row naming the experiment that owns it now (the store's experiment id, its
output directory and host), when it was made and when it was last claimed.
perflab makes the schema and its marker in one transaction, so a schema of
that name without the marker is someone else's: perflab refuses it (exit 2,
naming it) and touches nothing. A schema marked by another experiment is
taken over (the marker then names this one), so `perflab clean` of the older
experiment leaves it alone. While an experiment uses a schema on PostgreSQL
it holds a session advisory lock on its name, so a second experiment on the
same database is refused instead of loading over the first one's tables.

`perflab clean DIR` drops a schema only while its marker still names DIR's
experiment, and never when an object outside it depends on it (a user's view
on one of perflab's tables, say): DROP SCHEMA ... CASCADE would take that
object with it.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from perflab.endpoints import one_row
from perflab.errors import UserError

if TYPE_CHECKING:
    import duckdb
    import psycopg

    from perflab.endpoints import Sessionlike

MARKER = "perflab_owner"
PREFIX = "perflab_"
# pg_advisory_lock's first key: perflab's schemas (the second is hashtext(name)).
LOCK_CLASS = 0x70666C62  # "pflb"
_NAME = re.compile(r"^perflab_[a-z][a-z0-9_]*$")


def schema_for(workload_kind: str) -> str:
    """The schema a workload of `workload_kind` writes in, on a database perflab did not create."""
    name = PREFIX + workload_kind.lower()
    if not _NAME.match(name):
        raise ValueError(f"no schema name for workload kind {workload_kind!r}")
    return name


@dataclass(frozen=True)
class Owner:
    """The experiment that claims a schema: the store's experiment id and its output directory."""

    experiment: str
    out_dir: str


@dataclass
class Leftover:
    """What perflab made outside the output directory and leaves after the
    experiment: a schema (`name`) in a database it did not create (`where`,
    any password masked), its size when measured (None: not known)."""

    kind: str
    where: str
    name: str
    bytes: int | None
    objects: int
    detail: str


@dataclass
class Removal:
    """What `perflab clean` did with one leftover: removed, or why not."""

    removed: bool
    text: str


def _refused(name: str, where: str, why: str) -> UserError:
    return UserError(
        f"{where}: a schema named {name} exists and {why}; perflab works only in schemas of its own and "
        "touched nothing",
        f"drop or rename that schema if it is not needed, or run against another database "
        f"(perflab's marked schemas hold a table {MARKER})",
    )


def _owned_marker(found: tuple[str, str, str] | None, name: str, where: str) -> tuple[str, str, str]:
    """The marker of an existing schema `name` (as the database's reader
    gives it); a schema without one is someone else's: a UserError, and
    nothing is touched (every database kind decides the same way)."""
    if found is None:
        raise _refused(name, where, f"is not marked as perflab's (it has no table {MARKER})")
    return found


def _took_over(name: str, found: tuple[str, str, str]) -> str:
    return (f"took over schema {name} from experiment {found[0]} ({found[1]} on {found[2] or '?'}); "
            "`perflab clean` of that experiment leaves it now")


# ------------------------------------------------------------------ PostgreSQL

_PG_DEPENDENTS = """
WITH ours AS (
    SELECT 'pg_class'::regclass AS classid, c.oid FROM pg_class c WHERE c.relnamespace = %(ns)s
    UNION ALL SELECT 'pg_type'::regclass, t.oid FROM pg_type t WHERE t.typnamespace = %(ns)s
    UNION ALL SELECT 'pg_proc'::regclass, p.oid FROM pg_proc p WHERE p.pronamespace = %(ns)s
    UNION ALL SELECT 'pg_namespace'::regclass, %(ns)s::oid
), dependents AS (
    SELECT d.classid, d.objid, d.objsubid,
           CASE d.classid
               WHEN 'pg_rewrite'::regclass THEN (SELECT c.relnamespace FROM pg_rewrite r
                                                 JOIN pg_class c ON c.oid = r.ev_class WHERE r.oid = d.objid)
               WHEN 'pg_trigger'::regclass THEN (SELECT c.relnamespace FROM pg_trigger g
                                                 JOIN pg_class c ON c.oid = g.tgrelid WHERE g.oid = d.objid)
               WHEN 'pg_attrdef'::regclass THEN (SELECT c.relnamespace FROM pg_attrdef a
                                                 JOIN pg_class c ON c.oid = a.adrelid WHERE a.oid = d.objid)
               WHEN 'pg_policy'::regclass THEN (SELECT c.relnamespace FROM pg_policy p
                                                JOIN pg_class c ON c.oid = p.polrelid WHERE p.oid = d.objid)
               ELSE (SELECT n.oid FROM pg_namespace n
                     WHERE n.nspname = (pg_identify_object(d.classid, d.objid, 0)).schema)
           END AS ns
    FROM pg_depend d JOIN ours ON d.refclassid = ours.classid AND d.refobjid = ours.oid
    WHERE d.deptype IN ('n', 'a')
)
SELECT DISTINCT pg_describe_object(classid, objid, objsubid) FROM dependents
WHERE ns IS DISTINCT FROM %(ns)s ORDER BY 1 LIMIT 20
"""


def _pg_namespace(conn: psycopg.Connection[Any], name: str) -> int | None:
    row = conn.execute("SELECT oid FROM pg_namespace WHERE nspname = %s", (name,)).fetchone()
    return int(row[0]) if row else None


def _pg_marker(conn: psycopg.Connection[Any], name: str) -> tuple[str, str, str] | None:
    """(experiment, out_dir, host) of the marker in schema `name`, or None
    when the schema holds no readable perflab marker."""
    from psycopg import sql

    if one_row(conn.execute("SELECT to_regclass(format('%%I.%%I', %s::text, %s::text))", (name, MARKER)))[0] is None:
        return None
    try:
        with conn.transaction():  # a savepoint: a table of that name with other columns is no marker
            row = conn.execute(sql.SQL("SELECT experiment, out_dir, host FROM {}.{} LIMIT 1").format(
                sql.Identifier(name), sql.Identifier(MARKER))).fetchone()
    except Exception:
        return None
    return None if row is None else (str(row[0]), str(row[1]), str(row[2] or ""))


def pg_outside_dependents(conn: psycopg.Connection[Any], name: str) -> list[str]:
    """Objects outside schema `name` that depend on an object in it (DROP
    ... CASCADE would drop them too)."""
    ns = _pg_namespace(conn, name)
    if ns is None:
        return []
    return [str(r[0]) for r in conn.execute(_PG_DEPENDENTS, {"ns": ns}).fetchall()]


def pg_try_lock(conn: psycopg.Connection[Any], name: str) -> bool:
    """The session advisory lock of schema `name` (held until `conn` closes)."""
    return bool(one_row(conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (LOCK_CLASS, name)))[0])


def pg_claim(conn: psycopg.Connection[Any], name: str, owner: Owner, where: str) -> tuple[bool, str]:
    """Make schema `name` this experiment's on the autocommit psycopg
    connection `conn` (which must hold its advisory lock): create it with its
    marker, or take over one marked by another experiment. Returns whether it
    was made now (so it holds no data set yet), and what was done, for the
    run's events. A schema of that name that is not marked as
    perflab's, or that an object outside it depends on, is a UserError, and
    nothing is changed."""
    from psycopg import errors, sql

    ident = sql.Identifier(name)
    marker = sql.SQL("{}.{}").format(ident, sql.Identifier(MARKER))
    try:
        with conn.transaction():
            if _pg_namespace(conn, name) is None:
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
                conn.execute(sql.SQL("COMMENT ON SCHEMA {} IS {}").format(ident, sql.Literal(
                    "made by perflab; it may drop and recreate everything in this schema; remove it with "
                    "`perflab clean` on the output directory its table perflab_owner names")))
                conn.execute(sql.SQL(
                    "CREATE TABLE {} (experiment text NOT NULL, out_dir text NOT NULL, host text, "
                    "made_at timestamptz NOT NULL DEFAULT now(), claimed_at timestamptz NOT NULL DEFAULT now())"
                ).format(marker))
                conn.execute(sql.SQL("INSERT INTO {} (experiment, out_dir, host) VALUES (%s, %s, %s)").format(marker),
                             (owner.experiment, owner.out_dir, socket.gethostname()))
                return True, f"made schema {name} (marked as this experiment's)"
            found = _owned_marker(_pg_marker(conn, name), name, where)
            outside = pg_outside_dependents(conn, name)
            if outside:
                raise UserError(
                    f"{where}: objects outside perflab's schema {name} depend on it ({', '.join(outside)}); "
                    "perflab drops and recreates its tables there and would take them along; nothing was touched",
                    f"drop those objects, or drop schema {name} yourself",
                )
            if found[0] == owner.experiment:
                return False, f"schema {name} is this experiment's (reused)"
            conn.execute(sql.SQL("UPDATE {} SET experiment = %s, out_dir = %s, host = %s, claimed_at = now()")
                         .format(marker), (owner.experiment, owner.out_dir, socket.gethostname()))
            return False, _took_over(name, found)
    except errors.InsufficientPrivilege as exc:
        raise UserError(
            f"{where}: cannot make perflab's schema {name}: {str(exc).strip().splitlines()[0]}",
            "let the dsn's user create schemas in that database (GRANT CREATE ON DATABASE ...), or give "
            "a database where it may",
        ) from None


def pg_measure(conn: psycopg.Connection[Any], name: str, where: str) -> Leftover | None:
    """Schema `name` as it is now: its tables' total size (with indexes and
    TOAST), how many tables and functions; None when it is gone."""
    ns = _pg_namespace(conn, name)
    if ns is None:
        return None
    tables, size = one_row(conn.execute(
        "SELECT count(*), coalesce(sum(pg_total_relation_size(oid)), 0) FROM pg_class "
        "WHERE relnamespace = %s AND relkind IN ('r', 'p', 'm', 'S')", (ns,)))
    functions = one_row(conn.execute("SELECT count(*) FROM pg_proc WHERE pronamespace = %s", (ns,)))[0]
    detail = f"{tables} tables" + (f", {functions} functions" if functions else "")
    return Leftover("schema", where, name, int(size), int(tables) + int(functions), detail)


def pg_remove(conn: psycopg.Connection[Any], name: str, owner: Owner, where: str) -> Removal:
    """Drop schema `name` if its marker still names `owner`'s experiment, no
    running perflab holds it, and nothing outside it depends on it."""
    from psycopg import sql

    if not pg_try_lock(conn, name):
        return Removal(False, f"schema {name} in {where}: not removed: a running perflab experiment uses it")
    try:
        with conn.transaction():
            if _pg_namespace(conn, name) is None:
                return Removal(True, f"schema {name} in {where}: already gone")
            refused = _not_owned(_pg_marker(conn, name), owner, name, where)
            if refused is not None:
                return refused
            outside = pg_outside_dependents(conn, name)
            if outside:
                return Removal(False, f"schema {name} in {where}: not removed: objects outside it depend on it "
                                      f"({', '.join(outside)}); drop them first")
            measured = pg_measure(conn, name, where)
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
        size = f" ({format_bytes(measured.bytes)})" if measured and measured.bytes is not None else ""
        return Removal(True, f"removed schema {name}{size} from {where}")
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (LOCK_CLASS, name))


# ------------------------------------------------------------------ DuckDB


def _duck_schema_exists(conn: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(conn.execute(
        "SELECT count(*) FROM duckdb_schemas() WHERE database_name = current_database() AND schema_name = ?",
        [name]).fetchall()[0][0])


def _duck_marker(conn: duckdb.DuckDBPyConnection, name: str) -> tuple[str, str, str] | None:
    has = conn.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = ? "
        "AND table_name = ?", [name, MARKER]).fetchall()[0][0]
    if not has:
        return None
    try:
        rows = conn.execute(f'SELECT experiment, out_dir, host FROM "{name}"."{MARKER}" LIMIT 1').fetchall()
    except Exception:
        return None
    return (str(rows[0][0]), str(rows[0][1]), str(rows[0][2] or "")) if rows else None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def duck_claim(conn: duckdb.DuckDBPyConnection, name: str, owner: Owner, where: str) -> tuple[bool, str]:
    """As `pg_claim`, in a DuckDB database (a connection perflab opened)."""
    if not _NAME.match(name):
        raise ValueError(name)
    conn.execute("BEGIN TRANSACTION")
    try:
        if not _duck_schema_exists(conn, name):
            conn.execute(f'CREATE SCHEMA "{name}"')
            conn.execute(f'CREATE TABLE "{name}"."{MARKER}" (experiment VARCHAR NOT NULL, out_dir VARCHAR NOT NULL, '
                         "host VARCHAR, made_at VARCHAR NOT NULL, claimed_at VARCHAR NOT NULL)")
            conn.execute(f'INSERT INTO "{name}"."{MARKER}" VALUES (?, ?, ?, ?, ?)',
                         [owner.experiment, owner.out_dir, socket.gethostname(), _now(), _now()])
            done = True, f"made schema {name} (marked as this experiment's)"
        else:
            found = _owned_marker(_duck_marker(conn, name), name, where)
            if found[0] == owner.experiment:
                done = False, f"schema {name} is this experiment's (reused)"
            else:
                conn.execute(f'UPDATE "{name}"."{MARKER}" SET experiment = ?, out_dir = ?, host = ?, claimed_at = ?',
                             [owner.experiment, owner.out_dir, socket.gethostname(), _now()])
                done = False, _took_over(name, found)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return done


def duck_measure(conn: duckdb.DuckDBPyConnection, name: str, where: str) -> Leftover | None:
    """Schema `name` in a DuckDB database: its tables and their rows (DuckDB
    does not say how many bytes a table takes); None when it is gone."""
    if not _duck_schema_exists(conn, name):
        return None
    tables, rows = conn.execute(
        "SELECT count(*), coalesce(sum(estimated_size), 0) FROM duckdb_tables() "
        "WHERE database_name = current_database() AND schema_name = ?", [name]).fetchall()[0]
    return Leftover("schema", where, name, None, int(tables), f"{tables} tables, about {int(rows):,} rows")


def duck_remove(conn: duckdb.DuckDBPyConnection, name: str, owner: Owner, where: str) -> Removal:
    if not _duck_schema_exists(conn, name):
        return Removal(True, f"schema {name} in {where}: already gone")
    refused = _not_owned(_duck_marker(conn, name), owner, name, where)
    if refused is not None:
        return refused
    conn.execute(f'DROP SCHEMA "{name}" CASCADE')
    conn.execute("CHECKPOINT")
    return Removal(True, f"removed schema {name} from {where}")


# ------------------------------------------------------------------ MySQL and MariaDB
#
# A MySQL "schema" is a database: perflab's own is the database `perflab_<workload>`,
# marked by its table perflab_owner. MySQL's DDL is not transactional: the
# database is made first, then its marker, so a claim cut short between the
# two leaves an unmarked database that the next claim refuses (the safe side:
# the user drops it). A named lock (GET_LOCK, held by the claiming session)
# keeps a second experiment out while one uses it.


def _my_quote(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(name)
    return f"`{name}`"


def my_try_lock(conn: Sessionlike, name: str) -> bool:
    """The session's named lock on database `name` (held until `conn` closes)."""
    row = conn.execute("SELECT GET_LOCK(%s, 0)", (f"perflab:{name}",)).fetchone()
    return bool(row and row[0] == 1)


def _my_exists(conn: Sessionlike, name: str) -> bool:
    return conn.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
                        (name,)).fetchone() is not None


def _my_marker(conn: Sessionlike, name: str) -> tuple[str, str, str] | None:
    has = conn.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                       (name, MARKER)).fetchone()
    if has is None:
        return None
    try:
        row = conn.execute(f"SELECT experiment, out_dir, host FROM {_my_quote(name)}.`{MARKER}` LIMIT 1").fetchone()
    except Exception:
        return None  # a table of that name with other columns is no marker
    return None if row is None else (str(row[0]), str(row[1]), str(row[2] or ""))


def my_claim(conn: Sessionlike, name: str, owner: Owner, where: str) -> tuple[bool, str]:
    """As `pg_claim`, for database `name` on a MySQL or MariaDB server (the
    session `conn` holds its named lock)."""
    marker = f"{_my_quote(name)}.`{MARKER}`"
    try:
        if not _my_exists(conn, name):
            conn.execute(f"CREATE DATABASE {_my_quote(name)} CHARACTER SET utf8mb4")
            conn.execute(f"CREATE TABLE {marker} (experiment varchar(255) NOT NULL, out_dir text NOT NULL, "
                         "host varchar(255), made_at datetime NOT NULL, claimed_at datetime NOT NULL) "
                         "COMMENT 'made by perflab; remove with `perflab clean` on the output directory named here'")
            conn.execute(f"INSERT INTO {marker} VALUES (%s, %s, %s, UTC_TIMESTAMP(), UTC_TIMESTAMP())",
                         (owner.experiment, owner.out_dir, socket.gethostname()))
            return True, f"made database {name} (marked as this experiment's)"
        found = _owned_marker(_my_marker(conn, name), name, where)
        if found[0] == owner.experiment:
            return False, f"database {name} is this experiment's (reused)"
        conn.execute(f"UPDATE {marker} SET experiment = %s, out_dir = %s, host = %s, claimed_at = UTC_TIMESTAMP()",
                     (owner.experiment, owner.out_dir, socket.gethostname()))
        return False, _took_over(name, found)
    except UserError:
        raise
    except Exception as exc:
        if "denied" in str(exc).lower():
            raise UserError(f"{where}: cannot make perflab's database {name}: {str(exc).strip()}",
                            "let the dsn's user create databases named perflab_% (GRANT ALL ON `perflab\\_%`.* "
                            "TO ...), or give a server where it may") from None
        raise


def my_measure(conn: Sessionlike, name: str, where: str) -> Leftover | None:
    """Database `name` as it is now: its tables' data and index bytes; None when it is gone."""
    if not _my_exists(conn, name):
        return None
    tables, size = conn.execute(
        "SELECT count(*), coalesce(sum(data_length + index_length), 0) FROM information_schema.tables "
        "WHERE table_schema = %s", (name,)).fetchone()
    return Leftover("schema", where, name, int(size), int(tables), f"{tables} tables")


def my_remove(conn: Sessionlike, name: str, owner: Owner, where: str) -> Removal:
    """Drop database `name` if its marker still names `owner`'s experiment
    and no running perflab holds it."""
    if not my_try_lock(conn, name):
        return Removal(False, f"database {name} in {where}: not removed: a running perflab experiment uses it")
    try:
        if not _my_exists(conn, name):
            return Removal(True, f"database {name} in {where}: already gone")
        refused = _not_owned(_my_marker(conn, name), owner, name, where)
        if refused is not None:
            return refused
        measured = my_measure(conn, name, where)
        conn.execute(f"DROP DATABASE {_my_quote(name)}")
        size = f" ({format_bytes(measured.bytes)})" if measured and measured.bytes is not None else ""
        return Removal(True, f"removed database {name}{size} from {where}")
    finally:
        conn.execute("SELECT RELEASE_LOCK(%s)", (f"perflab:{name}",))


def _not_owned(found: tuple[str, str, str] | None, owner: Owner, name: str, where: str) -> Removal | None:
    """Why `clean` leaves schema `name` (its marker `found`, as the database's
    reader gives it): no longer marked, or marked by another experiment now;
    None when it is still `owner`'s."""
    if found is None:
        return Removal(False, f"schema {name} in {where}: not removed: it is no longer marked as perflab's")
    if found[0] != owner.experiment:
        return Removal(False, f"schema {name} in {where}: not removed: experiment {found[0]} "
                              f"({found[1]} on {found[2] or '?'}) took it over since")
    return None


def claimed_leftovers(claims: Mapping[str, tuple[Any, Any]], measure: Callable[[Any, str, str], Leftover | None],
                      where: str) -> list[Leftover]:
    """What a target's claimed schemas (or databases) hold now: each measured
    (pg_measure, my_measure) on the session that holds its lock; one that is
    gone is left out. `claims`: schema -> (session, its confined endpoint)."""
    return [found for schema, (conn, _) in claims.items() if (found := measure(conn, schema, where)) is not None]


def format_bytes(n: int | None) -> str:
    if n is None:
        return "size not known"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
