"""Where an experiment is: a bar for the plan and a line per run with its
headline figures. On a terminal it is live (rich); with --quiet or when stdout
is not a terminal it is plain lines, one per event, easy to log and grep."""

from __future__ import annotations

import sys
import time
from typing import Any

from perflab import model


def fmt_value(value: float | None) -> str:
    if value is None:
        return "-"
    if value != value:  # NaN
        return "nan"
    a = abs(value)
    if a >= 1e5 or a == 0 or a >= 100:
        return f"{value:.0f}" if a < 1e9 else f"{value:.3g}"
    if a >= 10:
        return f"{value:.1f}"
    if a >= 0.01:
        return f"{value:.3f}"
    return f"{value:.3g}"


def fmt_factors(factors: dict[str, Any]) -> str:
    return model.fmt_factors(factors) or "(no factors)"


class Progress:
    """Plain lines; the base of the live display."""

    def __init__(self, total: int, done: int = 0, out: Any = None) -> None:
        self.total = total
        self.done = done
        self.out = out or sys.stdout
        self._run_start = 0.0

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def start(self) -> None:
        if self.done:
            self.say(f"plan: {self.total} runs, {self.done} already finished")
        else:
            self.say(f"plan: {self.total} runs")

    def run_start(self, number: int, factors: dict[str, Any], repetition: int) -> None:
        self._run_start = time.monotonic()
        self.say(f"[{number}/{self.total}] {fmt_factors(factors)} rep={repetition}: running")

    def status(self, text: str) -> None:
        pass

    def run_end(self, number: int, status: str, headline: str) -> None:
        self.done += 1
        took = time.monotonic() - self._run_start
        self.say(f"[{number}/{self.total}] {status} in {took:.1f}s {headline}".rstrip())

    def warn(self, text: str) -> None:
        print(f"perflab: warning: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


class LiveProgress(Progress):
    """A rich progress bar for the plan, and a live status line for the run."""

    def __init__(self, total: int, done: int = 0) -> None:
        super().__init__(total, done)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        self.console = Console()
        self.bar = Bar(
            TextColumn("[bold]plan"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.description}"), console=self.console, transient=False,
        )
        self.task = self.bar.add_task("", total=total, completed=done)
        self.bar.start()

    def say(self, text: str) -> None:
        self.bar.console.print(text, highlight=False, markup=False)

    def status(self, text: str) -> None:
        self.bar.update(self.task, description=text)

    def run_end(self, number: int, status: str, headline: str) -> None:
        super().run_end(number, status, headline)
        self.bar.update(self.task, completed=self.done, description="")

    def warn(self, text: str) -> None:
        self.bar.console.print(f"[yellow]warning:[/yellow] {text}", highlight=False)

    def close(self) -> None:
        self.bar.stop()


def make_progress(total: int, done: int, quiet: bool) -> Progress:
    if quiet or not sys.stdout.isatty():
        return Progress(total, done)
    return LiveProgress(total, done)
