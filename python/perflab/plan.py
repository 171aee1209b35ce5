"""The plan: the ordered list of runs an experiment expands to.

Runs are the cartesian product of [factors] (in the order the file lists the
factors and their values) times `repetitions`. "sequential" keeps that order,
with the repetitions of one combination back to back (so prepared data is
reused and durability runs stay in sequence); "random" shuffles the whole list
with a seeded generator, so drift over time does not favour one combination.
The seed is recorded in the store, and the same seed gives the same plan.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass
from typing import Any

from perflab.spec import Experiment


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
    return [
        PlannedRun(number=i, combination=c, repetition=rep, factors=combo)
        for i, (c, rep, combo) in enumerate(entries, start=1)
    ]
