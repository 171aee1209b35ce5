"""Capacity search: the highest rate that meets a latency goal.

An experiment with a `[search]` section names a numeric path (`over`, e.g.
"workload.rate"), a goal ("latency_p99_ms <= 5", several joined by "and";
no errors and no skipped transactions are implied) and a range. perflab
runs a probe at `from`, doubles the rate while the goal is met (never past
`to`), then bisects between the highest rate that met it and the lowest
above that did not, until the two are within `resolution` (relative) of
each other; then it runs the highest rate that met the goal again, up to
`repetitions` runs in all. A rate meets the goal when every run of it does:
a repetition that misses moves the boundary down and the bisection goes on.

Every probe is a stored run, its rate the level of the factor `over`: the
next probe is decided from the store alone (`next_rate`), so `resume`
continues a search where it stopped, and `show`, `export` and the report
read the answer from the store (`answer`).
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator, model_validator

from perflab import tomldoc
from perflab.settings_model import StrictModel

if TYPE_CHECKING:
    from collections.abc import Iterable

    from perflab.section import Section
    from perflab.store import Store

# The most probes one search runs (repetitions at the boundary included).
DEFAULT_MAX_PROBES = 30
_CONDITION = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|<|>|==)\s*(-?[0-9.]+(?:[eE][-+]?\d+)?)\s*$")
_OPS = {"<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, ">": lambda a, b: a > b,
        "==": lambda a, b: a == b}
# Implied by every goal: a run with errors or skipped transactions does not meet it.
IMPLIED = (("errors", "==", 0.0), ("failed", "==", 0.0), ("skipped", "==", 0.0))


def parse_goal(text: str) -> list[tuple[str, str, float]]:
    """"latency_p99_ms <= 5 and errors == 0" -> [(metric, op, number), ...];
    ValueError names what is wrong."""
    out = []
    for part in re.split(r"\s+and\s+", text.strip()):
        m = _CONDITION.match(part)
        if m is None:
            raise ValueError(f"got {part!r}; allowed: METRIC OP NUMBER (OP one of <=, <, >=, >, ==), several "
                             "joined by \"and\", e.g. \"latency_p99_ms <= 5\"")
        try:
            number = float(m.group(3))
        except ValueError:
            raise ValueError(f"got {m.group(3)!r} in {part!r}; allowed: a number") from None
        out.append((m.group(1), m.group(2), number))
    return out


class SearchSettings(StrictModel):
    # The numeric path the search varies (a factor path, e.g. "workload.rate").
    over: str = Field(min_length=1)
    # METRIC OP NUMBER, several joined by "and"; errors == 0 is implied.
    goal: str = Field(min_length=1)
    # The range of rates: the first probe runs at `from`, none above `to`.
    from_: float = Field(alias="from", gt=0)
    to: float = Field(gt=0)
    # Relative width at which the bisection stops (0.05: within 5%).
    resolution: float = Field(default=0.05, gt=0, lt=1)
    # Runs of the boundary rate in all.
    repetitions: int = Field(default=3, ge=1, le=20)
    # The most probes the search runs (repetitions at the boundary included).
    max_probes: int = Field(default=DEFAULT_MAX_PROBES, ge=2, le=200)

    @field_validator("goal")
    @classmethod
    def _goal(cls, value: str) -> str:
        parse_goal(value)
        return value

    @model_validator(mode="after")
    def _range(self) -> SearchSettings:
        if self.to <= self.from_:
            raise ValueError(f"got from = {self.from_:g} and to = {self.to:g}; allowed: from < to")
        return self

    def conditions(self) -> list[tuple[str, str, float]]:
        return parse_goal(self.goal)


def goal_problems(s: SearchSettings, kind: str, metrics: tuple[str, ...], collectors: Iterable[str],
                  known_collectors: Iterable[str]) -> list[tuple[str, str]]:
    """A goal on a metric the run will not store, refused at check: one the
    workload `kind` does not declare (its `metrics`, fnmatch patterns), or
    one of a collector that is not on. Other dotted names (the runner's own,
    load.*, resources.*) are taken as given; a workload that declares
    nothing is not checked."""
    on, known = set(collectors), set(known_collectors)
    problems = []
    for metric, _, _ in s.conditions():
        head, dotted, _ = metric.partition(".")
        if dotted and head in known and head not in on:
            why = f"collector {head!r} is not on in this experiment (collect.{head})"
        elif metrics and not (dotted and head in known) and not any(fnmatch.fnmatchcase(metric, p) for p in metrics):
            if dotted and not any(p.startswith(head + ".") or p.startswith("*.") for p in metrics):
                continue  # a dotted name of the runner's own (load.total_s, resources.*)
            why = f"workload {kind!r} does not produce it"
        else:
            continue
        produced = [p for p in metrics if "." not in p] + [p for p in metrics if "." in p]
        problems.append(("search.goal", f"got {metric!r} in {s.goal!r}: {why}; allowed: a metric the run stores: "
                         f"{', '.join(produced + [f'{c}.*' for c in sorted(on)])}"))
    return problems


def settings_of(spec_text: str) -> SearchSettings | None:
    """The [search] section of a stored experiment's text, if it has one."""
    try:
        raw = tomldoc.parse(spec_text)[0].get("search")
    except tomldoc.TomlProblem:
        return None
    return SearchSettings.model_validate(raw) if isinstance(raw, dict) else None


