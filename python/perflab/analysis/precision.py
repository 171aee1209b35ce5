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

The pilot's variance of log ratios is taken apart (Kalibera & Jones 2013):
each run's rate is the mean of its per-second rates, whose variance within
the run is estimated by non-overlapping batch means (Schmeiser 1982: about
ten batches, so that autocorrelated seconds give nearly independent batch
means), var(ln mean) ~ var(mean) / mean^2 (the delta method). The within-run
part of a block's log ratio is the sum of its two runs', the between-run
part the rest. The run length that spends the least wall time for a given
precision follows from the two and a run's fixed cost c (start, warm-up):
a block's variance is s_b^2 + W / T at run length T (W: the within-run
variance of a 1-s run), the blocks needed are proportional to it and each
costs c + T, so T* = sqrt(c W / s_b^2) (Kalibera & Jones's optimal
repetitions at each level, their eq. for two levels). The added blocks keep
the pilot's run length: Stein's interval is exact only with the pilot's
variance; the decision says which length would have served best.

References: Stein, C. (1945), "A two-sample test for a linear hypothesis
whose power is independent of the variance", Annals of Mathematical
Statistics 16(3), 243-258. Kalibera, T. & Jones, R. (2013), "Rigorous
benchmarking in reasonable time", ISMM 2013, 63-74. Schmeiser, B. (1982),
"Batch size effects in the analysis of simulation output", Operations
Research 30(3), 556-568.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perflab.analysis import steady
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


# --------------------------------------------------------------------- within a run

BATCHES = 10  # batch means a run's seconds are cut into (Schmeiser 1982: 10 to 30)
WITHIN_CITATION = "Kalibera & Jones 2013, ISMM; batch means, Schmeiser 1982"
# The shortest run the decision suggests: what MSER-5 needs to judge a
# series (steady.MIN_BATCHES batches of steady.BATCH seconds). Shorter runs
# measure their start-up: select-only at 8 clients under a CPU quota read
# 0.95 against 1.0 core as x0.982 in 4-s runs and x0.945 in 10-s ones, and
# the blocks' spread doubled (benchmarks/calibration_quota.py, 2026-11-29).
SHORTEST_RUN_S = float(steady.BATCH * steady.MIN_BATCHES)


def run_mean_rse(values: Sequence[float], batches: int = BATCHES) -> float | None:
    """The relative standard error of a run's mean rate from its per-second
    rates, by non-overlapping batch means: the seconds cut into `batches`
    batches of equal size (a partial last one left out; one second a batch
    with fewer seconds than batches), SE = sd(batch means) / sqrt(k), over
    the mean. sqrt of var(ln mean) by the delta method. None with fewer than
    two batches or a mean not above 0. Batches of a few seconds are still
    correlated: at an autocorrelation of 0.5 between seconds the variance
    comes out about 10% low from 120 s and 20% low from 60 s
    (tests/test_precision.py)."""
    x = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    size = max(1, len(x) // batches)
    k = len(x) // size
    if k < 2:
        return None
    means = x[: k * size].reshape(k, size).mean(axis=1)
    mean = float(means.mean())
    if not mean > 0:
        return None
    return float(means.std(ddof=1)) / math.sqrt(k) / mean


@dataclass(frozen=True)
class Components:
    """The pilot's variance of a comparison's log ratios, taken apart."""

    total: float  # the variance of the blocks' log ratios
    within: float  # its part from within the runs: mean over blocks of rse_a^2 + rse_b^2
    run_s: float  # the runs' measured length the within part is at

    @property
    def between(self) -> float:
        """What is left for the runs' differences (never below 0)."""
        return max(0.0, self.total - self.within)

    @property
    def within_share(self) -> float:
        return min(1.0, self.within / self.total) if self.total > 0 else 0.0


def components(d: Sequence[float], rse_a: Sequence[float], rse_b: Sequence[float], run_s: float) -> Components:
    """The variance of the blocks' log ratios `d` and its within-run part,
    from each block's two runs' relative standard errors (run_mean_rse)."""
    if len(d) < 2 or not len(rse_a) == len(rse_b) == len(d):
        raise ValueError("components need two or more blocks, each with both runs' standard errors")
    within = float(np.mean(np.square(rse_a) + np.square(rse_b)))
    return Components(float(np.var(d, ddof=1)), within, run_s)


def best_run_length(parts: Components, overhead_s: float) -> float | None:
    """The run length that needs the least wall time for a given precision
    (Kalibera & Jones 2013): T* = sqrt(c W / s_b^2), W the within-run
    variance of a 1-s run (within x run_s), c a run's fixed cost. None when
    the between-run part is 0: longer runs always help (the variance is all
    within the runs)."""
    if not parts.between > 0:
        return None
    return math.sqrt(max(0.0, overhead_s) * parts.within * parts.run_s / parts.between)


def within_text(parts: Components, overhead_s: float) -> str:
    """The decision's words on the variance within and between runs."""
    best = best_run_length(parts, overhead_s)
    text = (f"of the pilot's variance of log ratios, {parts.within_share:.0%} is within the runs (batch means of "
            f"per-second rates over {parts.run_s:.0f} s) and {1 - parts.within_share:.0%} between them")
    if best is None:
        text += "; longer runs would narrow it as much as more blocks"
    elif best < SHORTEST_RUN_S:
        text += (f"; at {overhead_s:.0f} s of fixed cost a run, the model ({WITHIN_CITATION}) would have runs of "
                 f"about {best:.0f} s, but not under {SHORTEST_RUN_S:.0f} s: the steady-state rule needs that many "
                 "measured seconds, and the model takes the noise between runs as the same at any length, which a "
                 "run's start-up is not")
    else:
        text += (f"; at {overhead_s:.0f} s of fixed cost a run, runs of about {best:.0f} s need the least wall time "
                 f"({WITHIN_CITATION})")
    return text + "; the added blocks keep the pilot's run length (Stein's interval needs the pilot's variance)"
