"""The store's SQLite schema (DESIGN.md's tables), how a connection to it is
opened, one transaction on it, and the upgrade of an older store in place."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from perflab.errors import DiskFull

SQLITE_FULL = 13
# 2: query.started_s; 3: attempt (earlier attempts of a retried run); 4: query
# energy; 5: session (each perflab that ran the experiment) and effect (what a
# run changed in the target's data, recorded before it changes it); 6:
# leftover (what the experiment made outside its output directory, for
# `perflab clean`) and meta's experiment_id. Older stores are upgraded in
# place when opened.
SCHEMA_VERSION = 6
SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE experiment (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    name TEXT NOT NULL,
    spec_text TEXT NOT NULL,          -- the experiment file as given, passwords masked
    spec_path TEXT,
    seed INTEGER NOT NULL,            -- the plan's seed (random order)
    factors_json TEXT NOT NULL,       -- factor paths in file order
    created_at TEXT NOT NULL,         -- UTC ISO 8601
    host_json TEXT NOT NULL           -- kernel, CPU, cores, memory, versions
);
CREATE TABLE run (
    id INTEGER PRIMARY KEY,           -- the run's number in the plan
    combination INTEGER NOT NULL,
    repetition INTEGER NOT NULL,
    factors_json TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('planned', 'running', 'done', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    started_at TEXT,                  -- wall time, once per run (UTC ISO 8601)
    ended_at TEXT,
    t0_monotonic_ns INTEGER,          -- the run's origin on CLOCK_MONOTONIC
    seconds REAL,
    error TEXT,
    log_tail TEXT,
    flags_json TEXT NOT NULL DEFAULT '[]',
    headline_json TEXT NOT NULL DEFAULT '[]',
    target_json TEXT                  -- target.describe(): version, effective settings, paths
);
CREATE TABLE metric (
    run_id INTEGER NOT NULL REFERENCES run(id),
    name TEXT NOT NULL,
    value REAL,
    unit TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    higher_is_better INTEGER,
    method TEXT NOT NULL DEFAULT 'measured',  -- how it was estimated, if it was
    PRIMARY KEY (run_id, name)
);
CREATE TABLE series (
    run_id INTEGER NOT NULL REFERENCES run(id),
    source TEXT NOT NULL,
    name TEXT NOT NULL,
    t REAL NOT NULL,                  -- seconds since the run's t0 (monotonic)
    value REAL
);
CREATE INDEX series_by_run ON series (run_id, source, name, t);
CREATE TABLE histogram (
    run_id INTEGER NOT NULL REFERENCES run(id),
    name TEXT NOT NULL,
    unit TEXT NOT NULL,
    encoding TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE query (
    run_id INTEGER NOT NULL REFERENCES run(id),
    stream INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    query TEXT NOT NULL,
    seconds REAL,
    status TEXT NOT NULL,             -- ok | error | timeout
    text TEXT,                        -- the statement as run (parameters substituted)
    error TEXT,
    started_s REAL,                   -- start on the run's clock (s since its t0)
    energy_j REAL,                    -- energy over the query's interval (collect.energy), all components
    energy_above_idle_j REAL,         -- the same less the idle baseline's power x the query's time
    energy_json TEXT,                 -- {component: joules} over the interval
    energy_source TEXT                -- rapl | perf | model (the method is the run's energy.joules metric)
);
CREATE INDEX query_by_run ON query (run_id, stream, seq);
CREATE TABLE event (
    run_id INTEGER,                   -- NULL: the experiment as a whole
    t REAL,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE TABLE attempt (              -- an earlier attempt of a run that was retried
    run_id INTEGER NOT NULL REFERENCES run(id),
    attempt INTEGER NOT NULL,
    status TEXT NOT NULL,
    started_at TEXT,
    ended_at TEXT,
    seconds REAL,
    error TEXT,
    log_tail TEXT,
    files TEXT,                       -- where its per-run files were kept (relative to the output dir)
    PRIMARY KEY (run_id, attempt)
);
CREATE TABLE session (              -- each perflab process that ran (some of) the experiment
    id INTEGER PRIMARY KEY,
    command TEXT NOT NULL,            -- run | resume | resume --retry-failed
    pid INTEGER NOT NULL,
    pid_start TEXT,                   -- the process's start time (clock ticks since boot): with pid, who it was
    started_at TEXT NOT NULL,
    ended_at TEXT,                    -- NULL while it runs, or when it was killed (see ended)
    ended TEXT,                       -- finished | interrupted (SIGINT) | killed | failed: ...
    note TEXT                         -- what it found and did (a resume: runs in flight, runs retried)
);
CREATE TABLE effect (               -- what a run changes in the target's data, recorded before it changes it
    run_id INTEGER NOT NULL REFERENCES run(id),
    attempt INTEGER NOT NULL,
    kind TEXT NOT NULL,               -- e.g. tpch.refresh-pairs, tpcb.history, load
    data_json TEXT NOT NULL,
    at TEXT NOT NULL
);
CREATE TABLE dataset (
    target_identity TEXT PRIMARY KEY,
    data_key TEXT NOT NULL,
    run_id INTEGER,
    prepared_at TEXT NOT NULL
);
CREATE TABLE leftover (             -- what the experiment made outside its output directory (`perflab clean` removes it)
    location TEXT NOT NULL,           -- where: the database (dsn, password masked) or the file
    kind TEXT NOT NULL,               -- schema
    name TEXT NOT NULL,
    target_identity TEXT NOT NULL,    -- the target that made it (its settings reach it again)
    bytes INTEGER,                    -- size when last measured (NULL: not known)
    objects INTEGER,
    detail TEXT NOT NULL DEFAULT '',  -- e.g. "10 tables, 5 functions"
    claimed_at TEXT NOT NULL,
    measured_at TEXT,
    removed_at TEXT,                  -- by `perflab clean`
    PRIMARY KEY (location, kind, name)
);
"""


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