def rate_of(factors: dict[str, Any], s: SearchSettings) -> float:
    """A run's probed rate, for ordering probes by it (a run without one first)."""
    rate = factors.get(s.over)
    return float(rate) if isinstance(rate, int | float) else -math.inf


def rounded(rate: float) -> float:
    """A probe's rate: 3 significant digits, a whole number from 100 on."""
    if rate <= 0:
        return rate
    digits = 3 - int(math.floor(math.log10(rate))) - 1
    value = round(rate, digits)
    return int(value) if value >= 100 else value


@dataclass
class Probe:
    rate: float
    run_id: int
    met: bool
    values: dict[str, float]
    why: str  # the first condition it missed ("" when met)


# A probe meets a rate only when it delivered this share of it (issue 43): a
# server that fell behind the schedule has not sustained the rate, whatever its
# latency says.
DELIVERED_SHARE = 0.95
# The run's achieved rate, by workload: requests or transactions per second.
ACHIEVED = ("req_per_s", "tps")
# The tail an answer states beside its goal, at the sustained rate.
TAIL = (("latency_p99_9_ms", "p99.9"), ("latency_max_ms", "max"))


def delivery_floor(rate: float, values: dict[str, float]) -> float:
    """The least achieved rate that delivers `rate`: DELIVERED_SHARE of it,
    less three standard deviations of a Poisson schedule's own count over the
    measured window (sqrt(rate / T)), so that a short probe is not missed by
    the draw of its arrivals."""
    window = values.get("measured_s") or 0.0
    spread = 3.0 * math.sqrt(rate / window) if window > 0 else 0.0
    return DELIVERED_SHARE * rate - spread


def meets(s: SearchSettings, values: dict[str, float], status: str,
          rate: float | None = None) -> tuple[bool, str]:
    """Whether a probe's run met the goal: done, every condition, no error,
    and (a rate searched) at least DELIVERED_SHARE of `rate` achieved."""
    if status != "done":
        return False, f"the run {status}"
    achieved = next((values[m] for m in ACHIEVED if m in values), None)
    if rate and s.over.endswith("rate") and achieved is not None and achieved < delivery_floor(rate, values):
        return False, f"delivered {achieved:.4g} of {rate:g}/s ({achieved / rate:.0%}, under {DELIVERED_SHARE:.0%})"
    for metric, op, number in s.conditions():
        if metric not in values:
            return False, f"no metric {metric}"
        if not _OPS[op](values[metric], number):
            return False, f"{metric} {values[metric]:.4g}"
    for metric, op, number in IMPLIED:
        if metric in values and not _OPS[op](values[metric], number):
            return False, f"{metric} {values[metric]:.0f}"
    return True, ""


def probes(s: SearchSettings, store: Store) -> list[Probe]:
    """The search's finished probes, in run order (failed runs miss the goal)."""
    values: dict[int, dict[str, float]] = {}
    for m in store.metrics():
        values.setdefault(m["run_id"], {})[m["name"]] = m["value"]
    out = []
    for r in store.runs():
        rate = r["factors"].get(s.over)
        if r["status"] not in ("done", "failed") or not isinstance(rate, int | float):
            continue
        v = values.get(r["id"], {})
        met, why = meets(s, v, r["status"], rate)
        out.append(Probe(rate, r["id"], met, v, why))
    return out


