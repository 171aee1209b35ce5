"""The plan: the ordered list of runs an experiment expands to.

Runs are the cartesian product of [factors] (in the order the file lists the
factors and their values) times `repetitions`. "blocks" (the default) makes
each repetition a block: every combination once, in a fresh seeded random
order, so a slow drift of the machine falls on every level alike and the
analysis compares levels within each block (a randomized complete block
design). "sequential" keeps the product's order, with the repetitions of one
combination back to back (so prepared data is reused and durability runs stay
in sequence); "random" shuffles the whole list with a seeded generator. The
seed is recorded in the store, and the same seed gives the same plan.

With `precision` (and `budget`) the plan as written is a pilot; once it is
over, `add_blocks` appends the blocks Stein's two-stage rule asks for
(perflab.analysis.precision), an extension of the same seeded plan.

A capacity search ([search]) plans its probes one at a time, each once the
one before it is stored (`planned`; the next rate is search.next_rate's).
"""

from __future__ import annotations

import json
import math
import random
import secrets
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from perflab.analysis import precision
from perflab.model import without_label
from perflab.search import next_rate
from perflab.spec import MAX_PLAN_RUNS, Experiment
from perflab.units import plural

if TYPE_CHECKING:
    from collections.abc import Iterator

    from perflab.progress import Progress
    from perflab.store import Store


@dataclass(frozen=True)
class PlannedRun:
    number: int  # 1-based position in the plan
    combination: int  # 1-based index of the factor combination
    repetition: int  # 1-based
    factors: dict[str, Any]


def choose_seed(exp: Experiment) -> int:
    """The file's seed, or a fresh one (recorded in the store) when none is given."""
    if exp.meta.seed is not None:
        return exp.meta.seed
    return secrets.randbelow(2**31)


def expand(exp: Experiment, seed: int) -> list[PlannedRun]:
    entries = [
        (c, rep, combo)
        for c, combo in enumerate(exp.combinations(), start=1)
        for rep in range(1, exp.meta.repetitions + 1)
    ]
    if exp.meta.order == "random":
        random.Random(seed).shuffle(entries)
    elif exp.meta.order == "blocks":
        entries = _blocks(exp, seed)
    return [
        PlannedRun(number=i, combination=c, repetition=rep, factors=combo)
        for i, (c, rep, combo) in enumerate(entries, start=1)
    ]


# ---------------------------------------------------------------- blocks

# What one start of a managed server costs (stop, start, recovery), a round
# figure: the cost-aware block order weighs it against the runs' own time.
SERVER_START_S = 10.0


def _start_groups(exp: Experiment) -> list[list[int]]:
    """Combination indexes (1-based) grouped by the server start they share:
    equal target settings, so going from one to the next starts nothing."""
    groups: dict[str, list[int]] = {}
    for c, combo in enumerate(exp.combinations(), start=1):
        key = exp.resolve(combo).target.model_dump_json()
        groups.setdefault(key, []).append(c)
    return list(groups.values())


def restarts_dominate(exp: Experiment) -> tuple[bool, str]:
    """Whether a block in a fully random order would spend longer starting
    servers than running (each change of the target's settings between
    neighbours a start of SERVER_START_S), and the figures that say so. Runs
    without a stated duration are taken as long: no grouping."""
    groups = _start_groups(exp)
    n = sum(len(g) for g in groups)
    if len(groups) < 2 or len(groups) == n:
        return False, ""
    settings = exp.resolve(exp.combinations()[0]).workload
    duration = getattr(settings, "duration", None)
    if not duration:
        return False, ""
    run_s = float(duration) + float(getattr(settings, "warmup", 0.0) or 0.0)
    # neighbours in a random order of n items fall in one group with probability sum g(g-1) / n(n-1)
    same = sum(len(g) * (len(g) - 1) for g in groups) / (n * (n - 1))
    shuffled = 1 + (n - 1) * (1 - same)
    extra_s = (shuffled - len(groups)) * SERVER_START_S
    return extra_s > n * run_s, (f"restarts dominate: a random order starts the server {shuffled:.1f} times a "
                                 f"block, not {len(groups)}: about {extra_s:.0f} s more at {SERVER_START_S:g} s a "
                                 f"start, against {n * run_s:.0f} s of runs")


