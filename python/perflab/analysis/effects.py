"""The effect of one change on a metric: B against a baseline A, as a ratio
with its confidence interval and a verdict, each test named. Used by
`perflab compare` (two experiments) and by the report (one factor's levels
inside an experiment), so both say the same thing the same way.

The test is chosen by the figures and their number (perflab.analysis.stats
cites each method):

- a ratio with a side that is zero, not a number or of mixed sign is
  "undefined": never better or worse, and not tested;
- fewer than MIN_VERDICT_N runs on a side: the ratio alone, no test, no
  verdict ("too few runs");
- positive figures of a plan in blocks (perflab.analysis.blocks), where
  every block holds a run of both levels: the paired t on log ratios across
  blocks; the ratio is the geometric mean of the blocks' ratios, its
  interval the exponentiated paired t interval. A slow drift of the machine
  that is shared inside a block falls out of each ratio;
- other positive figures (rates, latencies, energy), or blocks incomplete
  (a failed run): Welch's t test on the logarithms; the ratio is that of the
  geometric means, its 95% interval the exponentiated Welch interval of the
  difference of mean logs. Valid at any n for log-normal runs;
- figures that may be zero or negative: the exact permutation test of the
  difference of means (every relabelling; random ones beyond
  EXACT_PERMUTATION_MAX); the ratio of the means gets a percentile bootstrap
  interval only from BOOTSTRAP_MIN_N runs a side, where it is sound.

Every tested comparison states the smallest change it could have detected
(80% power, two-sided at SIGNIFICANCE, from the noise it measured) and the
blocks (or runs a side) a 5% change would need: what a "no change" means.

`settle` then turns p-values into verdicts for a set of comparisons:
Benjamini-Hochberg adjusted p-values (q) against SIGNIFICANCE, and no change
called where the ratio lies within the noise floor of identical set-ups.
Two levels that resolve to one set-up are no effect (`same_setup`): the
report counts their runs in the noise floor instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from perflab.analysis import blocks, precision
from perflab.analysis.stats import (
    BOOTSTRAP_MIN_N,
    CONFIDENCE,
    DEFAULT_SEED,
    EXACT_PERMUTATION_MAX,
    MAX_SUGGESTED_N,
    MIN_VERDICT_N,
    SIGNIFICANCE,
    WIDE_FACTOR,
    Interval,
    NoiseFloor,
    benjamini_hochberg,
    permutation_test,
    ratio_interval,
    welch,
)

# Verdicts: "better" / "worse" (B against A, by the metric's direction),
# "differs" (no direction known), "~" (no significant difference), "within
# noise" (significant, but no larger than the noise floor), "too few runs",
# "undefined" (the ratio has no meaning).
NO_DIFFERENCE = "~"
WITHIN_NOISE = "within noise"
TOO_FEW = "too few runs"
UNDEFINED = "undefined"
SAME_SETUP = "same set-up"  # two levels that resolve to one set-up: their spread is noise, not an effect
NOT_TESTED = (TOO_FEW, UNDEFINED, SAME_SETUP)

LEGEND = (
    f"Verdicts need {MIN_VERDICT_N} or more runs a side (else \"{TOO_FEW}\"). Positive figures of a plan in blocks: "
    f"{blocks.METHOD} ({blocks.CITATION}); the ratio is the geometric mean of the blocks' ratios with its paired 95% "
    "interval. Other positive figures, or blocks left incomplete by a failed run: Welch's t test on "
    "the logarithms (Welch 1947); the ratio is that of the geometric means with the Welch 95% interval. Figures that "
    "can be 0: exact permutation test of the difference of means (Fisher 1935; every relabelling); their ratio gets a "
    f"percentile bootstrap interval only from {BOOTSTRAP_MIN_N} runs a side. Verdicts use Benjamini-Hochberg adjusted "
    f"p-values (q < {SIGNIFICANCE}) over all the comparisons shown (over the [experiment] primary metrics' and the "
    "others' apart, where the experiment names them); the intervals are not adjusted. "
    f"{NO_DIFFERENCE} = no significant difference; \"{WITHIN_NOISE}\" = significant but within the noise floor of "
    f"identical set-ups; \"{UNDEFINED}\" = a side is 0 or not a number, so the ratio means nothing; "
    f"\"{SAME_SETUP}\" = both levels ran one set-up (their runs count in the noise floor, not as an effect). "
    f"A tested comparison states the smallest change it could have detected ({blocks.POWER:.0%} power, from the "
    f"noise it measured; noncentral t, Cohen 1988) and the blocks or runs a side a {blocks.REFERENCE_CHANGE:.0%} "
    "change would need. With precision, the blocks after a pilot are fixed by Stein's two-stage rule and a paired "
    f"comparison takes its interval and test ({precision.METHOD}; {precision.CITATION})."
)


@dataclass(frozen=True)
class Effect:
    ratio: Interval  # B / A (geometric means for positive figures, else means)
    method: str
    p_value: float | None
    verdict: str
    direction: str = ""  # what a significant change would be called: "better", "worse", "differs"
    q_value: float | None = None  # Benjamini-Hochberg adjusted, once settled
    detectable: float | None = None  # the smallest change detected with blocks.POWER (0.04: 4%), if tested
    needed: int | None = None  # blocks (paired) or runs a side a blocks.REFERENCE_CHANGE needs; None: over 100
    paired: int = 0  # blocks the comparison was paired in (0: unpaired)
    budget_note: str = ""  # with precision, where the budget ended before the target: what it resolved

    @property
    def needed_unit(self) -> str:
        return "blocks" if self.paired else "runs a side"

    def power_note(self) -> str:
        """What the comparison could have told: "could have detected 4.1% (80% power); a 5% change needs 12
        blocks"; empty when it was not tested."""
        if self.detectable is None or not math.isfinite(self.detectable):
            return ""
        needed = (f"more than {MAX_SUGGESTED_N} {self.needed_unit}" if self.needed is None
                  else f"{self.needed} {self.needed_unit}")
        return (f"could have detected {self.detectable:.1%} ({blocks.POWER:.0%} power); "
                f"a {blocks.REFERENCE_CHANGE:.0%} change needs {needed}")

    @property
    def tested(self) -> bool:
        return self.p_value is not None


