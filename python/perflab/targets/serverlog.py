"""A server's log that perflab shares between runs, cut into each run's part.

A managed server writes one log for its whole life (restarts included); each
run keeps the part written since the previous run ended: `begin_run` notes
where it starts in the run's directory (LOG_SLICES, so `resume` copies the
part of an attempt killed before `end_run`), `end_run` copies it to the
run's `server.log`, and `tail` gives a failed run's last lines.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from perflab.targets.base import LOG_SLICES

TAIL_BYTES = 64 * 1024


class ServerLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        # where this run's part starts
        self.start = path.stat().st_size if path.exists() else 0

    def move(self, path: Path) -> None:
        """The server writes to `path` from now on (its part starts at its end)."""
        self.path = path
        self.start = path.stat().st_size if path.exists() else 0

    def size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def begin_run(self, run_dir: Path) -> None:
        if not self.path.exists():
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / LOG_SLICES).write_text(json.dumps({"server.log": {"path": str(self.path),
                                                                     "offset": self.start}}))

    def end_run(self, run_dir: Path) -> None:
        if not self.path.exists():
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        with self.path.open("rb") as src, (run_dir / "server.log").open("wb") as dst:
            src.seek(self.start)
            shutil.copyfileobj(src, dst)
            self.start = src.tell()
        (run_dir / LOG_SLICES).unlink(missing_ok=True)

    def read_from(self, offset: int, limit: int = 256 * 1024) -> str:
        """What the server wrote from `offset` on (at most `limit` bytes)."""
        try:
            with self.path.open("rb") as f:
                f.seek(offset)
                return f.read(limit).decode(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 40) -> str | None:
        """The last lines of this run's part."""
        if not self.path.exists():
            return None
        with self.path.open("rb") as f:
            f.seek(max(self.start, f.seek(0, os.SEEK_END) - TAIL_BYTES))
            text = f.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


class LoggedServer:
    """The Target hooks of a server whose log is `server_log`, shared by the
    managed kinds (listed before Target among the bases, so these are used):
    `begin_run` notes where a run's part starts in the run's directory (a
    perflab killed mid-run never reaches end_run, and resume copies the killed
    attempt's part from this note: runner._copy_log_slices), `end_run` keeps
    it, `log_tail` gives a failed run's record its last lines."""

    server_log: ServerLog

    def begin_run(self, run_dir: Path) -> None:
        self.server_log.begin_run(run_dir)

    def end_run(self, run_dir: Path) -> None:
        self.server_log.end_run(run_dir)

    def log_tail(self, lines: int = 40) -> str | None:
        return self.server_log.tail(lines)