def _blocks(exp: Experiment, seed: int) -> list[tuple[int, int, dict[str, Any]]]:
    """Each repetition a block: every combination once, in a fresh random
    order from one seeded generator; when restarts dominate, the combinations
    that share a server start stay adjacent (the groups in a random order,
    each group's combinations in a random order)."""
    combos = exp.combinations()
    rng = random.Random(seed)
    grouped = restarts_dominate(exp)[0]
    groups = _start_groups(exp) if grouped else [[c] for c in range(1, len(combos) + 1)]
    entries = []
    for rep in range(1, exp.meta.repetitions + 1):
        order = [list(g) for g in groups]
        rng.shuffle(order)
        for g in order:
            rng.shuffle(g)
        entries += [(c, rep, combos[c - 1]) for g in order for c in g]
    return entries


def before_blocks(exp: Experiment, seed: int) -> list[PlannedRun] | None:
    """The plan of a store made before "blocks" was the default, for a file
    that names no order: the product in sequence (`resume` of such a store).
    None when the file names its order or its default is not blocks."""
    named = exp.raw.get("experiment")
    if exp.meta.order != "blocks" or (isinstance(named, dict) and "order" in named):
        return None
    return expand(replace(exp, meta=exp.meta.model_copy(update={"order": "sequential"})), seed)


def design(exp: Experiment) -> str:
    """The plan's design in words (`perflab plan`, the report)."""
    text = _order(exp)
    if exp.meta.data == "fresh":
        text += '; every run of a workload that writes on its data as loaded (data = "fresh")'
    return text


def _order(exp: Experiment) -> str:
    combos, reps = len(exp.combinations()), exp.meta.repetitions
    if exp.meta.order == "random":
        return f"random order over the whole plan ({plural(combos, 'combination')} x {plural(reps, 'repetition')})"
    if exp.meta.order == "sequential" or combos == 1:
        return f"sequential: each combination's {reps} repetition(s) back to back"
    grouped, why = restarts_dominate(exp)
    text = (f"{reps} block(s): each repetition is a block, every one of the {combos} combinations once in a fresh "
            "random order")
    if grouped:
        text += f"; combinations that share a server start kept adjacent inside a block ({why})"
    if exp.meta.precision is not None:
        text += (f"; a pilot: then the blocks that Stein's two-stage rule fixes for precision {exp.meta.precision} "
                 "within the budget")
    return text


# ---------------------------------------------------------------- precision: blocks after the pilot


def with_blocks(exp: Experiment, blocks: int) -> Experiment:
    """The experiment with `blocks` repetitions: its plan in blocks begins
    with the plan as written (one seeded generator draws block after block)."""
    return replace(exp, meta=exp.meta.model_copy(update={"repetitions": blocks}))


def headline_pairs(exp: Experiment) -> list[tuple[str, int, int]]:
    """(factor, baseline combination, level combination), 1-based: each
    factor's levels against its baseline ([experiment.baseline], else the
    first level) at each combination of the other factors, as the report
    compares them."""
    combos = exp.combinations()
    index = {json.dumps(c, sort_keys=True, default=str): i for i, c in enumerate(combos, start=1)}
    out = []
    for factor, levels in exp.factors.items():
        if len(levels) < 2:
            continue
        named = exp.meta.baseline.get(factor)
        base = next((v for v in levels if named is not None and without_label(v) == without_label(named)), levels[0])
        for i, combo in enumerate(combos, start=1):
            if combo[factor] != base:
                partner = index[json.dumps(combo | {factor: base}, sort_keys=True, default=str)]
                out.append((factor, partner, i))
    return out