def _finite(values: Sequence[float]) -> np.ndarray:
    x = np.asarray([v for v in values if v is not None], dtype=float)
    return x[np.isfinite(x)]


def undefined_reason(a: Sequence[float], b: Sequence[float]) -> str | None:
    """Why B / A has no meaning, or None: a side without finite values, all
    zero (0/0 when both), or with a mean that is not positive."""
    xa, xb = _finite(a), _finite(b)
    for side, x, raw in (("A", xa, a), ("B", xb, b)):
        if len(x) == 0:
            return f"{side} has no finite value" if len(raw) else f"{side} has no runs"
    zero_a, zero_b = not xa.any(), not xb.any()
    if zero_a and zero_b:
        return "0/0"
    if zero_a or zero_b:
        return f"{'A' if zero_a else 'B'} is 0"
    if xa.mean() <= 0 or xb.mean() <= 0:
        return "a mean is not positive"
    return None


def effect(a: Sequence[float], b: Sequence[float], higher_is_better: bool | None,
           seed: int = DEFAULT_SEED, confidence: float = CONFIDENCE,
           pairs: tuple[Sequence[float], Sequence[float]] | None = None,
           pilot: tuple[int, float] | None = None) -> Effect:
    """B against A, tested as the module says; the verdict is that of this one
    comparison at SIGNIFICANCE (settle() makes it that of a set). `pairs`:
    the same runs as (a, b) aligned by block, when every block holds both
    levels (the caller knows the plan); then the comparison is paired.
    `pilot`: (blocks, precision) of an experiment whose blocks Stein's rule
    fixed after a pilot (perflab.analysis.precision): a paired comparison
    holding the whole pilot takes Stein's interval and test."""
    reason = undefined_reason(a, b)
    if reason is not None:
        return Effect(Interval(math.nan, math.nan, math.nan, confidence, f"undefined ({reason})"),
                      f"none: ratio undefined ({reason})", None, UNDEFINED)
    xa, xb = _finite(a), _finite(b)
    positive = bool((xa > 0).all() and (xb > 0).all())
    if positive:
        estimate = math.exp(float(np.log(xb).mean() - np.log(xa).mean()))
    else:
        estimate = float(xb.mean() / xa.mean())
    b_higher = estimate > 1.0
    direction = "differs" if higher_is_better is None else ("better" if b_higher == higher_is_better else "worse")
    if min(len(xa), len(xb)) < MIN_VERDICT_N:
        return Effect(Interval(estimate, math.nan, math.nan, confidence, f"none (fewer than {MIN_VERDICT_N} a side)"),
                      f"none: fewer than {MIN_VERDICT_N} runs a side", None, TOO_FEW, direction)
    if positive and pairs is not None and len(pairs[0]) == len(pairs[1]) >= MIN_VERDICT_N:
        pa, pb = _finite(pairs[0]), _finite(pairs[1])
        if len(pa) == len(pb) == len(pairs[0]) and (pa > 0).all() and (pb > 0).all():
            t = blocks.paired_log_ratio(pa, pb, confidence)
            if pilot is not None and len(pa) >= pilot[0] >= 2:
                return _stein(pa, pb, pilot, higher_is_better, t, confidence)
            ratio = Interval(math.exp(t.mean), math.exp(t.low), math.exp(t.high), confidence,
                             f"{blocks.METHOD} ({t.n} blocks)", too_wide=t.high - t.low > math.log(WIDE_FACTOR))
            direction = "differs" if higher_is_better is None else (
                "better" if (t.mean > 0) == higher_is_better else "worse")
            return Effect(ratio, f"{blocks.METHOD}, {t.n} blocks ({blocks.CITATION})", t.p_value,
                          direction if t.p_value < SIGNIFICANCE else NO_DIFFERENCE, direction,
                          detectable=math.expm1(t.detectable), needed=t.needed, paired=t.n)
    if positive:
        w = welch(np.log(xa), np.log(xb), confidence)
        ratio = Interval(estimate, math.exp(w.low), math.exp(w.high), confidence,
                         "Welch t interval on logs (ratio of geometric means)",
                         too_wide=w.high - w.low > math.log(WIDE_FACTOR))
        method, p = "Welch t on logs", w.p_value
        sd_a, sd_b = float(np.log(xa).std(ddof=1)), float(np.log(xb).std(ddof=1))
    else:
        test = permutation_test(xa, xb, seed=seed)
        if min(len(xa), len(xb)) >= BOOTSTRAP_MIN_N:
            boot = ratio_interval(xa, xb, confidence, seed=seed)
            ratio = Interval(estimate, boot.low, boot.high, confidence, boot.method)
        else:
            ratio = Interval(estimate, math.nan, math.nan, confidence, "none (bootstrap needs "
                             f"{BOOTSTRAP_MIN_N} a side)")
        method, p = test.method, test.p_value
        if math.comb(len(xa) + len(xb), len(xa)) <= EXACT_PERMUTATION_MAX and \
                2.0 / math.comb(len(xa) + len(xb), len(xa)) >= SIGNIFICANCE:
            method += f" (cannot reach p < {SIGNIFICANCE} at {len(xa)}/{len(xb)} runs)"
        # what it could detect, by the normal-theory approximation of the relative difference of means
        scale = abs(float(xa.mean()))
        sd_a, sd_b = float(xa.std(ddof=1)) / scale, float(xb.std(ddof=1)) / scale
    verdict = direction if p < SIGNIFICANCE else NO_DIFFERENCE
    se = math.sqrt(sd_a * sd_a / len(xa) + sd_b * sd_b / len(xb))
    smallest = blocks.detectable(se, len(xa) + len(xb) - 2)
    return Effect(ratio, method, p, verdict, direction,
                  detectable=math.expm1(smallest) if math.isfinite(smallest) else None,
                  needed=blocks.runs_needed(sd_a, sd_b))


