"""What a plan costs before it runs: its expected wall time, which `check`
and `plan` print (and warn about past an hour).

Each run takes its warm-up and its duration (the workload's default when the
file gives none: the `DEFAULT_DURATION_S` of the workload's module), plus an
estimate of what surrounds it: the server's restart and the run's set-up
(RESTART_S), and each distinct data set's load once (LOAD_S). A run whose
length depends on the data (a query set, a count of transactions or
requests) is counted apart: its time is not guessed.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from perflab.analysis.precision import budget_blocks
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
        data.add(f"{spec.target.model_dump_json()}:{workload.data_key()}")
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
