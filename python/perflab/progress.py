"""Where an experiment is: a bar for the plan and a line per run with its
headline figures. On a terminal it is live (rich); with --quiet or when stdout
is not a terminal it is plain lines, one per event, easy to log and grep.
With `every` (`run --progress SECONDS`) a harness run also prints a line per
that many seconds, live or not, as `pgbench -P` does: the rate, the highest
per-second p99 of the interval, errors and skipped transactions."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from perflab import model
from perflab.units import plural

if TYPE_CHECKING:
    from rich.console import Console


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

    def __init__(self, total: int, done: int = 0, out: TextIO | None = None, every: float | None = None,
                 probes: int | None = None) -> None:
        self.total = total
        self.done = done
        # a capacity search's max_probes: its plan grows a probe at a time, up to that many runs in all
        self.probes = probes
        self.out = out or sys.stdout
        self._run_start = 0.0
        self.every = every
        self._acc: list[float] = [0.0, 0.0, 0.0, 0.0, 0.0]  # seconds, transactions, max p99, failed, skipped

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def start(self) -> None:
        line = f"plan: {plural(self.total, 'run')}"
        if self.probes is not None:
            line += f", then the search's probes as it goes: at most {self.probes} runs in all (search.max_probes)"
        self.say(line + (f", {self.done} already finished" if self.done else ""))

    def tag(self, number: int) -> str:
        """"[3/12]"; in a search, whose plan grows as it goes, "[probe 3 of at most 30]"."""
        if self.probes is not None:
            return f"[probe {number} of at most {self.probes}]"
        return f"[{number}/{self.total}]"

    def run_start(self, number: int, factors: dict[str, Any], repetition: int) -> None:
        self._run_start = time.monotonic()
        self._acc = [0.0, 0.0, 0.0, 0.0, 0.0]
        self.say(f"{self.tag(number)} {fmt_factors(factors)} rep={repetition}: running")

    def load_start(self, number: int, workload: Any) -> None:
        """The load phase begins: the workload's kind and what sets its data
        (its data_fields: scale, warehouses, ...), the short ones."""
        values = ((f, getattr(workload.settings, f, None)) for f in workload.data_fields)
        data = ", ".join(f"{f} = {v}" for f, v in values if isinstance(v, int | float | str) and len(str(v)) <= 40)
        self.say(f"run {number}: loading the {workload.settings.kind} data" + (f" ({data})" if data else ""))
        self.status("preparing data (load test)")  # until the workload's own steps say more

    def load_end(self, number: int, load: Any) -> None:
        """The load phase ended: its time and the rows it loaded (a model.LoadResult)."""
        if load.reused:
            self.say(f"run {number}: data already in place, nothing loaded")
            return
        rows = sum(load.rows.values())
        self.say(f"run {number}: loaded in {load.total_s:.1f}s" + (f", {rows:,} rows" if rows else ""))

    def status(self, text: str) -> None:
        pass

    def second(self, interval: Any, unit: str = "tps") -> None:
        """One measured second; with `every`, a line per that many seconds."""
        if self.every is None:
            return
        acc = self._acc
        acc[0] += interval.interval_s
        acc[1] += interval.transactions
        acc[2] = max(acc[2], interval.latency_p99_ms)
        acc[3] += interval.failed
        acc[4] += interval.skipped
        if acc[0] + 1e-6 < self.every:
            return
        line = (f"  {interval.t_s:7.1f} s {acc[1] / acc[0]:10.1f} {unit}  p99 {acc[2]:8.2f} ms  "
                f"{acc[3]:.0f} errors")
        if acc[4]:
            line += f"  {acc[4]:.0f} skipped"
        self.say(line)
        self._acc = [0.0, 0.0, 0.0, 0.0, 0.0]

    def run_end(self, number: int, status: str, headline: str) -> None:
        self.done += 1
        took = time.monotonic() - self._run_start
        self.say(f"{self.tag(number)} {status} in {took:.1f}s {headline}".rstrip())

    def warn(self, text: str) -> None:
        print(f"perflab: warning: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


class LiveProgress(Progress):
    """A rich progress bar for the plan, and a live status line for the run."""

    # The bar's columns before the status text: "plan", the bar, "N/M" and
    # the elapsed time; the text gets what is left of the line.
    BAR_WIDTH = 20
    FIXED_COLUMNS = 4 + 1 + BAR_WIDTH + 1 + 9 + 1 + 7 + 1

    def __init__(self, total: int, done: int = 0, every: float | None = None, console: Console | None = None,
                 probes: int | None = None) -> None:
        super().__init__(total, done, every=every, probes=probes)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        self.console = console or Console()
        self.bar = Bar(
            TextColumn("[bold]plan"), BarColumn(bar_width=self.BAR_WIDTH), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.description}"), console=self.console, transient=False,
        )
        self.task = self.bar.add_task("", total=probes or total, completed=done)
        self.bar.start()

    def say(self, text: str) -> None:
        self.bar.console.print(text, highlight=False, markup=False)

    def status(self, text: str) -> None:
        room = max(0, self.console.width - self.FIXED_COLUMNS - 1)
        self.bar.update(self.task, description=text if len(text) <= room else text[:max(0, room - 1)] + "…")

    def run_end(self, number: int, status: str, headline: str) -> None:
        super().run_end(number, status, headline)
        self.bar.update(self.task, completed=self.done, description="")

    def warn(self, text: str) -> None:
        self.bar.console.print(f"[yellow]warning:[/yellow] {text}", highlight=False)

    def close(self) -> None:
        self.bar.stop()


def make_progress(total: int, done: int, quiet: bool, every: float | None = None,
                  probes: int | None = None) -> Progress:
    if quiet or not sys.stdout.isatty():
        return Progress(total, done, every=every, probes=probes)
    return LiveProgress(total, done, every=every, probes=probes)
