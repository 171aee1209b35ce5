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

A capacity search ([search]) plans its probes one at a time, each once the
one before it is stored (`planned`; the next rate is search.next_rate's).
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from perflab.search import next_rate
from perflab.spec import Experiment
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
    return text


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
