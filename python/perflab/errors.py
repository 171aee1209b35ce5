"""Errors that reach the user.

A `UserError` is bad input (an experiment file, a CLI argument, an unreachable
target, a missing binary): the CLI prints its message and hint and exits with
status 2, never a traceback. Anything else is a bug and is shown as one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perflab import _engine
from perflab.hostctl.mounts import device_of

if TYPE_CHECKING:
    from perflab.model import RunResult

EXIT_USAGE = 2


class UserError(Exception):
    """Bad input that the user can fix; `hint` says how."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  fix: {self.hint}"

    def as_problem(self, path: str) -> tuple[str, str]:
        """This error as one problem of an experiment file at `path` (dotted)."""
        text = self.message.removeprefix(f"{path}: ")
        return path, text + (f"; fix: {self.hint}" if self.hint else "")


class SpecError(UserError):
    """One or more problems in an experiment file, each a dotted path with what
    was given and what is allowed."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "experiment file") -> None:
        self.problems = problems
        lines = [f"{source}: {len(problems)} problem(s)"]
        lines += [f"  {path}: {text}" for path, text in problems]
        super().__init__("\n".join(lines))


class DiskFull(UserError):
    """The output directory's disk is full. What was committed (every finished
    run) stays; the run in flight is run again by `perflab resume`."""

    def __init__(self, out_dir: object, detail: str) -> None:
        device = "that disk"
        try:  # which filesystem ran out: perflab's side, not the server's
            source, mount = device_of(str(out_dir))
            device = f"{source} (the filesystem at {mount})"
        except Exception:
            pass
        super().__init__(
            f"{out_dir}: the disk is full (no space left on {device}: {detail}); every finished run is stored, "
            "the run in flight is not",
            f"free space on {device}, then continue with `perflab resume {out_dir}`",
        )


class RunFailure(Exception):
    """A run failed (server crash, lost connection, timeout, failed check).

    The runner stores the run as failed with this message and goes on with the
    experiment. `log_tail` carries the server log's last lines when there is one.
    `partial` is what the run measured before it failed (a perflab.model.RunResult:
    the queries it completed), stored with the failed run: the run's status says
    they are a failed attempt's, never pooled with finished runs' figures. Only
    a RunFailure carries them: a workload that keeps rows wraps what it re-raises.
    """

    def __init__(self, message: str, log_tail: str | None = None, partial: RunResult | None = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.partial = partial


# SIGINT, SIGTERM or a cancel: stop now, tear everything down, keep what is
# stored. A BaseException, so that no `except Exception` swallows it. It is
# the engine's class, so an interrupted engine call raises exactly this.
Interrupted = _engine.Interrupted
