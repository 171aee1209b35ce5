"""The analysis of a blocked plan: levels compared within each block, and
what an experiment could have detected. Pure functions, no I/O.

A plan in blocks (`order = "blocks"`, perflab.plan) runs every combination
once per repetition, in a fresh random order: a randomized complete block
design. Runs of one block are minutes apart and share most of a shared
machine's slow drift; the comparison of two levels is then the ratio within
each block, on logs, and its interval and test are taken across blocks:
the paired t on log ratios.

References
- Randomized complete block design, paired t: Montgomery, *Design and
  Analysis of Experiments*, 8th ed., ch. 4 (4.1) and sec. 2.5.1 (paired
  comparisons); variance components of a random block effect by the method
  of moments, sec. 4.1.3 and ch. 13.
- Blocks of randomized interleaved trials for benchmarks on variable
  machines: Abedi & Brecht (2017), "Conducting repeatable experiments in
  highly variable cloud computing environments", ICPE '17, 287-292;
  Kalibera & Jones (2013), "Rigorous benchmarking in reasonable time",
  ISMM '13, 63-74.
- Power of the t test from the noncentral t distribution: Cohen (1988),
  *Statistical Power Analysis for the Behavioral Sciences*, ch. 2; the
  noncentral t as (Z + lambda) / sqrt(V / df), V chi-square: Johnson, Kotz &
  Balakrishnan, *Continuous Univariate Distributions* vol. 2, ch. 31.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perflab.analysis.stats import CONFIDENCE, MAX_SUGGESTED_N, SIGNIFICANCE, Values, t_cdf, t_ppf

METHOD = "paired t on log ratios across blocks"
CITATION = "randomized complete block design; Abedi & Brecht ICPE 2017, Kalibera & Jones ISMM 2013"
POWER = 0.80  # the power a "no change" states its smallest detectable change at
REFERENCE_CHANGE = 0.05  # the change whose number of blocks (or runs) a "no change" states


# --------------------------------------------------------------------- the design


def blocks_of(runs: Sequence[Mapping[str, Any]]) -> dict[int, int] | None:
    """Run id -> block, when the plan ran in blocks: in plan order (run id)
    the repetitions never go back, each repetition holds each combination
    at most once, and there are two or more combinations and repetitions.
    None for any other order (sequential, random): its repetitions are no
    blocks, whatever the file says (a store older than blocks has none)."""
    ordered = sorted(runs, key=lambda r: int(r["id"]))
    seen: set[tuple[int, int]] = set()
    last = 0
    for r in ordered:
        rep, combo = int(r["repetition"]), int(r["combination"])
        if rep < last or (rep, combo) in seen:
            return None
        seen.add((rep, combo))
        last = rep
    if len({rep for rep, _ in seen}) < 2 or len({c for _, c in seen}) < 2:
        return None
    return {int(r["id"]): int(r["repetition"]) for r in ordered}


# --------------------------------------------------------------------- power


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    """Phi(x), vectorised (Abramowitz & Stegun 7.1.26 for erf, |error| < 1.5e-7)."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    return 0.5 * (1.0 + np.sign(x) * erf)


def t_power(noncentrality: float, df: float, alpha: float = SIGNIFICANCE) -> float:
    """The power of the two-sided t test at `alpha` with `df` degrees of
    freedom when the statistic is noncentral t with this noncentrality:
    P(|T| > t_{1-alpha/2}), T = (Z + lambda) / sqrt(V / df). Integrated over
    W = sqrt(V) (a chi variable, smooth at 0 for any df >= 1)."""
    crit = t_ppf(1.0 - alpha / 2.0, df)
    lam = abs(noncentrality)
    w = np.linspace(0.0, math.sqrt(df) + 12.0, 4001)[1:]
    log_pdf = (df - 1.0) * np.log(w) - w * w / 2.0 - (df / 2.0 - 1.0) * math.log(2.0) - math.lgamma(df / 2.0)
    pdf = np.exp(log_pdf)
    scaled = crit * w / math.sqrt(df)
    reject = _normal_cdf(lam - scaled) + _normal_cdf(-lam - scaled)
    y = reject * pdf
    # at w = 0 the chi density is 0, but sqrt(2/pi) for df = 1 (where T's rejection is certain)
    y0 = math.sqrt(2.0 / math.pi) if df == 1 else 0.0
    step = w[1] - w[0]
    return float(min(1.0, step * (0.5 * y0 + y.sum() - 0.5 * y[-1])))  # the trapezoid rule


def detectable(se: float, df: float, power: float = POWER, alpha: float = SIGNIFICANCE) -> float:
    """The smallest true difference (on the scale of `se`, here the log of a
    ratio) that the two-sided t test with this standard error and df detects
    with `power`: delta = lambda * se, lambda solving t_power(lambda) = power."""
    if not (se > 0 and df >= 1):
        return math.nan
    lo, hi = 0.0, 1.0
    while t_power(hi, df, alpha) < power:
        hi *= 2.0
        if hi > 1e6:
            return math.inf
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if t_power(mid, df, alpha) < power:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-6:
            break
    return 0.5 * (lo + hi) * se