@dataclass
class State:
    next_rate: float | None  # None: the search is over
    lo: float | None  # the highest rate every run of which met the goal
    hi: float | None  # the lowest rate above lo that missed it
    probes: list[Probe]
    capped: bool = False


def state(s: SearchSettings, done: list[Probe]) -> State:
    """Where a search stands after the probes `done`, and its next rate."""
    by_rate: dict[float, list[bool]] = {}
    for p in done:
        by_rate.setdefault(p.rate, []).append(p.met)
    met = sorted(r for r, ok in by_rate.items() if all(ok))
    lo = met[-1] if met else None
    missed = sorted(r for r, ok in by_rate.items() if not all(ok) and (lo is None or r > lo))
    hi = missed[0] if missed else None
    start = rounded(s.from_)
    if len(done) >= s.max_probes:
        return State(None, lo, hi, done, capped=True)
    if start not in by_rate:
        return State(start, lo, hi, done)
    if lo is None:
        return State(None, None, hi, done)  # not met at any rate tried
    if hi is None and lo < rounded(s.to):
        return State(min(rounded(s.to), rounded(lo * 2)), lo, hi, done)
    if hi is not None and (hi - lo) / lo > s.resolution:
        mid = rounded((lo + hi) / 2)
        if lo < mid < hi:
            return State(mid, lo, hi, done)
    if len(by_rate[lo]) < s.repetitions:
        return State(lo, lo, hi, done)
    return State(None, lo, hi, done)


def next_rate(s: SearchSettings, store: Store) -> float | None:
    """The next probe's rate, from the store alone; None when the search is over."""
    return state(s, probes(s, store)).next_rate


@dataclass
class Answer:
    settings: SearchSettings
    lo: float | None
    hi: float | None
    probes: list[Probe]
    over_unit: str
    finished: bool
    capped: bool

    def text(self) -> str:
        s, unit = self.settings, self.over_unit
        tried = f"{len(self.probes)} probe{'s' if len(self.probes) != 1 else ''}"
        if self.lo is None:
            if not self.probes:
                return f"search: no probe has run yet ({s.over} from {s.from_:g})"
            # the lowest rate's run that missed (a rate met once and missed on its repetition is not met)
            low = min((p for p in self.probes if not p.met), key=lambda p: p.rate)
            return (f"search: {s.goal}: not met at any rate tried (lowest: {low.rate:g}{unit}, "
                    f"{low.why}); {tried}")
        if self.hi is not None:
            interval = f"between {self.lo:g} and {self.hi:g}{unit}"
        else:
            interval = f"at least {self.lo:g}{unit}, the top of the range"
        state = "" if self.finished else " (search not finished: resume continues it)"
        if self.capped:
            state = f" (stopped at max_probes = {s.max_probes})"
        at_lo = [p for p in self.probes if p.rate == self.lo]
        runs = len(at_lo)
        # the tail at that rate, as the runs there measured it (their worst)
        tail = [f"{label} {max(p.values[m] for p in at_lo if m in p.values):.4g} ms" for m, label in TAIL
                if any(m in p.values for p in at_lo)]
        return (f"search: sustains {self.lo:g}{unit} at {s.goal} (capacity {interval}; {runs} run"
                f"{'s' if runs != 1 else ''} at {self.lo:g}; {tried})"
                + (f"; there: {', '.join(tail)}" if tail else "")
                + f"; a probe meets a rate only when it delivers {DELIVERED_SHARE:.0%} of it{state}")


def answer(store: Store) -> Answer | None:
    """The search's answer from the store; None without a [search]."""
    s = settings_of(store.experiment()["spec_text"])
    if s is None:
        return None
    st = state(s, probes(s, store))
    unit = f" {rate_unit(store, s)}" if s.over.endswith("rate") else ""
    return Answer(s, st.lo, st.hi, st.probes, unit, st.next_rate is None, st.capped)


