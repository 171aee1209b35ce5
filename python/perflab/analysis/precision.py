"""As many blocks as the question needs: Stein's two-stage procedure. Pure
functions, no I/O.

`[experiment] precision = "3%"` asks that every headline comparison's 95%
interval lie within x or / 1.03 of its estimate (a half-width of ln 1.03 on the
log scale); `budget = "30m"` bounds the experiment's wall time. The plan's
repetitions are the pilot (3 blocks unless the file says otherwise). From
the pilot's SD s0 of each comparison's log ratios (n0 blocks), the number of
blocks is fixed once:

    n = max(n0, ceil((t_{0.975, n0-1} * s0 / h)^2)),

the largest over the headline comparisons, and no more than the budget
allows (the pilot's wall time per block). After the n blocks the interval is

    mean(d_1..d_n) +- t_{0.975, n0-1} * s0 / sqrt(n),

with the pilot's SD and the pilot's degrees of freedom, whatever the later
blocks' spread: the mean of normal log ratios is independent of the pilot's
SD (and so of n), so (mean - mu) / (s0 / sqrt(n)) is t with n0 - 1 degrees of
freedom and the interval keeps 95% coverage exactly, and the test that
rejects outside it keeps its 5% level. A budget that stops n short leaves
coverage as it is (n is still a function of the pilot's SDs alone) and the
interval wider than the target: the report then says what the budget could
resolve. Re-estimating the SD from all n blocks (the "ordinary" t interval
after a data-chosen n), or adding blocks until the interval is narrow
enough, both cover less (about 91% and 89-93% in our simulations with a
pilot of 3; tests/test_precision.py).

Reference: Stein, C. (1945), "A two-sample test for a linear hypothesis
whose power is independent of the variance", Annals of Mathematical
Statistics 16(3), 243-258.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perflab.analysis.stats import CONFIDENCE, t_cdf, t_ppf

METHOD = "Stein's two-stage interval (pilot SD and df)"
CITATION = "Stein 1945, Ann. Math. Statist. 16:243-258"
PILOT_BLOCKS = 3  # the pilot's blocks when the file gives no repetitions


# --------------------------------------------------------------------- the keys


def precision_problems(meta: Any, combinations: int, searched: bool) -> list[tuple[str, str]]:
    """What `[experiment]` precision and budget need (`meta`, the section as
    read): each other, a plan in blocks of two or more combinations, and a
    pilot of two or more blocks. (key, problem) pairs."""
    if meta.precision is None and meta.budget is None:
        return []
    if meta.precision is None:
        return [("experiment.budget", "bounds the blocks that precision adds; give precision too "
                 "(precision = \"5%\"), or remove budget")]
    if meta.budget is None:
        return [("experiment.precision", "needs a budget, the most wall time to spend on it (budget = \"10m\")")]
    if searched or combinations < 2:
        return [("experiment.precision", "adds blocks of compared levels; give a factor with two or more levels, "
                 "or remove precision and budget")]
    if meta.repetitions < 2:
        return [("experiment.repetitions", f"got {meta.repetitions} with precision; allowed: 2 or more (the pilot's "
                 f"blocks; {PILOT_BLOCKS} when not given)")]
    if meta.order != "blocks":
        return [("experiment.order", f"got {meta.order!r} with precision; allowed: \"blocks\" (remove order)")]
    return []


def precision_fraction(text: str) -> float | None:
    """"3%" -> 0.03; None unless a percentage in (0, 100)."""
    body = text.strip()
    if not body.endswith("%"):
        return None
    try:
        value = float(body[:-1].strip())
    except ValueError:
        return None
    return value / 100.0 if 0.0 < value < 100.0 else None



# --------------------------------------------------------------------- Stein's rule


def half_width_log(precision: float) -> float:
    """The target half-width on the log scale of a precision given as a
    fraction (0.03: within x or / 1.03)."""
    return math.log1p(precision)


def stein_blocks(sd: float, pilot: int, precision: float, confidence: float = CONFIDENCE) -> int:
    """Blocks Stein's rule fixes from a pilot of `pilot` blocks whose log
    ratios have SD `sd`: max(pilot, ceil((t_{(1+c)/2, pilot-1} sd / h)^2))."""
    if pilot < 2:
        raise ValueError("Stein's rule needs a pilot of two or more blocks")
    if not sd > 0:
        return pilot
    t = t_ppf((1.0 + confidence) / 2.0, pilot - 1)
    return max(pilot, math.ceil((t * sd / half_width_log(precision)) ** 2 - 1e-9))


def stein_half_width(sd: float, pilot: int, blocks: int, confidence: float = CONFIDENCE) -> float:
    """The log-scale half-width of Stein's interval after `blocks` blocks."""
    return t_ppf((1.0 + confidence) / 2.0, pilot - 1) * sd / math.sqrt(blocks)


@dataclass(frozen=True)
class SteinInterval:
    n: int  # blocks in all
    pilot: int
    mean: float  # mean of ln(b / a) over all n blocks
    low: float
    high: float
    pilot_sd: float
    statistic: float
    p_value: float
    needed: int  # blocks the target precision needed (= n unless the budget stopped it)


def stein_interval(d: Sequence[float], pilot: int, precision: float | None = None,
                   confidence: float = CONFIDENCE) -> SteinInterval:
    """Stein's interval and test from the log ratios `d` in block order (the
    first `pilot` the pilot)."""
    x = np.asarray(d, dtype=float)
    if pilot < 2 or len(x) < pilot:
        raise ValueError("Stein's interval needs the whole pilot of two or more blocks")
    n = len(x)
    sd = float(x[:pilot].std(ddof=1))
    mean = float(x.mean())
    half = stein_half_width(sd, pilot, n, confidence)
    needed = stein_blocks(sd, pilot, precision, confidence) if precision else n
    if sd == 0:
        return SteinInterval(n, pilot, mean, mean, mean, 0.0, math.copysign(math.inf, mean) if mean else 0.0,
                             0.0 if mean else 1.0, needed)
    stat = mean / (sd / math.sqrt(n))
    p = min(1.0, 2.0 * (1.0 - t_cdf(abs(stat), pilot - 1)))
    return SteinInterval(n, pilot, mean, mean - half, mean + half, sd, stat, p, needed)


def budget_blocks(budget_s: float, pilot: int, pilot_s: float) -> int:
    """The most blocks in all that `budget_s` of wall time holds, at the
    pilot's `pilot_s` for its `pilot` blocks: the pilot, then whole blocks
    at the pilot's pace while the budget lasts."""
    if not pilot_s > 0:
        return pilot
    per_block = pilot_s / pilot
    return pilot + max(0, math.floor((budget_s - pilot_s) / per_block))
