"""The effect of one change on a metric: B against a baseline A, as a ratio
with its confidence interval and a verdict, each test named. Used by
`perflab compare` (two experiments) and by the report (one factor's levels
inside an experiment), so both say the same thing the same way.

- Mann-Whitney U when both sides have at least MWU_MIN_N runs (with fewer,
  its smallest possible two-sided p is above 0.05, so it could never say
  "different"); its p-value is given.
- With 2 or 3 runs a side, whether the bootstrap 95% CI of the ratio includes
  1 (no p-value: a percentile interval gives none).
- With a single run on a side, no test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perflab.analysis.stats import DEFAULT_SEED, Interval, mann_whitney_u, ratio_interval

SIGNIFICANCE = 0.05
MWU_MIN_N = 4
# Verdicts: "better" / "worse" (B against A, by the metric's direction),
# "differs" (no direction known), "~" (no significant difference), "n=1".
NOT_TESTED = "n=1"
NO_DIFFERENCE = "~"

LEGEND = (
    f"{NO_DIFFERENCE} = no significant difference: Mann-Whitney U p >= {SIGNIFICANCE} with {MWU_MIN_N} or more "
    f"runs a side; with 2-{MWU_MIN_N - 1} runs a side, the ratio's bootstrap 95% CI includes 1 (a percentile "
    "interval gives no p-value: p is shown as –); n=1 = not tested. "
    "Ratio CI: two-sample percentile bootstrap, 10,000 resamples."
)


@dataclass(frozen=True)
class Effect:
    ratio: Interval  # mean(B) / mean(A)
    method: str
    p_value: float | None
    verdict: str


def effect(a: Sequence[float], b: Sequence[float], higher_is_better: bool | None,
           seed: int = DEFAULT_SEED) -> Effect:
    ratio = ratio_interval(a, b, seed=seed)
    if min(len(a), len(b)) < 2:
        return Effect(ratio, "none (n=1)", None, NOT_TESTED)
    if min(len(a), len(b)) >= MWU_MIN_N:
        result = mann_whitney_u(a, b)
        significant = result.p_value < SIGNIFICANCE
        method, p = result.method, result.p_value
    else:
        significant = ratio.excludes(1.0)
        # the method says what was looked at; the verdict says what was found
        method = f"bootstrap 95% CI of the ratio {'excludes' if significant else 'includes'} 1"
        p = None
    if not significant:
        return Effect(ratio, method, p, NO_DIFFERENCE)
    if higher_is_better is None:
        return Effect(ratio, method, p, "differs")
    b_higher = ratio.estimate > 1.0
    return Effect(ratio, method, p, "better" if b_higher == higher_is_better else "worse")