def _stein(pa: np.ndarray, pb: np.ndarray, pilot: tuple[int, float], higher_is_better: bool | None,
           t: blocks.Paired, confidence: float) -> Effect:
    """The paired comparison of a precision experiment: Stein's interval and
    test (the pilot's SD and df); where the budget ended before the target,
    what it resolved and the blocks the target needs."""
    s = precision.stein_interval(np.log(pb) - np.log(pa), pilot[0], pilot[1], confidence)
    ratio = Interval(math.exp(s.mean), math.exp(s.low), math.exp(s.high), confidence,
                     f"{precision.METHOD} ({s.n} blocks, pilot {s.pilot})",
                     too_wide=s.high - s.low > math.log(WIDE_FACTOR))
    direction = "differs" if higher_is_better is None else ("better" if (s.mean > 0) == higher_is_better else "worse")
    se = s.pilot_sd / math.sqrt(s.n)
    smallest = blocks.detectable(se, s.pilot - 1) if se > 0 else 0.0
    note = ""
    if s.needed > s.n:
        note = (f"the budget ended first: half-width {math.expm1(s.high - s.mean):.1%} at {s.n} blocks; "
                f"{pilot[1] * 100:g}% needs {s.needed} blocks")
    return Effect(ratio, f"{precision.METHOD}, {s.n} blocks, pilot {s.pilot} ({precision.CITATION})", s.p_value,
                  direction if s.p_value < SIGNIFICANCE else NO_DIFFERENCE, direction,
                  detectable=math.expm1(smallest) if math.isfinite(smallest) else None, needed=t.needed,
                  paired=s.n, budget_note=note)


