"""What a plan costs before it runs: its expected wall time, which `check`
and `plan` print (and warn about past an hour).

Each run takes its warm-up and its duration (the workload's default when the
file gives none: the `DEFAULT_DURATION_S` of the workload's module), plus an
estimate of what surrounds it: the server's restart and the run's set-up
(RESTART_S), and each distinct data set's load once (LOAD_S; before every
run of a workload that writes with `data = "fresh"`). A run whose
length depends on the data (a query set, a count of transactions or
requests) is counted apart: its time is not guessed.

Those are guesses; an experiment that ran says what its runs cost. Each run
stores its phases' wall times (`Laps`: wall.setup_s, wall.prepare_s,
wall.measure_s, wall.check_s), and `perflab plan FILE --like DIR` sets the
estimate beside what DIR's runs took against the same model (`measured_pace`):
the ratio over all its runs and over its first and last blocks (a study
whose data grows, TPC-C's, slows from block to block).
"""

from __future__ import annotations

import inspect
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from perflab.analysis.precision import budget_blocks
from perflab.errors import UserError
from perflab.model import RunResult
from perflab.spec import Experiment
from perflab.workloads import WORKLOADS

# A managed server's stop and start between runs, collectors' set-up and the
# run's own bookkeeping: seconds, a rough figure.
RESTART_S = 5.0
# A data set's load (once per data set and target): a rough figure; a run's
# store times its loads, so a second experiment can be judged by the first.
LOAD_S = 30.0
# Past this a plan earns a warning: the user may have meant less.
WARN_S = 3600.0
# Settings that bound a run by a count instead of a time.
COUNTS = ("transactions", "requests", "iterations")


@dataclass
class Estimate:
    runs: int
    timed: int  # runs whose length is known
    run_s: float  # their warm-ups and durations
    warmup_s: float
    loads: int
    upper_bound: bool  # a search: at most this many probes
    uniform: tuple[float, float] | None  # (warm-up, duration) when every timed run has the same
    # (precision, budget s, pilot blocks): the plan as written is a pilot, then blocks while the budget lasts
    precision: tuple[str, float, int] | None = None

    @property
    def total_s(self) -> float:
        return self.run_s + self.runs * RESTART_S + self.loads * LOAD_S

    def text(self) -> str:
        untimed = self.runs - self.timed
        about = "at most about" if self.upper_bound else "at least about" if untimed else "about"
        parts = []
        if self.uniform is not None and self.timed == self.runs:
            warmup, duration = self.uniform
            inner = ([f"{_fmt(warmup)} warm-up"] if warmup else []) + [_fmt(duration), f"~{_fmt(RESTART_S)} restart"]
            parts.append(f"{_count(self.runs, 'run')} x ({' + '.join(inner)})")
        else:
            if self.timed:
                parts.append(f"{_count(self.timed, 'timed run')} of {_fmt(self.run_s)} in all"
                             + (f" ({_fmt(self.warmup_s)} of it warm-up)" if self.warmup_s else ""))
            parts.append(f"{_count(self.runs, 'restart')} x ~{_fmt(RESTART_S)}")
        parts.append(f"{_count(self.loads, 'data load')} x ~{_fmt(LOAD_S)}")
        text = f"expected wall time: {about} {_fmt(self.total_s)} ({' + '.join(parts)})"
        if untimed:
            text += (f"; {_count(untimed, 'run')} whose length depends on the data (a query set, or a count of "
                     "transactions or requests) not counted")
        if self.precision is not None:
            target, budget_s, pilot = self.precision
            blocks = budget_blocks(budget_s, pilot, self.total_s)
            text += (f"; with precision {target} and budget {_fmt(budget_s)}: at most about "
                     f"{_fmt(max(budget_s, self.total_s))} (this plan is the pilot of {_count(pilot, 'block')}; "
                     f"then Stein's rule adds blocks of about {_fmt(self.total_s / pilot)} while the budget lasts: "
                     f"at most {_count(blocks, 'block')} in all)")
        return text

    def warning(self) -> str | None:
        if self.total_s <= WARN_S:
            return None
        return (f"the plan is expected to take {_fmt(self.total_s)}, more than an hour; if that is more "
                "than you meant, shorten workload.duration or warmup, or give fewer levels or repetitions")


def run_length_s(kind: str, settings: object) -> tuple[float, float] | None:
    """(warm-up, duration) of a run of this workload's settings; None when a
    count or the data bounds it."""
    warmup = float(getattr(settings, "warmup", 0.0) or 0.0)
    duration = getattr(settings, "duration", None)
    if duration is None:
        if any(getattr(settings, f, None) is not None for f in COUNTS):
            return None
        duration = getattr(inspect.getmodule(WORKLOADS.get(kind)), "DEFAULT_DURATION_S", None)
    return None if duration is None else (warmup, float(duration))


