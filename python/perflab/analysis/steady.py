"""Steady state: where a run's per-second series stops moving, by MSER-5.

A run measures from the end of its configured warm-up (the minimum), but a
server may still be filling its caches, checkpointing or vacuuming then.
MSER-5 (the Marginal Standard Error Rule on batch means of 5 observations)
picks the truncation point d that minimises the standard error of the mean
of what is left:

    MSER(d) = sum_{j > d} (Y_j - Ybar_d)^2 / (k - d)^2

over batch means Y_1..Y_k of 5 consecutive seconds. As is standard, d is
looked for in the first half of the series only: a minimum found beyond
(or beyond a stated maximum) means the series never settled in the run, and
the run is flagged `no-steady-state`.

References
- White (1997), "An effective truncation heuristic for bias reduction in
  simulation output", Simulation 69(6):323-334.
- White, Cobb & Spratt (2000), "A comparison of five steady-state truncation
  heuristics for simulation", Proc. Winter Simulation Conference, 755-760
  (MSER-5: batches of 5).
- Hoad, Robinson & Davies (2010), "Automating warm-up length estimation",
  J. Operational Research Society 61:1389-1403 (MSER-5 recommended; the
  first-half rule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perflab.analysis.stats import t_cdf

BATCH = 5  # seconds a batch mean covers (MSER-5)
# A truncation at the first half's end says the series had not settled only
# when what is left still trends: its batch means' OLS slope at this level
# (two-sided t test), so a stationary but short series is not flagged by chance.
TREND_P = 0.01
MIN_BATCHES = 4  # fewer batch means and no truncation is looked for
METHOD = "MSER-5 (White 1997) on the per-second series"


@dataclass(frozen=True)
class SteadyState:
    """Where the steady window of a per-second series starts."""

    start_s: float  # the series' time where the steady window starts (its first sample when no truncation)
    truncated: int  # seconds cut after the warm-up
    reached: bool  # False: the minimum lay beyond the rule's limit: no steady state in the run
    method: str = METHOD


def mser_truncation(values: Sequence[float], batch: int = BATCH) -> tuple[int, int]:
    """(d, k): the MSER truncation point in batches over the k full batch
    means of `values` (a partial last batch is left out), looked for in the
    first half, d in 0..k//2 (the rule's own limit: near the end a few
    batches' small spread would win by chance)."""
    x = np.asarray(values, dtype=float)
    k = len(x) // batch
    if k < 2:
        return 0, k
    y = x[: k * batch].reshape(k, batch).mean(axis=1)
    # suffix sums give every d's mean and squared deviation at once
    rev = y[::-1]
    n = np.arange(1, k + 1, dtype=float)
    s1 = np.cumsum(rev)[::-1]  # sum of y[d:]
    s2 = np.cumsum(rev * rev)[::-1]
    left = n[::-1]  # k - d
    ss = s2 - s1 * s1 / left
    mser = ss / (left * left)
    d = int(np.argmin(mser[: k // 2 + 1]))
    return d, k


def steady_state(times: Sequence[float], values: Sequence[float], max_s: float | None = None,
                 batch: int = BATCH) -> SteadyState | None:
    """The steady window of a per-second series sampled at `times` (seconds,
    the warm-up already left out: it is the minimum), by MSER-5. Not reached
    when the minimum lies at the first half's end (MSER still falling) and
    what is left still trends (TREND_P): the series had not settled by half
    the run; or when it lies beyond `max_s` seconds after its first sample. None with fewer than MIN_BATCHES batches."""
    t = np.asarray(times, dtype=float)
    x = np.asarray(values, dtype=float)
    keep = np.isfinite(t) & np.isfinite(x)
    t, x = t[keep], x[keep]
    order = np.argsort(t, kind="stable")
    t, x = t[order], x[order]
    if len(x) // batch < MIN_BATCHES:
        return None
    d, k = mser_truncation(x, batch)
    cut = d * batch
    start = float(t[cut])
    left = x[cut: k * batch].reshape(-1, batch).mean(axis=1)
    reached = not (d == k // 2 and _trending(left)) and (max_s is None or start - float(t[0]) <= max_s)
    return SteadyState(start, cut, reached)


def _trending(y: np.ndarray) -> bool:
    """Whether batch means still trend: the OLS slope's two-sided t test at TREND_P."""
    m = len(y)
    if m < 3:
        return False
    i = np.arange(m, dtype=float) - (m - 1) / 2.0
    slope = float((i * (y - y.mean())).sum() / (i * i).sum())
    resid = y - y.mean() - slope * i
    s2 = float((resid * resid).sum()) / (m - 2)
    if s2 == 0:
        return slope != 0
    t = slope / math.sqrt(s2 / float((i * i).sum()))
    return 2.0 * (1.0 - t_cdf(abs(t), m - 2)) < TREND_P