def same_setup(found: Effect) -> Effect:
    """What a comparison of two levels that ran one set-up says: no test (any
    difference between them is the experiment's noise); the ratio is kept."""
    return Effect(replace(found.ratio, low=math.nan, high=math.nan, method="none (one set-up)"),
                  "none: both levels ran one set-up", None, SAME_SETUP, found.direction)


def family(metric: str, primary: Sequence[str]) -> str:
    """The false discovery rate family of a comparison of `metric`:
    "primary" or "secondary" where the experiment names its question
    ([experiment] primary), else one family, "all"."""
    return "all" if not primary else "primary" if metric in primary else "secondary"


def settle_families(found: Sequence[Effect], floors: Sequence[NoiseFloor | None] | None,
                    families: Sequence[str], alpha: float = SIGNIFICANCE) -> list[Effect]:
    """settle() within each family (families[i] names comparison i's): the
    false discovery rate is controlled over each family on its own, so the
    comparisons an experiment asks about (its primary metrics) are not
    diluted by the ones it shows beside them."""
    out = list(found)
    for family in dict.fromkeys(families):
        idx = [i for i, f in enumerate(families) if f == family]
        settled = settle([found[i] for i in idx], None if floors is None else [floors[i] for i in idx], alpha)
        for i, e in zip(idx, settled, strict=True):
            out[i] = e
    return out


def settle(found: Sequence[Effect], floors: Sequence[NoiseFloor | None] | None = None,
           alpha: float = SIGNIFICANCE) -> list[Effect]:
    """The verdicts of a set of comparisons: Benjamini-Hochberg adjusted
    p-values over the tested ones, a change called where q < alpha and the
    ratio lies outside its noise floor (floors[i], if any)."""
    tested = [i for i, e in enumerate(found) if e.p_value is not None]
    q_values = benjamini_hochberg([found[i].p_value for i in tested])  # type: ignore[misc]
    q_of = dict(zip(tested, q_values, strict=True))
    out = []
    for i, e in enumerate(found):
        if i not in q_of:
            out.append(e)
            continue
        q = q_of[i]
        floor = floors[i] if floors is not None else None
        if q >= alpha:
            verdict = NO_DIFFERENCE
        elif floor is not None and floor.contains(e.ratio.estimate):
            verdict = WITHIN_NOISE
        else:
            verdict = e.direction
        out.append(replace(e, q_value=q, verdict=verdict))
    return out