def rate_unit(store: Store, s: SearchSettings) -> str:
    """The unit of what the search varies: the runs' own rate unit (req/s,
    tx/s) when it is a rate."""
    units = {m["name"]: m["unit"] for m in store.metrics() if m["name"] in ("rate_target", "tps", "req_per_s")}
    if s.over.endswith("rate"):
        return units.get("rate_target") or units.get("req_per_s") or units.get("tps") or "1/s"
    return ""


def export_rows(store: Store) -> list[dict[str, Any]]:
    """Each probe as a `search.probe` row of its run (value: its rate,
    method: "met" or "missed: why"); `search.sustainable` (and the first
    rate above it that missed) as rows with no run, the goal in their `method`."""
    a = answer(store)
    if a is None:
        return []
    unit = rate_unit(store, a.settings)
    rows: list[dict[str, Any]] = [
        {"run": p.run_id, "metric": "search.probe", "value": p.rate, "unit": unit or a.settings.over,
         "method": "met" if p.met else f"missed: {p.why}"} for p in a.probes]
    if a.lo is None or not a.finished:
        return rows
    rows += [{"metric": "search.sustainable", "value": a.lo, "unit": unit or a.settings.over,
             "method": f"goal: {a.settings.goal}"}]
    if a.hi is not None:
        rows.append({"metric": "search.first_missed", "value": a.hi, "unit": unit or a.settings.over,
                     "method": f"goal: {a.settings.goal}"})
    return rows


def report_sections(store: Store) -> list[Section]:
    """The answer and the latency–rate curve with the knee marked."""
    from perflab.section import Figure, Section, Table, Text

    a = answer(store)
    if a is None:
        return []
    s = a.settings
    metric, op, goal_value = s.conditions()[0]
    blocks: list[Any] = [Text(a.text().removeprefix("search: ") + ". Each probe is a run at one rate; a rate "
                              "meets the goal when every run of it does, with no errors and no skipped "
                              "transactions. The search doubles the rate from `from` while the goal is met, "
                              "bisects to the resolution, then runs the boundary again.")]
    rows = [[p.run_id, p.rate, p.values.get(metric), "met" if p.met else f"missed: {p.why}"]
            for p in sorted(a.probes, key=lambda p: (p.rate, p.run_id))]
    blocks.append(Table(["run", s.over, metric, "goal"], rows,
                        f"Probes by rate, the lowest first (run: the order they ran in); goal: {s.goal}"))
    if a.probes:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure as MplFigure

        fig = MplFigure(figsize=(6.4, 3.6))
        ax = fig.add_subplot()
        points = sorted((p.rate, p.values[metric], p.met) for p in a.probes if metric in p.values)
        if points:
            # the curve through each rate's deciding run (a rate meets the goal when every run of it does):
            # its worst value by the goal's direction
            worst: dict[float, float] = {}
            for x, y, _ in points:
                worst[x] = y if x not in worst else (max if op in ("<=", "<") else min)(worst[x], y)
            ax.plot(list(worst), list(worst.values()), color="0.6", linewidth=1,
                    label="worst run per rate" if len(worst) < len(points) else None)
            for met in (True, False):
                xs = [x for x, _, m in points if m == met]
                ys = [y for _, y, m in points if m == met]
                if xs:
                    ax.scatter(xs, ys, marker="o" if met else "x", label="met" if met else "missed", zorder=3)
        if op != "==":
            ax.axhline(goal_value, linestyle="--", color="tab:red", linewidth=1,
                       label=f"goal: {metric} {op} {goal_value:g}")
        if a.lo is not None:
            ax.axvline(a.lo, linestyle=":", color="tab:green", linewidth=1.5, label=f"knee: {a.lo:g}{a.over_unit}")
        ax.set_xlabel(f"{s.over} ({a.over_unit.strip()})" if a.over_unit else s.over)
        ax.set_ylabel(metric)
        if points and min(y for _, y, _ in points) > 0:
            ax.set_yscale("log")
        ax.legend(loc="upper left", fontsize="small")
        fig.tight_layout()
        blocks.append(Figure("search-latency-rate", fig, f"{metric} against {s.over}: every probe; the dotted line "
                             "is the highest rate that met the goal (the knee)"))
    return [Section("Capacity search", blocks, headline=True)]
