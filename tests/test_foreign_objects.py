"""perflab never touches what it did not make (issue 28): on a database it did
not create it works only in schemas of its own, marked as its, says what it
left, and `perflab clean` removes exactly that.

A database on the session's server plays the user's own: it holds the
user's tables (named as TPC-C's, TPC-H's, SSB's and pgbench's are), a
function named as perflab's TPC-C procedure, and a view. After tpcb, tpcc,
tpch and ssb runs with allow_destructive = true, every one of them is as it
was, byte for byte; perflab's schemas exist, and `perflab clean DIR --yes`
removes exactly those.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

from perflab.store import take_writer_lock

USER_SETUP = """
CREATE TABLE item (my_id int, note text);
INSERT INTO item VALUES (1, 'the user''s first item'), (2, 'the user''s second item');
CREATE TABLE customer (c_id int PRIMARY KEY, c_name text NOT NULL);
INSERT INTO customer SELECT g, 'customer ' || g FROM generate_series(1, 50) g;
CREATE TABLE lineorder (lo_orderkey int, lo_note text);
INSERT INTO lineorder VALUES (7, 'kept');
CREATE TABLE pgbench_branches (bid int, bbalance int, filler char(88));
INSERT INTO pgbench_branches VALUES (1, 42, 'mine');
CREATE FUNCTION tpcc_new_order(p int) RETURNS int LANGUAGE sql AS 'SELECT p + 1';
CREATE VIEW item_notes AS SELECT my_id, note FROM item WHERE my_id > 0;
"""


def _checksum(conn: Any) -> str:
    """md5 over the contents and definitions of everything outside perflab's
    schemas: each user table's rows in order, every relation, column,
    function and view definition, and the list of schemas."""
    parts: list[str] = []
    schemas = [r[0] for r in conn.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema' "
        "AND nspname NOT LIKE 'perflab\\_%' ORDER BY 1")]
    parts.append(repr(schemas))
    relations = conn.execute(
        "SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = ANY(%s) ORDER BY 1, 2", (schemas,)).fetchall()
    parts.append(repr(relations))
    parts.append(repr(conn.execute(
        "SELECT table_schema, table_name, column_name, data_type, column_default, is_nullable "
        "FROM information_schema.columns WHERE table_schema = ANY(%s) ORDER BY 1, 2, ordinal_position",
        (schemas,)).fetchall()))
    for schema, name, kind in relations:
        if kind == "r":
            parts.append(repr(conn.execute(f'SELECT t::text FROM "{schema}"."{name}" t ORDER BY 1').fetchall()))
        if kind == "v":
            parts.append(conn.execute("SELECT pg_get_viewdef(%s::regclass)", (f'"{schema}"."{name}"',)).fetchone()[0])
    parts.append(repr(conn.execute(
        "SELECT n.nspname, pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = ANY(%s) ORDER BY 1, 2", (schemas,)).fetchall()))
    return hashlib.md5("\n".join(parts).encode()).hexdigest()


def _perflab_schemas(conn: Any) -> dict[str, str]:
    """perflab_* schemas -> the experiment id their marker names ('' when unmarked)."""
    out = {}
    for (name,) in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'perflab\\_%' ORDER BY 1"):
        marked = conn.execute("SELECT to_regclass(%s)", (f"{name}.perflab_owner",)).fetchone()[0]
        out[name] = conn.execute(f"SELECT experiment FROM {name}.perflab_owner").fetchone()[0] if marked else ""
    return out


@pytest.fixture
def user_db(pg_target) -> Iterator[tuple[str, Any]]:
    """A database with the user's own objects: (its dsn, a function that connects to it)."""
    import psycopg

    _, endpoint = pg_target
    name = f"user_{uuid.uuid4().hex[:10]}"
    with endpoint.connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(endpoint.conninfo, dbname=name)

    def connect() -> Any:
        return psycopg.connect(dsn, autocommit=True)

    with connect() as conn:
        conn.execute(USER_SETUP)
    yield dsn, connect
    with endpoint.connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _experiment(path: Path, name: str, target: str, workload: str) -> Path:
    path.write_text(f'[experiment]\nname = "{name}"\n\n[target]\n{target}\n\n[workload]\n{workload}\n')
    return path