def _seconds_between(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def precision_blocks(exp: Experiment, store: Store) -> tuple[int, str] | None:
    """Stein's decision after the pilot (perflab.analysis.precision): the
    blocks in all that every headline comparison's target half-width needs
    (every primary one's, where [experiment] primary names the question),
    bounded by what the budget holds at the pilot's pace, and the decision in
    words with its inputs. From the store alone (the pilot's figures and
    times), so a resumed experiment decides as an uninterrupted one. None
    without precision, before the pilot is over, or once decided."""
    fraction, pilot = exp.meta.precision_fraction, exp.meta.repetitions
    if fraction is None or exp.meta.budget is None or exp.meta.order != "blocks" or exp.search is not None:
        return None
    runs = store.runs()
    if any(r["repetition"] > pilot or r["status"] in ("planned", "running") for r in runs):
        return None
    done = {r["id"]: r for r in runs if r["status"] == "done"}
    values: dict[tuple[int, int], dict[str, float]] = {}
    for m in store.metrics():
        r = done.get(m["run_id"])
        if r is not None and m["value"] is not None and m["value"] > 0:
            values.setdefault((r["repetition"], r["combination"]), {})[m["name"]] = m["value"]
    headline = list(dict.fromkeys(name for r in runs for name in r["headline"]))
    # the comparisons precision aims at: the experiment's question where it names one
    asked = exp.meta.primary or headline
    within: list[tuple[int, precision.Components]] = []  # the rate's comparisons, taken apart
    needs = []
    for factor, a, b in headline_pairs(exp):
        for name in asked:
            d = [math.log(values[(k, b)][name] / values[(k, a)][name]) for k in range(1, pilot + 1)
                 if name in values.get((k, a), {}) and name in values.get((k, b), {})]
            if len(d) == pilot:
                sd = float(np.std(d, ddof=1))
                needs.append((precision.stein_blocks(sd, pilot, fraction), sd, f"{name}, {factor} #{b} against #{a}"))
                parts = _components(values, d, a, b, pilot) if headline and name == headline[0] else None
                if parts is not None:
                    within.append((needs[-1][0], parts))
    started = [r["started_at"] for r in runs if r["started_at"]]
    ended = [r["ended_at"] for r in runs if r["ended_at"]]
    if not needs or not started or not ended:
        return pilot, (f"precision {exp.meta.precision}: no {'primary' if exp.meta.primary else 'headline'} "
                       f"comparison has all {pilot} pilot blocks; "
                       "no blocks added")
    pilot_s = _seconds_between(min(started), max(ended))
    most = min(precision.budget_blocks(exp.meta.budget, pilot, pilot_s), MAX_PLAN_RUNS // len(exp.combinations()))
    need, sd, which = max(needs)
    blocks = min(need, most)
    text = (f"precision {exp.meta.precision} by {precision.METHOD} ({precision.CITATION}): the pilot's {pilot} blocks "
            f"took {pilot_s:.0f} s; the widest comparison ({which}, pilot SD of log ratios {sd:.4f}) needs {need} "
            f"blocks; the budget ({exp.meta.budget:.0f} s) holds {most}: {blocks} blocks in all")
    if blocks < need:
        text += f" (the budget ends first: the target needs {need})"
    if within:
        parts = max(within, key=lambda w: w[0])[1]
        overhead = pilot_s / (pilot * len(exp.combinations())) - parts.run_s
        text += f"; {headline[0]}: " + precision.within_text(parts, overhead)
    return blocks, text


def _components(values: dict[tuple[int, int], dict[str, float]], d: list[float], a: int, b: int,
                pilot: int) -> precision.Components | None:
    """The pilot's variance of one comparison's log ratios `d` of the rate
    (combination b against a), taken apart with each run's within-run
    standard error (the harness's rate_rse over its steady window). None
    when a run has none."""
    runs = [values.get((k, c), {}) for k in range(1, pilot + 1) for c in (a, b)]
    if not all("rate_rse" in v and "measured_s" in v for v in runs):
        return None
    run_s = float(np.mean([v["measured_s"] - v.get("steady_start_s", 0.0) for v in runs]))
    return precision.components(d, [v["rate_rse"] for v in runs[0::2]], [v["rate_rse"] for v in runs[1::2]], run_s)


def add_blocks(exp: Experiment, store: Store, plan: dict[int, PlannedRun]) -> list[int]:
    """After the pilot, the runs of the blocks precision_blocks decides on:
    recorded (an experiment event `precision`, then the runs planned in the
    store) and added to `plan`. Their numbers, in plan order."""
    decided = precision_blocks(exp, store)
    if decided is None:
        return []
    blocks, text = decided
    store.add_event(None, kind="precision", message=text)
    new = [r for r in expand(with_blocks(exp, blocks), store.experiment()["seed"]) if r.number not in plan]
    if new:
        store.add_plan(new)
        plan.update({r.number: r for r in new})
    return [r.number for r in new]


def block_spans(store: Store) -> list[float]:
    """Each finished block's wall time, in the blocks' order: its first
    run's start to its last run's end (an interruption between blocks
    counts in none)."""
    spans: dict[int, tuple[str, str]] = {}
    for r in store.runs():
        if r["status"] in ("done", "failed") and r["started_at"] and r["ended_at"]:
            first, last = spans.get(r["repetition"], (r["started_at"], r["ended_at"]))
            spans[r["repetition"]] = (min(first, r["started_at"]), max(last, r["ended_at"]))
    return [_seconds_between(a, b) for a, b in spans.values()]


def within_budget(exp: Experiment, store: Store, plan: dict[int, PlannedRun], added: list[int]) -> Iterator[int]:
    """The added blocks' runs, a whole block at a time while the budget
    holds one more at the pace so far (the mean block's or the last one's,
    whichever is slower: a data set that grows with every run, as TPC-C's
    does, makes each block slower than the one before); once it does not,
    the blocks left are taken back from the plan (never begun, nothing
    measured). Stopping on time, not on the figures, leaves Stein's
    coverage as it is: only the interval is wider (the report says what it
    resolved)."""
    by_block: dict[int, list[int]] = {}
    for n in added:
        by_block.setdefault(plan[n].repetition, []).append(n)
    budget = exp.meta.budget
    for block, numbers in sorted(by_block.items()):
        spans = block_spans(store)
        pace = max(sum(spans) / len(spans), spans[-1]) if spans else 0.0
        if budget is not None and spans and sum(spans) + pace > budget:
            left = [n for b, ns in by_block.items() if b >= block for n in ns]
            dropped = store.drop_planned(left, f"the budget ({budget:.0f} s) was spent after {len(spans)} blocks "
                                               f"({sum(spans):.0f} s; the next at {pace:.1f} s, the slower of "
                                               f"the mean block and the last): "
                                               f"the {len(by_block) - block + min(by_block)} blocks left are not run")
            for n in dropped:
                plan.pop(n, None)
            return
        yield from numbers


def stored_plan(store: Store) -> list[PlannedRun]:
    """A search's plan: its probes as stored."""
    return [PlannedRun(r["id"], r["combination"], r["repetition"], r["factors"]) for r in store.runs()]


def planned(exp: Experiment, store: Store, plan: dict[int, PlannedRun], todo: list[int],
            progress: Progress | None = None) -> Iterator[int]:
    """The run numbers to run: `todo`, then, for a search, each next probe,
    planned (in `plan` and the store, counted in `progress`) only once the
    one before it is stored."""
    yield from todo
    if exp.search is None:
        added = add_blocks(exp, store, plan)
        if added and progress is not None:
            progress.total = max(progress.total, max(added))
        yield from within_budget(exp, store, plan, added)
        return
    while (rate := next_rate(exp.search, store)) is not None:
        runs = store.runs()
        same = [r for r in runs if r["factors"].get(exp.search.over) == rate]
        combination = same[0]["combination"] if same else max((r["combination"] for r in runs), default=0) + 1
        probe = PlannedRun(max((r["id"] for r in runs), default=0) + 1, combination, len(same) + 1,
                           {exp.search.over: rate})
        plan[probe.number] = probe
        store.add_plan([probe])
        if progress is not None:
            progress.total = max(progress.total, probe.number)
        yield probe.number
