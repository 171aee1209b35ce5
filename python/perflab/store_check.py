"""The store's health, looked at before any command reads or writes it.

A store is checked with SQLite's `PRAGMA quick_check` on a read-only
connection (immutable when nothing is in its write-ahead log), so that looking
never changes the file: a damaged store is refused with one message that says
what is damaged, that nothing was changed, and how to recover what is still
readable (`perflab export` of the intact tables, or `sqlite3 .recover`). A
store perflab may not write (a read-only filesystem, a file without write
permission) is read through the same read-only connection, and said so.

Layer 0 (sqlite3 and the errors only): `perflab.store` calls it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from perflab.errors import UserError

# What every reader needs, and what each of `perflab export`'s tables reads besides.
BASE_TABLES = ("meta", "experiment", "run")
EXPORT_READS = {"metrics": ("metric",), "series": ("series",), "queries": ("query",)}
# A file shorter than SQLite's header is no store (an empty file is an empty database to SQLite).
HEADER_BYTES = 100


@dataclass
class Health:
    path: Path
    read_only: str | None = None  # why perflab may not write it, when it may not
    damaged: dict[str, str] = field(default_factory=dict)  # table (or "file") -> what SQLite said

    def intact(self, tables: tuple[str, ...]) -> bool:
        return not self.damaged.get("file") and not any(t in self.damaged for t in (*BASE_TABLES, *tables))

    def intact_exports(self) -> list[str]:
        return [name for name, reads in EXPORT_READS.items() if self.intact(reads)]

    def refuse(self, out_dir: Path, *, write: bool, reads: tuple[str, ...] | None = None) -> None:
        """A UserError when the command may not go on: the store is damaged
        (unless it reads only intact `reads`), or `write` and it is read-only."""
        if self.damaged and (write or reads is None or not self.intact(reads)):
            raise damaged_error(self, out_dir)
        if write and self.read_only:
            raise UserError(f"{self.path} is read-only ({self.read_only}), and this command writes to it; "
                            "nothing was changed",
                            f"copy the output directory somewhere writable (cp -a {out_dir} NEW_DIR) and run the "
                            "command on the copy; `perflab show`, `perflab export` and `perflab report --output "
                            "OTHER_DIR` read it where it is")


def damaged_error(health: Health, out_dir: Path) -> UserError:
    what = "; ".join(f"{'the file' if t == 'file' else 'table ' + t}: {why}" for t, why in health.damaged.items())
    ro = f" (and read-only: {health.read_only})" if health.read_only else ""
    readable = health.intact_exports()
    export = (f"`perflab export {out_dir} --table {readable[0]} --output FILE` exports an intact table "
              f"({', '.join(readable)} are), or " if readable else "")
    return UserError(f"{health.path} is damaged{ro}: SQLite's quick check failed ({what}); nothing was changed, "
                     "and no perflab command writes to a damaged store",
                     f"recover what is readable: {export}`sqlite3 {health.path} .recover > recovered.sql` "
                     "rebuilds what SQLite can still read; keep the damaged file as it is")


def read_only_reason(path: Path) -> str | None:
    """Why perflab may not write the store at `path` (and the files SQLite
    keeps beside it), or None."""
    with contextlib.suppress(OSError):
        if os.statvfs(path.parent).f_flag & os.ST_RDONLY:
            return "on a read-only filesystem"
    if not os.access(path, os.W_OK):
        return "the file is not writable by this user"
    if not os.access(path.parent, os.W_OK):
        return "its directory is not writable by this user"
    return None


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot change the store, nor leave a file beside it
    when it can help it: immutable while the write-ahead log is empty (no
    writer, nothing unread), else read-only through the log and its index."""
    uri = "file:" + quote(str(path))
    wal = Path(f"{path}-wal")
    modes = ["mode=ro", "immutable=1"] if wal.exists() and wal.stat().st_size > 0 else ["immutable=1"]
    last: sqlite3.Error | None = None
    for mode in modes:
        try:
            conn = sqlite3.connect(f"{uri}?{mode}", uri=True, timeout=30, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA query_only=ON")
            conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
        except sqlite3.DatabaseError as exc:  # mode=ro with no index file it may create: read the file alone
            last = exc
            continue
        conn.row_factory = sqlite3.Row
        return conn
    assert last is not None
    raise last


def inspect(path: Path) -> Health:
    """The store's health: SQLite's quick check over the whole file, then,
    when that fails, table by table to name what is damaged."""
    health = Health(path, read_only_reason(path))
    try:
        size = path.stat().st_size
    except OSError as exc:
        health.damaged["file"] = f"cannot read it: {exc.strerror}"
        return health
    if size < HEADER_BYTES:
        health.damaged["file"] = f"truncated to {size} bytes, shorter than SQLite's header"
        return health
    try:
        conn = connect_read_only(path)
    except sqlite3.Error as exc:
        health.damaged["file"] = str(exc)
        return health
    try:
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        except sqlite3.DatabaseError as exc:
            health.damaged["file"] = f"its schema cannot be read: {exc}"
            return health
        if missing := [t for t in BASE_TABLES if t not in tables]:
            health.damaged["file"] = (f"no {', '.join(missing)} table (a truncated store, or not perflab's)"
                                      if tables else "no tables at all (a truncated store, or not perflab's)")
            return health
        if _quick_check(conn, None) is None:
            return health
        for table in tables:
            if (why := _quick_check(conn, table)) is not None:
                health.damaged[table] = why
        if not health.damaged:  # the file fails, no table does: pages that belong to none
            health.damaged["file"] = _quick_check(conn, None) or "quick check failed"
    finally:
        conn.close()
    return health


def _quick_check(conn: sqlite3.Connection, table: str | None) -> str | None:
    """None when the quick check passes, else SQLite's first words on it."""
    pragma = "PRAGMA quick_check(3)" if table is None else "PRAGMA quick_check('" + table.replace("'", "''") + "')"
    try:
        rows = [r[0] for r in conn.execute(pragma)]
    except sqlite3.DatabaseError as exc:
        return str(exc)
    if rows == ["ok"]:
        return None
    lines = [line for row in rows for line in str(row).splitlines() if not line.startswith("*** in database")]
    return "; ".join(lines[:2]) or "quick check failed"