def blocks_needed(sd_log_ratio: float, change: float = REFERENCE_CHANGE, power: float = POWER,
                  alpha: float = SIGNIFICANCE, most: int = MAX_SUGGESTED_N) -> int | None:
    """Blocks a paired comparison needs to detect a change of `change`
    (5%: ln 1.05) with `power`, at the measured SD of the blocks' log
    ratios; None beyond `most`."""
    delta = math.log1p(change)
    if not sd_log_ratio > 0:
        return 2
    for n in range(2, most + 1):
        if t_power(delta / (sd_log_ratio / math.sqrt(n)), n - 1, alpha) >= power:
            return n
    return None


def runs_needed(sd_a: float, sd_b: float, change: float = REFERENCE_CHANGE, power: float = POWER,
                alpha: float = SIGNIFICANCE, most: int = MAX_SUGGESTED_N) -> int | None:
    """Runs a side an unpaired (Welch) comparison of logs needs for `change`
    with `power`, at the measured SDs of the two sides' logs (equal n; df
    2n - 2); None beyond `most`."""
    delta = math.log1p(change)
    var = sd_a * sd_a + sd_b * sd_b
    if not var > 0:
        return 2
    for n in range(2, most + 1):
        if t_power(delta / math.sqrt(var / n), 2 * n - 2, alpha) >= power:
            return n
    return None


# --------------------------------------------------------------------- paired comparison


@dataclass(frozen=True)
class Paired:
    """B against A within blocks: the mean and interval of ln(b/a) over the
    blocks, the paired t test, and what the comparison could have detected."""

    n: int  # blocks (pairs)
    mean: float  # mean of ln(b / a)
    low: float
    high: float
    sd: float  # SD of ln(b / a) over the blocks
    statistic: float
    p_value: float
    confidence: float

    @property
    def detectable(self) -> float:
        """The smallest |ln ratio| this comparison detects with POWER."""
        return detectable(self.sd / math.sqrt(self.n), self.n - 1) if self.sd > 0 else 0.0

    @property
    def needed(self) -> int | None:
        """Blocks a REFERENCE_CHANGE needs at this SD of the blocks' log ratios."""
        return blocks_needed(self.sd)


def paired_log_ratio(a: Values, b: Values, confidence: float = CONFIDENCE) -> Paired:
    """The paired t test on d_i = ln b_i - ln a_i (a_i, b_i: one block's
    runs): t = mean(d) / (s_d / sqrt(n)), df = n - 1; the interval mean(d) +-
    t_{(1+c)/2, n-1} s_d / sqrt(n). Positive figures, n >= 2 pairs."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(xa) != len(xb) or len(xa) < 2:
        raise ValueError("a paired test needs two or more pairs")
    d = np.log(xb) - np.log(xa)
    n = len(d)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    if se == 0:
        return Paired(n, mean, mean, mean, 0.0, math.copysign(math.inf, mean) if mean else 0.0,
                      0.0 if mean else 1.0, confidence)
    t = mean / se
    p = min(1.0, 2.0 * (1.0 - t_cdf(abs(t), n - 1)))
    half = t_ppf((1.0 + confidence) / 2.0, n - 1) * se
    return Paired(n, mean, mean - half, mean + half, sd, t, p, confidence)


# --------------------------------------------------------------------- variance components


@dataclass(frozen=True)
class BlockVariance:
    """The two-way layout (block x combination) of ln(value) over complete
    blocks: the block variance component, the residual (within-block) one,
    and the share of the run-to-run variance that lay between blocks."""

    blocks: int
    combinations: int
    block_var: float  # sigma^2 of the block effect (method of moments, >= 0)
    residual_var: float  # sigma^2 within a block
    residual_df: int

    @property
    def between_share(self) -> float:
        total = self.block_var + self.residual_var
        return self.block_var / total if total > 0 else 0.0

    @property
    def residual_sd(self) -> float:
        return math.sqrt(self.residual_var)


def block_variance(table: Mapping[int, Mapping[int, float]]) -> BlockVariance | None:
    """`table`: block -> combination -> value (positive). Only the blocks
    that hold every combination seen count. None with fewer than 2 complete
    blocks or 2 combinations, or a value that is not positive.
    MS_block = C * sum (ybar_b - ybar)^2 / (B - 1), MS_res = SS_res / ((B-1)(C-1)),
    sigma^2_block = max(0, (MS_block - MS_res) / C), sigma^2_res = MS_res."""
    combos = sorted({c for row in table.values() for c in row})
    rows = [[row[c] for c in combos] for row in table.values() if all(c in row for c in combos)]
    if len(rows) < 2 or len(combos) < 2:
        return None
    x = np.asarray(rows, dtype=float)
    if not (x > 0).all():
        return None
    y = np.log(x)
    b, c = y.shape
    grand = y.mean()
    block_means, combo_means = y.mean(axis=1), y.mean(axis=0)
    ms_block = c * float(((block_means - grand) ** 2).sum()) / (b - 1)
    resid = y - block_means[:, None] - combo_means[None, :] + grand
    df_res = (b - 1) * (c - 1)
    ms_res = float((resid ** 2).sum()) / df_res
    return BlockVariance(b, c, max(0.0, (ms_block - ms_res) / c), ms_res, df_res)
