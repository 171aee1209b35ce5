"""A server's log that perflab shares between runs, cut into each run's part.

A managed server writes one log for its whole life (restarts included); each
run keeps the part written since the previous run ended: `begin_run` notes
where it starts in the run's directory (LOG_SLICES, so `resume` copies the
part of an attempt killed before `end_run`), `end_run` copies it to the
run's `server.log`, and `tail` gives a failed run's last lines;
`server_cause` reads in them why the server stopped serving (a PANIC, a
full disk) for the failed run's error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from perflab.hostctl.mounts import device_of
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


# A server's own words for why it stopped serving: they lead perflab's message,
# which otherwise names only the symptom a client saw ("connection lost").
_SEVERE = re.compile(r"\b(PANIC|FATAL):\s+(.*)")
# FATALs that are the consequence, not the cause (a shutdown ends sessions).
_BENIGN_FATAL = ("terminating connection due to administrator command", "the database system is shutting down",
                 "the database system is starting up", "the database system is in recovery mode",
                 "connection to client lost")
_NO_SPACE = "No space left on device"
# PostgreSQL's words for a write the kernel cut short: the filesystem filled
# part-way through it (PostgreSQL's own hint: "Check free disk space"). The
# space may be free again by the time perflab looks: the failed load's
# transaction removed the files it had made.
_SHORT_WRITE = re.compile(r"wrote only \d+ of \d+ bytes")


def server_cause(error: str, log_tail: str | None, locations: list[Path]) -> str:
    """`error` led by the server log's first PANIC (else first FATAL that is
    not a shutdown's); a full disk named by its device and path, with the fix."""
    found = [m for line in (log_tail or "").splitlines() if (m := _SEVERE.search(line))]
    severe = next((m for m in found if m.group(1) == "PANIC"), None) or next(
        (m for m in found if not any(b in m.group(2) for b in _BENIGN_FATAL)), None)
    words = f"{severe.group(1)}: {severe.group(2).strip()}" if severe else None
    text = f"{words or ''} {error}"
    short = _SHORT_WRITE.search(text)
    if _NO_SPACE.lower() in text.lower() or short:
        quoted = re.search(r'"([^"]+)"', words or error)
        path = Path(quoted.group(1)) if quoted else None
        if path is not None and not path.is_absolute():
            path = next((loc / path for loc in locations if (loc / path).parent.exists()),
                        locations[0] / path if locations else path)
        where = path or (locations[0] if locations else None)
        if where is not None:
            device, mount = device_of(where)
            said = words or next((line.strip() for line in error.splitlines() if _NO_SPACE.lower() in line.lower()),
                                 None) or (f"{_NO_SPACE}: a write cut short, PostgreSQL's sign of a full disk "
                                     f"({short.group(0) if short else 'a short write'})")
            lead = f"no space left on {device} ({where}; the filesystem at {mount}): {said}"
            return (f"{lead}\n  fix: free space on {device}, or put the server's data (target.storage) on a larger "
                    f"filesystem, then `perflab resume --retry-failed`\n  then: {error}")
    if words and words not in error:
        return f"server {words}\n  then: {error}"
    return error
