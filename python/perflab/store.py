"""The store: one SQLite file (WAL mode) per experiment output directory.

Tables follow DESIGN.md: experiment, run, metric, series, histogram, query,
event; plus `dataset` (which data set is loaded in which target, so resumed
experiments reuse it). A run's results are written in one transaction when it
ends; series are written as they are sampled, in batches, by a writer thread
with its own connection, so a crash keeps the samples up to that moment.
The schema, its connection and transactions, and the upgrade of an older
store are store_schema's; the lock that makes one perflab its writer is
store_lock's.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perflab.context import SeriesSink
from perflab.errors import DiskFull, UserError
from perflab.model import Event, QueryTime, RunResult
from perflab.proc import start_time
from perflab.store_check import connect_read_only, inspect

# writer_alive and SCHEMA_VERSION as the store's own: serve, cli and the tests ask the store for them
from perflab.store_lock import take_writer_lock
from perflab.store_lock import writer_alive as writer_alive
from perflab.store_schema import SCHEMA, upgrade
from perflab.store_schema import SCHEMA_VERSION as SCHEMA_VERSION
from perflab.store_schema import connect as _connect
from perflab.store_schema import transaction as _tx

STORE_NAME = "perflab.sqlite"
RUN_STATUSES = ("planned", "running", "done", "failed")
# What a run's attempts and effects mark it with (Store.run_marks), beside its flags.
RUN_MARKS = ("resumed", "retried", "fresh load")
# The tables of a store where nothing was measured yet: a row anywhere else
# (a figure, an event, a data set, ...) means it may not be planned again.
PLAN_TABLES = ("meta", "experiment", "run", "session", "sqlite_sequence")


QUERY_INSERT = ("INSERT INTO query (run_id, stream, seq, query, seconds, status, text, error, started_s, "
                "energy_j, energy_above_idle_j, energy_json, energy_source) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


def _query_row(run_id: int, q: QueryTime) -> tuple[Any, ...]:
    return (run_id, q.stream, q.seq, q.query, q.seconds, q.status, q.text, q.error, q.started_s,
            q.energy_j, q.energy_above_idle_j, json.dumps(q.energy) if q.energy is not None else None,
            q.energy_source)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Store:
    def __init__(self, path: Path, conn: sqlite3.Connection, lock_fd: int | None = None) -> None:
        self.path = path
        self.dir = path.parent
        self.conn = conn
        self._lock_fd = lock_fd
        self.read_only: str | None = None  # why this store is read through a connection that cannot write
        # `create` or `resume` found a store holding only a plan and planned it
        # again: what the replaced plan held (`replan`)
        self.replanned: str | None = None

    # ------------------------------------------------------------ lifecycle

    @classmethod
    def create(
        cls,
        out_dir: Path,
        *,
        name: str,
        spec_text: str,
        spec_path: str | None,
        seed: int,
        factors: list[str],
        host: dict[str, Any],
    ) -> Store:
        out_dir = out_dir.resolve()
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{out_dir}: cannot create it: {exc.strerror}", "give a directory perflab may write") from None
        lock_fd = take_writer_lock(out_dir)  # before looking: two runs may start at once
        path = out_dir / STORE_NAME
        if path.exists():
            # A store that holds only a plan (nothing measured: a first run
            # that stopped at a wrong password, say) is planned again; any
            # other is refused, and nothing in it changes.
            try:
                old = cls(path, cls._open_conn(path), lock_fd)
            except UserError as exc:
                os.close(lock_fd)
                raise UserError(f"{out_dir} already holds an experiment's store, which this perflab cannot read "
                                f"({exc.message}); nothing was changed", "choose a new --out directory") from None
            if not old.holds_only_a_plan():
                old.close()
                raise UserError(
                    f"{out_dir} already holds an experiment's store, with results in it; nothing was changed",
                    f"continue it with `perflab resume {out_dir}`, or choose a new --out directory",
                )
            old.replan(name=name, spec_text=spec_text, spec_path=spec_path, seed=seed, factors=factors, host=host)
            return old
        conn = _connect(path)
        with _tx(conn):
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            conn.execute("INSERT INTO meta VALUES ('experiment_id', ?)", (uuid.uuid4().hex,))
            conn.execute(
                "INSERT INTO experiment VALUES (1, ?, ?, ?, ?, ?, ?, ?)",
                (name, spec_text, spec_path, seed, json.dumps(factors), utc_now(), json.dumps(host)),
            )
        return cls(path, conn, lock_fd)

    @classmethod
    def open(cls, out_dir: Path, *, write: bool = True, reads: tuple[str, ...] | None = None) -> Store:
        """The store in `out_dir`, checked first (store_check): a damaged
        store is refused unless the command only reads `reads`, its intact
        tables; a read-only one is refused when the command may `write`, and
        otherwise read through a connection that cannot change it."""
        # Absolute from here on: a server started later does not share the
        # user's working directory.
        path = Path(out_dir).resolve() / STORE_NAME
        if not path.is_file():
            raise UserError(
                f"{out_dir} holds no perflab store ({STORE_NAME})",
                "give the output directory of a `perflab run` (it printed the path)",
            )
        health = inspect(path)
        health.refuse(Path(out_dir), write=write, reads=reads)
        if not (health.read_only or health.damaged):
            return cls(path, cls._open_conn(path, checked=True))
        store = cls(path, connect_read_only(path))
        store.read_only = health.read_only
        why = health.read_only or "it is damaged"
        version = store.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if version is None or version[0] != str(SCHEMA_VERSION):
            store.close()
            raise UserError(f"{path}: store schema {version[0] if version else '?'} is not {SCHEMA_VERSION}, and "
                            f"perflab cannot upgrade it where it is ({why})",
                            f"copy {out_dir} somewhere writable and read the copy, or read it with the perflab "
                            "version that wrote it")
        return store

    @staticmethod
    def _open_conn(path: Path, checked: bool = False) -> sqlite3.Connection:
        """A connection to the store at `path`, its schema upgraded to this
        perflab's; a UserError when it is no store this perflab reads, or a
        damaged or read-only one (unless the caller `checked` it)."""
        if not checked:
            inspect(path).refuse(path.parent, write=True)
        try:
            conn = _connect(path)
            version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise UserError(f"{path}: not a readable perflab store: {exc}", "give a perflab output directory") from None
        if version is not None and 1 <= int(version[0]) < SCHEMA_VERSION:
            upgrade(conn, int(version[0]))
            version = (str(SCHEMA_VERSION),)
        if version is None or int(version[0]) != SCHEMA_VERSION:
            raise UserError(
                f"{path}: store schema {version[0] if version else '?'} is not {SCHEMA_VERSION}",
                "read it with the perflab version that wrote it",
            )
        return conn

    def close(self) -> None:
        self.conn.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def lock(self) -> None:
        """Become the experiment's only writer (see `take_writer_lock`)."""
        if self._lock_fd is None:
            self._lock_fd = take_writer_lock(self.dir)

    # ------------------------------------------------------------ experiment

    def experiment(self) -> dict[str, Any]:
        row = self.conn.execute("SELECT * FROM experiment").fetchone()
        d = dict(row)
        d["host"] = json.loads(d.pop("host_json"))
        d["factors"] = json.loads(d.pop("factors_json"))
        return d

    def holds_only_a_plan(self) -> bool:
        """Whether nothing was measured yet: every run planned (or left
        running by a perflab that died: the caller holds the writer lock),
        no attempt but interrupted ones (a first run stopped at provisioning,
        a wrong password, say), and no table but the plan's and the
        sessions' holds a row (no figure, event, failed attempt, data set or
        recorded change). Such a store may be planned again: nothing measured
        is lost."""
        assert self._lock_fd is not None, "only the experiment's writer may ask"
        if self.conn.execute("SELECT 1 FROM run WHERE status NOT IN ('planned', 'running') LIMIT 1").fetchone():
            return False
        if self.conn.execute("SELECT 1 FROM attempt WHERE status != 'interrupted' LIMIT 1").fetchone():
            return False
        tables = [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return not any(self.conn.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone()
                       for t in tables if t not in (*PLAN_TABLES, "attempt"))

    def replan(self, *, name: str, spec_text: str, spec_path: str | None, seed: int, factors: list[str],
               host: dict[str, Any]) -> str:
        """A store that holds only a plan becomes a new experiment's, its
        plan emptied for `add_plan` (in one transaction). Returns what the
        replaced plan held, for the session's note: its interrupted attempts
        are dropped with it (they measured nothing), their causes said there."""
        assert self.holds_only_a_plan()
        planned = self.conn.execute("SELECT count(*) FROM run").fetchone()[0]
        causes = [r[0] for r in self.conn.execute("SELECT DISTINCT error FROM attempt WHERE error IS NOT NULL")]
        attempts = self.conn.execute("SELECT count(*) FROM attempt").fetchone()[0]
        with _tx(self.conn):
            self.conn.execute("DELETE FROM attempt")
            self.conn.execute("DELETE FROM run")
            self.conn.execute(
                "UPDATE experiment SET name=?, spec_text=?, spec_path=?, seed=?, factors_json=?, created_at=?, "
                "host_json=? WHERE id=1",
                (name, spec_text, spec_path, seed, json.dumps(factors), utc_now(), json.dumps(host)),
            )
        self.replanned = (f"planned again: the replaced plan had {planned} runs, nothing measured"
                          + (f", {attempts} interrupted attempt(s) ({'; '.join(causes)})" if attempts else ""))
        return self.replanned

    def add_plan(self, runs: list[Any]) -> None:
        with _tx(self.conn):
            self.conn.executemany(
                "INSERT INTO run (id, combination, repetition, factors_json, status) VALUES (?, ?, ?, ?, 'planned')",
                [(r.number, r.combination, r.repetition, json.dumps(r.factors)) for r in runs],
            )

    def drop_planned(self, run_ids: list[int], why: str) -> list[int]:
        """Take back runs planned but never started (blocks a precision
        budget no longer holds), with an experiment event saying why: no
        measurement is lost. The ids dropped."""
        with _tx(self.conn):
            marks = ",".join("?" * len(run_ids))
            dropped = [r[0] for r in self.conn.execute(
                f"SELECT id FROM run WHERE id IN ({marks}) AND status = 'planned' AND attempts = 0", run_ids)]
            self.conn.execute(f"DELETE FROM run WHERE id IN ({','.join('?' * len(dropped))})", dropped)
            self._event(None, None, "precision", why)
        return dropped

    # ------------------------------------------------------------ runs

    def runs(self) -> list[dict[str, Any]]:
        out = []
        for row in self.conn.execute("SELECT * FROM run ORDER BY id"):
            d = dict(row)
            d["factors"] = json.loads(d.pop("factors_json"))
            d["flags"] = json.loads(d.pop("flags_json"))
            d["headline"] = json.loads(d.pop("headline_json"))
            d["target"] = json.loads(d.pop("target_json") or "null")
            out.append(d)
        return out

    def start_run(self, run_id: int, t0_ns: int) -> None:
        """Mark a run running. A previous attempt's partial rows (a crash, an
        interrupt) are removed first, so a run is never counted twice."""
        with _tx(self.conn):
            for table in ("metric", "series", "histogram", "query"):
                self.conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            self.conn.execute(
                "UPDATE run SET status='running', attempts=attempts+1, started_at=?, ended_at=NULL, "
                "t0_monotonic_ns=?, seconds=NULL, error=NULL, log_tail=NULL, flags_json='[]' WHERE id=?",
                (utc_now(), t0_ns, run_id),
            )

    def set_t0(self, run_id: int, t0_ns: int) -> None:
        with _tx(self.conn):
            self.conn.execute("UPDATE run SET t0_monotonic_ns=? WHERE id=?", (t0_ns, run_id))

    def interrupt_run(self, run_id: int, cause: str = "interrupted") -> None:
        """An interrupted run goes back to planned; resume runs it again. The
        interrupted attempt is kept in `attempt` (status 'interrupted')."""
        with _tx(self.conn):
            self._keep_attempt(run_id, "interrupted", cause, utc_now())
            self.conn.execute("UPDATE run SET status='planned' WHERE id=? AND status='running'", (run_id,))

    def _keep_attempt(self, run_id: int, status: str, error: str, ended_at: str | None,
                      files: str | None = None) -> None:
        """The run's current attempt as a row of `attempt` (a run that is 'running')."""
        self.conn.execute(
            "INSERT OR IGNORE INTO attempt SELECT id, attempts, ?, started_at, ?, "
            "(julianday(?) - julianday(started_at)) * 86400.0, ?, log_tail, ? FROM run WHERE id=? AND status='running'",
            (status, ended_at, ended_at, error, files, run_id),
        )

    def in_flight(self) -> list[dict[str, Any]]:
        """Runs marked 'running' (by this perflab, or one that died)."""
        return [r for r in self.runs() if r["status"] == "running"]

    def recover(self, files: dict[int, str | None] | None = None, last_seen: dict[int, str | None] | None = None,
                ) -> list[int]:
        """Runs left 'running' by a perflab that died: back to planned, each
        killed attempt kept in `attempt` (status 'killed'; its end is the last
        sign of life found, `last_seen`; its files went to `files`). Only when
        no other perflab is running this experiment (a live one's run is
        'running' too). The dead perflab's session is closed as 'killed'."""
        self.lock()
        files, last_seen = files or {}, last_seen or {}
        ids = [r[0] for r in self.conn.execute("SELECT id FROM run WHERE status='running'")]
        with _tx(self.conn):
            dead = [dict(r) for r in self.conn.execute("SELECT * FROM session WHERE ended_at IS NULL")]
            who = ", ".join(f"pid {d['pid']}" for d in dead) or "a perflab"
            for run_id in ids:
                self._keep_attempt(run_id, "killed", f"killed: {who} died while the run ran (found at resume)",
                                   last_seen.get(run_id), files.get(run_id))
                self.conn.execute("UPDATE run SET status='planned' WHERE id=?", (run_id,))
                self._event(run_id, None, "resumed", "the previous attempt was killed (its perflab died while the "
                            "run ran); the run is run again")
            for d in dead:
                if start_time(d["pid"]) != d["pid_start"]:
                    self.conn.execute(
                        "UPDATE session SET ended='killed', note=coalesce(note || '; ', '') || ? WHERE id=?",
                        ("it died without ending (SIGKILL, a crash, power loss)"
                         + (f"; run {', '.join(map(str, ids))} was in flight" if ids else ""), d["id"]))
        return ids

    def set_attempt_files(self, run_id: int, attempt: int, files: str) -> None:
        with _tx(self.conn):
            self.conn.execute("UPDATE attempt SET files=? WHERE run_id=? AND attempt=? AND files IS NULL",
                              (files, run_id, attempt))

    # ------------------------------------------------------------ sessions, effects

    def begin_session(self, command: str, note: str | None = None) -> int:
        pid = os.getpid()
        with _tx(self.conn):
            cur = self.conn.execute(
                "INSERT INTO session (command, pid, pid_start, started_at, note) VALUES (?, ?, ?, ?, ?)",
                (command, pid, start_time(pid), utc_now(), note),
            )
        return int(cur.lastrowid or 0)

    def end_session(self, session_id: int, ended: str) -> None:
        with _tx(self.conn):
            self.conn.execute("UPDATE session SET ended_at=?, ended=? WHERE id=?", (utc_now(), ended, session_id))

    def sessions(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM session ORDER BY id")]

    def add_effect(self, run_id: int, kind: str, data: dict[str, Any]) -> None:
        """Record, before the run does it, what it changes in the target's
        data (committed at once: a killed run's record survives it)."""
        with _tx(self.conn):
            self.conn.execute(
                "INSERT INTO effect SELECT id, attempts, ?, ?, ? FROM run WHERE id=?",
                (kind, json.dumps(data), utc_now(), run_id),
            )

    def amend_effect(self, run_id: int, kind: str, data: dict[str, Any]) -> None:
        """The run's last record of `kind`, replaced by what was done (a load
        that found its data in place, for instance, loaded nothing)."""
        with _tx(self.conn):
            self.conn.execute("UPDATE effect SET data_json=? WHERE rowid=(SELECT max(rowid) FROM effect WHERE "
                              "run_id=? AND kind=?)", (json.dumps(data), run_id, kind))

    def effects(self, run_id: int | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM effect" + (" WHERE run_id=?" if run_id is not None else "") + " ORDER BY rowid"
        out = []
        for row in self.conn.execute(sql, () if run_id is None else (run_id,)):
            d = dict(row)
            d["data"] = json.loads(d.pop("data_json"))
            out.append(d)
        return out

    def run_marks(self) -> dict[int, list[str]]:
        """What a reader must know beside a run's figures, by run: 'resumed'
        (an earlier attempt was killed or interrupted), 'retried' (an earlier
        attempt failed), 'fresh load' (its final attempt loaded the data again
        after other runs had used it)."""
        marks: dict[int, list[str]] = {}
        runs = self.runs()
        attempts = {r["id"]: r["attempts"] for r in runs}
        waiting = {r["id"] for r in runs if r["status"] == "planned"}
        for a in self.attempts():
            if a["run_id"] in waiting:
                continue  # not run again yet: `show` says interrupted, not resumed
            word = "retried" if a["status"] == "failed" else "resumed"
            if word not in marks.setdefault(a["run_id"], []):
                marks[a["run_id"]].append(word)
        for e in self.effects():
            if e["kind"] == "load" and e["data"].get("reload") and e["attempt"] == attempts.get(e["run_id"]):
                marks.setdefault(e["run_id"], []).append("fresh load")
        return {k: v for k, v in marks.items() if v}

    def retry_failed(self, files: dict[int, str | None]) -> list[int]:
        """Failed runs back to planned, each failed attempt kept in `attempt`
        (its error, log tail, times, and where its files went: `files`)."""
        ids = [r[0] for r in self.conn.execute("SELECT id FROM run WHERE status='failed' ORDER BY id")]
        with _tx(self.conn):
            for run_id in ids:
                self.conn.execute(
                    "INSERT INTO attempt SELECT id, attempts, status, started_at, ended_at, seconds, error, log_tail, ? "
                    "FROM run WHERE id=?", (files.get(run_id), run_id),
                )
                self.conn.execute("UPDATE run SET status='planned' WHERE id=?", (run_id,))
                self._event(run_id, None, "retry", "the failed attempt is kept in the attempt table; the run is run again")
        return ids

    def failed_runs(self) -> list[tuple[int, int]]:
        """(run id, attempts so far) of the failed runs."""
        return [(r[0], r[1]) for r in self.conn.execute("SELECT id, attempts FROM run WHERE status='failed' ORDER BY id")]

    def attempts(self, run_id: int | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM attempt" + (" WHERE run_id=?" if run_id is not None else "") + " ORDER BY run_id, attempt"
        return [dict(r) for r in self.conn.execute(sql, () if run_id is None else (run_id,))]

    def finish_run(
        self,
        run_id: int,
        result: RunResult,
        *,
        status: str,
        seconds: float,
        target: dict[str, Any] | None,
        error: str | None = None,
        log_tail: str | None = None,
    ) -> None:
        assert status in ("done", "failed")
        with _tx(self.conn):
            self.conn.executemany(
                "INSERT OR REPLACE INTO metric VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (run_id, m.name, m.value, m.unit, m.description,
                     None if m.higher_is_better is None else int(m.higher_is_better), m.method)
                    for m in result.metrics.values()
                ],
            )
            self.conn.executemany(
                "INSERT INTO series VALUES (?, ?, ?, ?, ?)",
                [(run_id, s.source, s.name, s.t, s.value) for s in result.series],
            )
            self.conn.executemany(
                "INSERT OR REPLACE INTO histogram VALUES (?, ?, ?, ?, ?)",
                [(run_id, h.name, h.unit, h.encoding, h.data) for h in result.histograms],
            )
            if result.queries:  # the final list replaces what was stored as each query completed
                self.conn.execute("DELETE FROM query WHERE run_id = ?", (run_id,))
            self.conn.executemany(QUERY_INSERT, [_query_row(run_id, q) for q in result.queries])
            for ev in result.events:
                self._event(run_id, ev.t, ev.kind, ev.message)
            self.conn.execute(
                "UPDATE run SET status=?, ended_at=?, seconds=?, error=?, log_tail=?, flags_json=?, "
                "headline_json=?, target_json=? WHERE id=?",
                (status, utc_now(), seconds, error, log_tail, json.dumps(result.flags),
                 json.dumps(result.headline), json.dumps(target, default=str), run_id),
            )

    # ------------------------------------------------------------ events, datasets

    def _event(self, run_id: int | None, t: float | None, kind: str, message: str) -> None:
        self.conn.execute("INSERT INTO event VALUES (?, ?, ?, ?, ?)", (run_id, t, utc_now(), kind, message))

    def add_event(self, run_id: int | None, event: Event | None = None, *, kind: str = "", message: str = "") -> None:
        with _tx(self.conn):
            if event is not None:
                self._event(run_id, event.t, event.kind, event.message)
            else:
                self._event(run_id, None, kind, message)

    def dataset(self, target_identity: str) -> str | None:
        row = self.conn.execute("SELECT data_key FROM dataset WHERE target_identity=?", (target_identity,)).fetchone()
        return row[0] if row else None

    def set_dataset(self, target_identity: str, data_key: str | None, run_id: int | None) -> None:
        with _tx(self.conn):
            if data_key is None:
                self.conn.execute("DELETE FROM dataset WHERE target_identity=?", (target_identity,))
            else:
                self.conn.execute(
                    "INSERT OR REPLACE INTO dataset VALUES (?, ?, ?, ?)", (target_identity, data_key, run_id, utc_now())
                )

    # ------------------------------------------------------------ what the experiment left outside its directory

    def experiment_id(self) -> str:
        """This experiment's id: what perflab marks its schemas in other databases with."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'experiment_id'").fetchone()
        if row is None:  # a store made by a perflab that had none
            with _tx(self.conn):
                self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('experiment_id', ?)", (uuid.uuid4().hex,))
            row = self.conn.execute("SELECT value FROM meta WHERE key = 'experiment_id'").fetchone()
        return str(row[0])

    def record_leftover(self, target_identity: str, kind: str, location: str, name: str, *,
                        bytes_: int | None = None, objects: int | None = None, detail: str = "",
                        measured: bool = False) -> None:
        """What this experiment made (or took over) outside its output
        directory: recorded when it is made, then measured (`measured`) as
        the target is released. The location never holds a password."""
        with _tx(self.conn):
            self.conn.execute(
                "INSERT INTO leftover (location, kind, name, target_identity, bytes, objects, detail, claimed_at, "
                "measured_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (location, kind, name) DO UPDATE SET target_identity = excluded.target_identity, "
                "bytes = coalesce(excluded.bytes, bytes), objects = coalesce(excluded.objects, objects), "
                "detail = CASE WHEN excluded.detail = '' THEN detail ELSE excluded.detail END, "
                "measured_at = coalesce(excluded.measured_at, measured_at), removed_at = NULL",
                (location, kind, name, target_identity, bytes_, objects, detail, utc_now(),
                 utc_now() if measured else None),
            )

    def leftovers(self, removed: bool = False) -> list[dict[str, Any]]:
        """What the experiment left outside its output directory (with
        `removed`, what `perflab clean` removed too)."""
        sql = "SELECT * FROM leftover" + ("" if removed else " WHERE removed_at IS NULL") + " ORDER BY location, kind, name"
        return [dict(r) for r in self.conn.execute(sql)]

    def leftover_removed(self, location: str, kind: str, name: str) -> None:
        with _tx(self.conn):
            self.conn.execute("UPDATE leftover SET removed_at = ? WHERE location = ? AND kind = ? AND name = ?",
                              (utc_now(), location, kind, name))

    # ------------------------------------------------------------ reads

    def metrics(self, run_id: int | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM metric" + (" WHERE run_id=?" if run_id is not None else "") + " ORDER BY run_id, name"
        return [dict(r) for r in self.conn.execute(sql, () if run_id is None else (run_id,))]

    def series(self, run_id: int, source: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT source, name, t, value FROM series WHERE run_id=?"
        args: tuple[Any, ...] = (run_id,)
        if source is not None:
            sql += " AND source=?"
            args += (source,)
        return [dict(r) for r in self.conn.execute(sql + " ORDER BY source, name, t", args)]

    def events(self, run_id: int | None = None) -> list[dict[str, Any]]:
        if run_id is None:
            rows = self.conn.execute("SELECT * FROM event ORDER BY rowid")
        else:
            rows = self.conn.execute("SELECT * FROM event WHERE run_id=? ORDER BY rowid", (run_id,))
        return [dict(r) for r in rows]

    def queries(self, run_id: int | None = None) -> list[dict[str, Any]]:
        if run_id is None:
            rows = self.conn.execute("SELECT * FROM query ORDER BY run_id, stream, seq")
        else:
            rows = self.conn.execute("SELECT * FROM query WHERE run_id=? ORDER BY stream, seq", (run_id,))
        return [dict(r) for r in rows]

    def histograms(self, run_id: int) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM histogram WHERE run_id=? ORDER BY name", (run_id,))]

    def series_writer(self, run_id: int) -> SeriesWriter:
        return SeriesWriter(self.path, run_id)


class SeriesWriter(SeriesSink):
    """Live series for one run, written in batches from a thread of its own.

    Thread-safe `add()`; rows reach the store within `flush_interval_s`, so a
    crash loses at most that much. `close()` writes the rest.
    """

    def __init__(self, store_path: Path, run_id: int, flush_interval_s: float = 1.0) -> None:
        self.run_id = run_id
        self._rows: list[tuple[int, str, str, float, float | None]] = []
        self._queries: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conn = _connect(store_path)
        self._interval = flush_interval_s
        self._thread = threading.Thread(target=self._loop, name="series-writer", daemon=True)
        self._thread.start()
        self.written = 0

    def add(self, source: str, name: str, t: float, value: float | None) -> None:
        with self._lock:
            self._rows.append((self.run_id, source, name, t, value))

    def add_query(self, q: QueryTime) -> None:
        """A query's record as it completes (RunContext.query_done): stored
        with the next batch, so a killed run keeps the queries it finished;
        `finish_run` replaces them with the run's final list."""
        with self._lock:
            self._queries.append(_query_row(self.run_id, q))

    def _flush(self) -> None:
        with self._lock:
            rows, self._rows = self._rows, []
            queries, self._queries = self._queries, []
        if rows or queries:
            try:
                with _tx(self._conn):
                    self._conn.executemany("INSERT INTO series VALUES (?, ?, ?, ?, ?)", rows)
                    self._conn.executemany(QUERY_INSERT, queries)
            except BaseException:
                with self._lock:  # kept for the next try
                    self._rows[:0] = rows
                    self._queries[:0] = queries
                raise
            self.written += len(rows)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._flush()
            except (sqlite3.Error, DiskFull):  # retried at the next tick; close() raises
                time.sleep(0.1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._flush()
        self._conn.close()