def _pg_target(dsn: str) -> str:
    return f'kind = "postgres"\ndsn = "{dsn}"\nallow_destructive = true'


WORKLOADS = {
    "tpcb": 'kind = "tpcb"\nscale = 1\nclients = 2\ntransactions = 100',
    "tpcc": 'kind = "tpcc"\nwarehouses = 1\nload_jobs = 2\nclients = 2\nduration = "1s"',
    "tpch": 'kind = "tpch"\nscale_factor = 0.01\ntests = ["load", "power"]\nqueries = [1, 6]\nload_jobs = 2',
    "ssb": 'kind = "ssb"\nscale_factor = 0.01\nqueries = ["Q1.1", "Q2.1"]\nload_jobs = 2',
}


def _store_rows(out: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(out / "perflab.sqlite") as conn:
        return conn.execute(sql).fetchall()


def test_every_workload_leaves_the_users_objects_byte_for_byte(user_db, workdir, run_cli) -> None:
    dsn, connect = user_db
    with connect() as conn:
        before = _checksum(conn)
    outs = {}
    for kind, settings in WORKLOADS.items():
        exp = _experiment(workdir / f"{kind}.toml", f"foreign-{kind}", _pg_target(dsn), settings)
        outs[kind] = workdir / f"out-{kind}"
        proc = run_cli("run", exp, "--out", outs[kind], "--quiet", "--no-report")
        # the end of the experiment says what it left, where, and how to remove it
        assert f"left schema perflab_{kind}" in proc.stdout, proc.stdout
        assert "dbname=user_" in proc.stdout and f"perflab clean {outs[kind]}" in proc.stdout
    with connect() as conn:
        assert _checksum(conn) == before, "a user's object changed"
        assert conn.execute("SELECT count(*) FROM public.item").fetchone()[0] == 2
        schemas = _perflab_schemas(conn)
        # statements mode calls no PL/pgSQL function, so none is installed
        functions = conn.execute("SELECT count(*) FROM pg_proc WHERE pronamespace = 'perflab_tpcc'::regnamespace"
                                 ).fetchone()[0]
        tpcc_items = conn.execute("SELECT count(*) FROM perflab_tpcc.item").fetchone()[0]
    assert set(schemas) == {f"perflab_{k}" for k in WORKLOADS}
    assert functions == 0 and tpcc_items == 100_000
    for kind, out in outs.items():
        experiment_id = _store_rows(out, "SELECT value FROM meta WHERE key = 'experiment_id'")[0][0]
        assert schemas[f"perflab_{kind}"] == experiment_id
        [(location, name, size)] = _store_rows(out, "SELECT location, name, bytes FROM leftover")
        assert name == f"perflab_{kind}" and "dbname=user_" in location and size > 0

    # without a terminal, clean asks for --yes and removes nothing
    proc = run_cli("clean", outs["tpcb"], check=False)
    assert proc.returncode == 2 and "--yes" in proc.stderr and "Traceback" not in proc.stderr
    with connect() as conn:
        assert "perflab_tpcb" in _perflab_schemas(conn)

    for kind, out in outs.items():
        proc = run_cli("clean", out, "--yes")
        assert f"removed schema perflab_{kind}" in proc.stdout, proc.stdout
        assert _store_rows(out, "SELECT removed_at IS NOT NULL FROM leftover") == [(1,)]
    with connect() as conn:
        assert _perflab_schemas(conn) == {}
        assert _checksum(conn) == before, "clean touched a user's object"


def test_a_schema_of_that_name_not_marked_as_perflabs_is_refused(user_db, workdir, run_cli) -> None:
    dsn, connect = user_db
    with connect() as conn:
        conn.execute("CREATE SCHEMA perflab_tpcc; CREATE TABLE perflab_tpcc.item (x int); "
                     "INSERT INTO perflab_tpcc.item VALUES (1), (2), (3)")
        before = _checksum(conn), conn.execute("SELECT x FROM perflab_tpcc.item ORDER BY 1").fetchall()
    exp = _experiment(workdir / "e.toml", "unmarked", _pg_target(dsn), WORKLOADS["tpcc"])
    proc = run_cli("run", exp, "--out", workdir / "out", "--quiet", "--no-report", check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "perflab_tpcc" in proc.stderr and "not marked as perflab's" in proc.stderr
    assert "Traceback" not in proc.stderr
    with connect() as conn:
        after = _checksum(conn), conn.execute("SELECT x FROM perflab_tpcc.item ORDER BY 1").fetchall()
        tables = conn.execute("SELECT relname FROM pg_class WHERE relnamespace = 'perflab_tpcc'::regnamespace "
                              "ORDER BY 1").fetchall()
    assert after == before and tables == [("item",)]
    assert _store_rows(workdir / "out", "SELECT count(*) FROM leftover") == [(0,)]


def test_a_schema_another_running_experiment_uses_is_refused(user_db, workdir, run_cli) -> None:
    """A running experiment holds its schema's advisory lock: a second one on
    the same database stops (exit 2) instead of loading over its tables."""
    from perflab.targets.confine import LOCK_CLASS

    dsn, connect = user_db
    with connect() as holder:
        assert holder.execute("SELECT pg_try_advisory_lock(%s, hashtext('perflab_tpcb'))", (LOCK_CLASS,)).fetchone()[0]
        exp = _experiment(workdir / "e.toml", "second", _pg_target(dsn), WORKLOADS["tpcb"])
        proc = run_cli("run", exp, "--out", workdir / "out", "--quiet", "--no-report", check=False)
    assert proc.returncode == 2 and "in use by another running perflab" in proc.stderr, proc.stderr
    with connect() as conn:
        assert _perflab_schemas(conn) == {}


def test_a_schema_taken_over_is_not_cleaned_by_the_older_experiment(user_db, workdir, run_cli) -> None:
    dsn, connect = user_db
    exp = _experiment(workdir / "e.toml", "takeover", _pg_target(dsn), WORKLOADS["tpcb"])
    a, b = workdir / "a", workdir / "b"
    run_cli("run", exp, "--out", a, "--quiet", "--no-report")
    proc = run_cli("run", exp, "--out", b, "--quiet", "--no-report")
    assert "took over schema perflab_tpcb" in proc.stdout
    b_id = _store_rows(b, "SELECT value FROM meta WHERE key = 'experiment_id'")[0][0]

    proc = run_cli("clean", a, "--yes", check=False)
    assert proc.returncode == 1 and "took it over" in proc.stderr
    with connect() as conn:
        assert _perflab_schemas(conn) == {"perflab_tpcb": b_id}
        # a user's view on one of perflab's tables: dropping the schema would drop it too
        conn.execute("CREATE VIEW public.my_accounts AS SELECT aid FROM perflab_tpcb.pgbench_accounts LIMIT 1")
    proc = run_cli("clean", b, "--yes", check=False)
    assert proc.returncode == 1 and "my_accounts" in proc.stderr
    with connect() as conn:
        assert conn.execute("SELECT to_regclass('public.my_accounts')").fetchone()[0] is not None
        conn.execute("DROP VIEW public.my_accounts")

    # an experiment that is running (its perflab holds the store's lock) is not cleaned
    fd = take_writer_lock(b)
    try:
        proc = run_cli("clean", b, "--yes", check=False)
    finally:
        os.close(fd)
    assert proc.returncode == 2 and "nothing was removed" in proc.stderr, proc.stderr
    with connect() as conn:
        assert "perflab_tpcb" in _perflab_schemas(conn)

    # the report says what was left, and how to remove it
    run_cli("report", b)
    html = (b / "report.html").read_text()
    assert "Left outside the output directory" in html and "perflab_tpcb" in html and "perflab clean" in html
    run_cli("clean", b, "--yes")
    with connect() as conn:
        assert _perflab_schemas(conn) == {}


def test_clean_removes_a_kept_managed_cluster(workdir, run_cli) -> None:
    """keep_data = true keeps the cluster perflab made; clean removes it, and
    the results stay."""
    exp = _experiment(workdir / "e.toml", "kept-cluster", 'kind = "postgres"\nkeep_data = true',
                      WORKLOADS["tpcb"])
    out = workdir / "out"
    proc = run_cli("run", exp, "--out", out, "--quiet", "--no-report")
    assert "kept the target's data" in proc.stdout and "left schema" not in proc.stdout
    [pgdata] = [p for p in out.glob("targets/postgres-*/pgdata") if (p / "PG_VERSION").exists()]
    proc = run_cli("clean", out, "--yes")
    assert f"removed the target's data: {pgdata}" in proc.stdout, proc.stdout
    assert not pgdata.exists() and (out / "perflab.sqlite").exists()
    assert "nothing to remove" in run_cli("clean", out, "--yes").stdout


# ------------------------------------------------------------------ DuckDB


def _duck_user_file(path: Path) -> None:
    import duckdb

    with duckdb.connect(str(path)) as db:
        db.execute("CREATE TABLE lineitem (l_note VARCHAR); INSERT INTO lineitem VALUES ('mine'), ('also mine')")
        db.execute("CREATE TABLE nation (n_name VARCHAR); INSERT INTO nation VALUES ('Atlantis')")


def _duck_main(path: Path) -> list[Any]:
    import duckdb

    with duckdb.connect(str(path), read_only=True) as db:
        tables = db.execute("SELECT schema_name, table_name, sql FROM duckdb_tables() ORDER BY ALL").fetchall()
        rows = [db.execute(f"SELECT * FROM main.{t} ORDER BY ALL").fetchall() for t in ("lineitem", "nation")]
    return [tables, rows]


def test_duckdb_file_perflab_did_not_create(workdir, run_cli) -> None:
    import duckdb

    db = workdir / "mine.duckdb"
    _duck_user_file(db)
    before = _duck_main(db)
    target = f'kind = "duckdb"\npath = "{db}"\nallow_destructive = true\nthreads = 2'
    exp = _experiment(workdir / "e.toml", "duck", target, WORKLOADS["tpch"])
    out = workdir / "out"
    proc = run_cli("run", exp, "--out", out, "--quiet", "--no-report")
    assert "left schema perflab_tpch" in proc.stdout
    after = _duck_main(db)
    assert [t for t in after[0] if t[0] == "main"] == before[0] and after[1] == before[1]
    assert {t[1] for t in after[0] if t[0] == "perflab_tpch"} >= {"lineitem", "nation", "perflab_owner"}
    assert db.exists()  # the user's file stays, whatever keep_data says

    run_cli("clean", out, "--yes")
    assert _duck_main(db) == before

    # a schema of that name the user made: refused, nothing touched
    with duckdb.connect(str(db)) as conn:
        conn.execute("CREATE SCHEMA perflab_tpch; CREATE TABLE perflab_tpch.x (y INT)")
    proc = run_cli("run", exp, "--out", workdir / "out2", "--quiet", "--no-report", check=False)
    assert proc.returncode == 2 and "perflab_tpch" in proc.stderr and "Traceback" not in proc.stderr
    with duckdb.connect(str(db), read_only=True) as conn:
        assert conn.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'perflab_tpch'"
                            ).fetchall() == [("x",)]


def test_clean_removes_kept_data_perflab_made(workdir, run_cli) -> None:
    """keep_data = true keeps a DuckDB file perflab created; clean removes it
    (and its mark), and only it."""
    db = workdir / "made.duckdb"
    target = f'kind = "duckdb"\npath = "{db}"\nkeep_data = true\nthreads = 2'
    exp = _experiment(workdir / "e.toml", "kept", target, WORKLOADS["ssb"])
    out = workdir / "out"
    run_cli("run", exp, "--out", out, "--quiet", "--no-report")
    assert db.exists()
    proc = run_cli("clean", out, "--yes")
    assert f"removed the target's data: {db}" in proc.stdout
    assert not db.exists() and not list(workdir.glob("made.duckdb*"))
    assert (out / "perflab.sqlite").exists()  # the results stay