def wall_time(exp: Experiment) -> Estimate:
    """The expected wall time of the experiment's plan (a search's: of its
    most probes)."""
    reps = exp.meta.repetitions if exp.search is None else exp.search.max_probes
    runs = timed = 0
    run_s = warmup_s = 0.0
    data: set[str] = set()
    lengths: set[tuple[float, float]] = set()
    for combo in exp.combinations():
        spec = exp.resolve(combo)
        workload = WORKLOADS.get(spec.workload.kind)(spec.workload)
        where = f"{spec.target.model_dump_json()}:{workload.data_key()}"
        if exp.meta.data == "fresh" and workload.writes():  # its data set is loaded before each of its runs
            data.update(f"{where}:{rep}" for rep in range(reps))
        else:
            data.add(where)
        runs += reps
        length = run_length_s(spec.workload.kind, spec.workload)
        if length is not None:
            timed += reps
            warmup_s += reps * length[0]
            run_s += reps * sum(length)
            lengths.add(length)
    uniform = next(iter(lengths)) if len(lengths) == 1 else None
    budget = exp.meta.budget
    given = (exp.meta.precision, budget, reps) if exp.meta.precision is not None and budget is not None else None
    return Estimate(runs, timed, run_s, warmup_s, len(data), exp.search is not None, uniform, given)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _fmt(seconds: float) -> str:
    """"500ms", "5s", "2m30s", "1h05m": as a file would write it."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, s = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{s:02d}s" if s else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Laps:
    """Where a run's wall time went: each phase's seconds, stored as
    `wall.<phase>_s` (a failed run's, up to where it failed), so that the
    time around the measured window (a restart, a load, consistency checks
    that grow with the data) is measured, not guessed (`perflab plan --like`)."""

    PHASES = {"setup": "host changes, the server's start or restart and its set-up",
              "prepare": "the data set's preparation (a load, or the check that it is there)",
              "measure": "the workload's run: warm-up, measured window and collectors",
              "check": "the workload's consistency checks after the run"}

    def __init__(self, started: float) -> None:
        self.last = started
        self.seconds: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.seconds[phase] = now - self.last
        self.last = now

    def store(self, result: RunResult) -> None:
        for phase, seconds in self.seconds.items():
            result.add_metric(f"wall.{phase}_s", seconds, "s", f"wall time of the run's {phase} phase: "
                              f"{self.PHASES[phase]}")


def measured_pace(out_dir: Path, estimate: Estimate) -> str:
    """What the finished runs of the experiment in `out_dir` took, against
    what this model expected of them (their own file's estimate), and what
    `estimate` (the plan at hand) comes to at that pace: over all its runs,
    and at its last block's (the slowest when the data grows run by run)."""
    from perflab import spec
    from perflab.store import Store

    store = Store.open(out_dir, write=False)
    try:
        info = store.experiment()
        runs = [r for r in store.runs() if r["status"] == "done" and r["seconds"]]
        done = {r["id"] for r in runs}
        timed = [m for m in store.metrics() if m["name"].startswith("wall.") and m["run_id"] in done]
        phases = {name: [m["value"] for m in timed if m["name"] == f"wall.{name}_s"] for name in Laps.PHASES}
    finally:
        store.close()
    if not runs:
        raise UserError(f"{out_dir} holds no finished run to measure a pace from",
                        "give --like the output directory of an experiment that finished some runs")
    seconds = [float(r["seconds"]) for r in runs]
    said = f"measured in {out_dir} ({info['name']}): {_count(len(runs), 'finished run')}, {_fmt(sum(seconds))} in all"
    try:
        before = wall_time(spec.load_text(info["spec_text"], stored=True))
    except UserError:
        before = None  # a file this perflab no longer reads: its runs' seconds alone
    if before is None or before.timed < before.runs or not before.runs:
        mean = sum(seconds) / len(seconds)
        return (f"{said}, {_fmt(mean)} a run on average; at that, this plan's {_count(estimate.runs, 'run')} take "
                f"about {_fmt(mean * estimate.runs)}{_phases_text(phases)}")
    per_run = before.total_s / before.runs  # what the model gave each of its runs
    blocks: dict[int, list[float]] = {}
    for r in runs:
        blocks.setdefault(int(r["repetition"]), []).append(float(r["seconds"]))
    pace = sum(seconds) / (per_run * len(runs))
    first, last = (sum(blocks[b]) / (per_run * len(blocks[b])) for b in (min(blocks), max(blocks)))
    text = (f"{said}, x{pace:.2f} of what this model expected of them ({_fmt(per_run)} a run)"
            + (f"; block {min(blocks)} x{first:.2f}, block {max(blocks)} x{last:.2f}" if len(blocks) > 1 else "")
            + f". At that pace this plan takes about {_fmt(estimate.total_s * pace)}")
    if len(blocks) > 1 and abs(last - pace) > 0.05 * pace:
        text += f", at its last block's about {_fmt(estimate.total_s * last)}"
    return text + _phases_text(phases)


def _phases_text(phases: dict[str, list[float]]) -> str:
    """Where a run's time went: each phase's median (stores from before the
    phases were timed have none)."""
    known = {name: statistics.median(v) for name, v in phases.items() if v}
    if not known:
        return " (its runs predate the phases' wall times: where the time went is not known)"
    return "; a run's median " + ", ".join(f"{name} {_fmt(v)}" for name, v in known.items())