_ATTEMPT_AT = SCHEMA.index("CREATE TABLE attempt")
ATTEMPT_TABLE = SCHEMA[_ATTEMPT_AT:SCHEMA.index(");", _ATTEMPT_AT) + 1]  # that one statement
ATTEMPT_TABLE = ATTEMPT_TABLE.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1)
LEFTOVER_TABLE = SCHEMA[SCHEMA.index("CREATE TABLE leftover"):].strip().rstrip(";")
LEFTOVER_TABLE = LEFTOVER_TABLE.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1)
SESSION_EFFECT_TABLES = [
    t.strip().replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1)
    for t in SCHEMA[SCHEMA.index("CREATE TABLE session"):SCHEMA.index("CREATE TABLE dataset")].split(";") if t.strip()
]


def upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Older schemas to this one, in place; nothing stored is changed.
    1 to 2: queries gained their start time (NULL for those stored before).
    2 to 3: the attempt table (empty: no run was retried before).
    3 to 4: queries gained their energy (NULL for those stored before).
    4 to 5: the session and effect tables (empty: nothing was recorded before).
    5 to 6: the leftover table (empty: nothing was recorded before) and a new
    experiment id (no database holds the old store's experiment's mark)."""
    with transaction(conn):
        if version < 2:
            conn.execute("ALTER TABLE query ADD COLUMN started_s REAL")
        if version < 3:
            conn.execute(ATTEMPT_TABLE)
        if version < 4:
            have = {row[1] for row in conn.execute("PRAGMA table_info(query)")}
            for column in ("energy_j REAL", "energy_above_idle_j REAL", "energy_json TEXT", "energy_source TEXT"):
                if column.split()[0] not in have:
                    conn.execute(f"ALTER TABLE query ADD COLUMN {column}")
        if version < 5:
            for table in SESSION_EFFECT_TABLES:
                conn.execute(table)
        if version < 6:
            conn.execute(LEFTOVER_TABLE)
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('experiment_id', ?)", (uuid.uuid4().hex,))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def _disk_full(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL or "database or disk is full" in str(exc)


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One transaction. A full disk (SQLITE_FULL, at any statement or at the
    commit) rolls it back and is a DiskFull: what was committed before stays."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
    except sqlite3.OperationalError as exc:
        if not _disk_full(exc):
            raise
        where = next((Path(row[2]).parent for row in conn.execute("PRAGMA database_list") if row[2]), "the store")
        raise DiskFull(where, str(exc)) from None
