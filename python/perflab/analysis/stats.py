"""Descriptive and inferential statistics over repeated runs. Pure functions, no I/O.

Every interval and test here names its method in what it returns, so a report
can print "95% CI (Student t, n=3)" rather than a bare range. Random methods
(bootstrap, permutation) take a seed and are reproducible.

References
- Student t interval: any statistics text, e.g. Montgomery & Runger, *Applied
  Statistics and Probability for Engineers*, sec. 8.2.
- Percentile bootstrap: Efron & Tibshirani (1993), *An Introduction to the
  Bootstrap*, ch. 13.
- Modified z-score: Iglewicz & Hoaglin (1993), *How to Detect and Handle
  Outliers*, ASQC Basic References in Quality Control vol. 16, p. 11-13.
- Mann-Whitney U: Mann & Whitney (1947), Ann. Math. Statist. 18(1):50-60;
  tie correction as in Lehmann (1975), *Nonparametrics*, sec. 1.4.
- Log-normal interval of a mean (modified Cox method): Olsson (2005),
  "Confidence intervals for the mean of a log-normal distribution", Journal
  of Statistics Education 13(1); Zhou & Gao (1997), Statistics in Medicine
  16:783-790.
- Interval of a geometric mean (the t interval of the mean of the logarithms,
  exponentiated): Limpert, Stahel & Abbt (2001), "Log-normal distributions
  across the sciences", BioScience 51(5):341-352; Bland & Altman (1996),
  "Transformations, means, and confidence intervals", BMJ 312:1079.
- Welch's t test: Welch (1947), Biometrika 34:28-35 (Welch-Satterthwaite df).
- Exact permutation (randomisation) test: Fisher (1935), *The Design of
  Experiments*, sec. 21; Good (2005), *Permutation, Parametric and Bootstrap
  Tests of Hypotheses*, ch. 3; Monte Carlo p-value (1 + b) / (1 + R): Phipson &
  Smyth (2010), Stat. Appl. Genet. Mol. Biol. 9(1):39.
- False discovery rate: Benjamini & Hochberg (1995), JRSS B 57(1):289-300.
- Repeatability limit r = 1.96 sqrt(2) s_r = 2.8 s_r: ISO 5725-6:1994, sec. 4.1.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

# Figures as lists or numpy arrays.
Values = Sequence[float] | npt.NDArray[np.float64]

CONFIDENCE = 0.95
# Below this many values the percentile bootstrap under-covers badly (it cannot
# reach beyond the sample's range), so the Student t interval is used instead.
BOOTSTRAP_MIN_N = 20
BOOTSTRAP_RESAMPLES = 10_000
DEFAULT_SEED = 20240601

# Iglewicz & Hoaglin (1993): M_i = 0.6745 (x_i - median) / MAD, where 0.6745 is
# the 0.75 quantile of the standard normal (so MAD/0.6745 estimates sigma), and
# |M_i| > 3.5 marks a potential outlier.
MODIFIED_Z_CONSTANT = 0.6745
MODIFIED_Z_THRESHOLD = 3.5
# When MAD = 0 (more than half the values equal), the mean absolute deviation is
# used instead, scaled by sqrt(pi/2) = 1.253314 so it too estimates sigma for a
# normal sample (the fallback IBM SPSS and others use for the same statistic).
MEANAD_TO_SIGMA = 1.253314

# Fewest values an outlier is looked for in: with three or four, the MAD is one
# of the deviations itself, and any spread makes the largest look extreme.
OUTLIER_MIN_N = 5

# Coefficient of variation above which a combination's repetitions are flagged
# as too noisy to trust its mean without a look (5%: the level the pgbench
# documentation and most lab practice treat as an unstable benchmark).
HIGH_CV = 0.05

# Fewer repetitions than this and no interval is computed at all (with n = 2
# the t quantile is 12.7: a storage sweep of 2 repetitions printed "tps 428.9
# [0.53, 424,636]"): the report shows the values and says how many to run.
MIN_MEANINGFUL_N = 3
MIN_INTERVAL_N = MIN_MEANINGFUL_N
# An interval that informs nothing: a positive figure's upper bound more than
# WIDE_FACTOR times its lower, or any interval wider than WIDE_FACTOR times the
# range of its values. The report prints "too few runs" instead of its bounds.
WIDE_FACTOR = 10.0
# Fewest runs on each side of a comparison for a test and a verdict.
MIN_VERDICT_N = 3
REPETITIONS_NOTE = f"an interval and a verdict need {MIN_INTERVAL_N} or more runs: experiment.repetitions"
SIGNIFICANCE = 0.05
# An exact permutation test enumerates every relabelling up to this many
# (9 + 9 runs: 48,620); beyond, PERMUTATION_RESAMPLES random ones.
EXACT_PERMUTATION_MAX = 50_000
PERMUTATION_RESAMPLES = 9_999
# ISO 5725-6 repeatability limit: two single results of one set-up differ by
# more than 1.96 * sqrt(2) * s_r with probability 5%.
REPEATABILITY_K = 2.8
# The precision the suggestion aims at: a 95% CI half-width of 5% of the mean.
TARGET_HALF_WIDTH = 0.05
MAX_SUGGESTED_N = 100

# Mann-Whitney U: exact null distribution (no ties) up to this many values in
# the two samples together; beyond it, the normal approximation is accurate.
MWU_EXACT_MAX_N = 50


# --------------------------------------------------------------------- distributions


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta function (modified Lentz),
    Numerical Recipes 3rd ed., sec. 6.4."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_ppf(p: float, df: float) -> float:
    """The p-quantile of Student's t (bisection on t_cdf; 1e-12 accurate)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


_NORMAL = NormalDist()


def normal_cdf(z: float) -> float:
    return _NORMAL.cdf(z)


# --------------------------------------------------------------------- intervals


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval and the method that made it."""

    estimate: float
    low: float
    high: float
    confidence: float
    method: str  # "student-t", "bootstrap-percentile", "none (n=1)", ...
    too_wide: bool = False  # bounds too far apart to inform (WIDE_FACTOR): "too few runs"

    def excludes(self, value: float) -> bool:
        return not (self.low <= value <= self.high)

    @property
    def shown(self) -> bool:
        """Bounds worth printing and drawing: finite and not too wide."""
        return math.isfinite(self.low) and math.isfinite(self.high) and not self.too_wide


def _values(values: Values) -> np.ndarray:
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def _sample(values: Values, confidence: float) -> tuple[np.ndarray, float, Interval | None]:
    """The finite values and their mean; with one value, the (empty) interval too."""
    x = _values(values)
    if len(x) == 0:
        raise ValueError("no values")
    mean = float(x.mean())
    if len(x) == 1:
        return x, mean, Interval(mean, math.nan, math.nan, confidence, "none (n=1)")
    return x, mean, None


def t_interval(values: Values, confidence: float = CONFIDENCE) -> Interval:
    """Mean +- t_{(1+c)/2, n-1} * s / sqrt(n)."""
    x, mean, single = _sample(values, confidence)
    if single is not None:
        return single
    n = len(x)
    half = t_ppf((1.0 + confidence) / 2.0, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, confidence, "student-t")


def lognormal_interval(values: Values, confidence: float = CONFIDENCE) -> Interval:
    """Interval of the mean of positive values on the log scale (modified Cox,
    Olsson 2005): exp(ybar + s^2/2 +- t * sqrt(s^2/n + s^4/(2(n-1)))), y = ln x.
    It cannot go below zero, as TPS or a latency cannot."""
    x, mean, single = _sample(values, confidence)
    if single is not None:
        return single
    if (x <= 0).any():
        raise ValueError("the log-normal interval needs positive values")
    y = np.log(x)
    n = len(y)
    var = float(y.var(ddof=1))
    centre = float(y.mean()) + var / 2.0
    half = t_ppf((1.0 + confidence) / 2.0, n - 1) * math.sqrt(var / n + var * var / (2.0 * (n - 1)))
    return Interval(mean, math.exp(centre - half), math.exp(centre + half), confidence, "log-normal (modified Cox)")


def bootstrap_interval(
    values: Values,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """Percentile bootstrap interval of the mean (Efron & Tibshirani ch. 13)."""
    x, mean, single = _sample(values, confidence)
    if single is not None:
        return single
    n = len(x)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    return Interval(mean, float(low), float(high), confidence, "bootstrap-percentile")


def geometric_interval(values: Values, confidence: float = CONFIDENCE) -> Interval:
    """Interval of the geometric mean of positive values: the Student t
    interval of the mean of y = ln x, exponentiated,
    exp(ybar +- t_{(1+c)/2, n-1} s_y / sqrt(n))  (Limpert et al. 2001; Bland &
    Altman 1996). Exact for log-normal figures (TPS, latencies and energy are
    near enough), it can never reach zero, and it is asymmetric as their spread
    is. The estimate is the geometric mean exp(ybar). Below MIN_INTERVAL_N
    values there is no interval."""
    x = _values(values)
    n = len(x)
    if n == 0:
        raise ValueError("no values")
    if (x <= 0).any():
        raise ValueError("the interval of a geometric mean needs positive values")
    y = np.log(x)
    centre = float(y.mean())
    if n < MIN_INTERVAL_N:
        return Interval(math.exp(centre), math.nan, math.nan, confidence, _no_interval(n))
    half = t_ppf((1.0 + confidence) / 2.0, n - 1) * float(y.std(ddof=1)) / math.sqrt(n)
    return Interval(math.exp(centre), math.exp(centre - half), math.exp(centre + half), confidence,
                    "t interval of the mean of logs (geometric mean)", too_wide=2.0 * half > math.log(WIDE_FACTOR))


def _no_interval(n: int) -> str:
    return f"none (n={n}; an interval needs {MIN_INTERVAL_N})"


def mean_interval(values: Values, confidence: float = CONFIDENCE, seed: int = DEFAULT_SEED) -> Interval:
    """The report's interval, chosen by the values and their number:

    - fewer than MIN_INTERVAL_N values: none (the report shows the values);
    - all positive (rates, latencies, energy): the interval of the geometric
      mean (geometric_interval), never below zero;
    - otherwise (a figure that can be 0 or negative) the Student t interval of
      the mean, cut at 0 when no value is negative (the mean cannot be; cutting
      keeps the coverage), and from BOOTSTRAP_MIN_N values the percentile
      bootstrap (below that it cannot reach beyond the sample's range and
      under-covers).

    too_wide is set when the interval informs nothing (WIDE_FACTOR)."""
    x = _values(values)
    n = len(x)
    if n == 0:
        raise ValueError("no values")
    if n < MIN_INTERVAL_N:
        return Interval(float(x.mean()), math.nan, math.nan, confidence, _no_interval(n))
    if (x > 0).all():
        return geometric_interval(x, confidence)
    if n < BOOTSTRAP_MIN_N:
        ci = t_interval(x, confidence)
        if (x >= 0).all() and ci.low < 0:
            ci = replace(ci, low=0.0, method="student-t, cut at 0")
    else:
        ci = bootstrap_interval(x, confidence, seed=seed)
    spread = float(x.max() - x.min())
    return replace(ci, too_wide=ci.high - ci.low > WIDE_FACTOR * spread)


def repetitions_for(values: Values, half_width: float = TARGET_HALF_WIDTH, confidence: float = CONFIDENCE) -> int:
    """Repetitions for a Student t 95% CI half-width of `half_width` x mean,
    at the CV these values show: the least n with t_{n-1} CV / sqrt(n) <= half_width
    (at least MIN_MEANINGFUL_N, at most MAX_SUGGESTED_N)."""
    cv = coefficient_of_variation(values)
    if not math.isfinite(cv):
        return MIN_MEANINGFUL_N
    for n in range(MIN_MEANINGFUL_N, MAX_SUGGESTED_N + 1):
        if t_ppf((1.0 + confidence) / 2.0, n - 1) * cv / math.sqrt(n) <= half_width:
            return n
    return MAX_SUGGESTED_N


def ratio_interval(
    a: Values,
    b: Values,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """mean(b) / mean(a) with a percentile bootstrap interval, each sample
    resampled independently (two-sample bootstrap, Efron & Tibshirani ch. 13)."""
    xa, xb = _values(a), _values(b)
    if len(xa) == 0 or len(xb) == 0:
        raise ValueError("no values")
    ma, mb = float(xa.mean()), float(xb.mean())
    ratio = mb / ma if ma != 0 else math.nan
    if len(xa) < 2 or len(xb) < 2 or ma == 0:
        return Interval(ratio, math.nan, math.nan, confidence, "none (n<2)")
    rng = np.random.default_rng(seed)
    mean_a = xa[rng.integers(0, len(xa), size=(resamples, len(xa)))].mean(axis=1)
    mean_b = xb[rng.integers(0, len(xb), size=(resamples, len(xb)))].mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = mean_b / mean_a
    ratios = ratios[np.isfinite(ratios)]
    alpha = 1.0 - confidence
    low, high = np.quantile(ratios, [alpha / 2.0, 1.0 - alpha / 2.0])
    return Interval(ratio, float(low), float(high), confidence, "bootstrap-percentile")


# --------------------------------------------------------------------- spread, outliers


def coefficient_of_variation(values: Values) -> float:
    """Sample standard deviation over the mean (NaN when n < 2 or the mean is 0)."""
    x = _values(values)
    if len(x) < 2:
        return math.nan
    mean = float(x.mean())
    if mean == 0:
        return math.nan
    return float(x.std(ddof=1)) / abs(mean)


def modified_z_scores(values: Sequence[float]) -> np.ndarray:
    """Iglewicz & Hoaglin's modified z-score of each value (see the constants)."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return x
    median = float(np.median(x))
    deviation = x - median
    mad = float(np.median(np.abs(deviation)))
    if mad > 0:
        return MODIFIED_Z_CONSTANT * deviation / mad
    mean_ad = float(np.mean(np.abs(deviation)))
    if mean_ad > 0:
        return deviation / (MEANAD_TO_SIGMA * mean_ad)
    return np.zeros_like(x)


def outliers(values: Sequence[float], threshold: float = MODIFIED_Z_THRESHOLD) -> list[int]:
    """Indices of values whose |modified z-score| exceeds the threshold."""
    if len(values) < OUTLIER_MIN_N:
        return []
    z = modified_z_scores(values)
    return [i for i, score in enumerate(z) if abs(score) > threshold]


# --------------------------------------------------------------------- summary


@dataclass
class Summary:
    """The repetitions of one combination for one metric, as the report shows them."""

    n: int
    mean: float
    interval: Interval
    sd: float
    cv: float
    minimum: float
    maximum: float
    outlier_indices: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


def summarize(values: Sequence[float], seed: int = DEFAULT_SEED, high_cv: float = HIGH_CV) -> Summary:
    x = _values(values)
    if len(x) == 0:
        raise ValueError("no values")
    interval = mean_interval(x, seed=seed)
    cv = coefficient_of_variation(x)
    out = outliers(list(x))
    warnings = []
    if math.isfinite(cv) and cv > high_cv:
        warnings.append(f"high CV {cv * 100:.1f}% (> {high_cv * 100:.0f}%)")
    if out:
        warnings.append(
            f"{len(out)} outlier(s): |modified z| > {MODIFIED_Z_THRESHOLD} (Iglewicz & Hoaglin)"
        )
    if len(x) < MIN_INTERVAL_N:
        warnings.append(
            f"n={len(x)}: no interval (an interval needs {MIN_INTERVAL_N} repetitions; about "
            f"{repetitions_for(x)} would give +-{TARGET_HALF_WIDTH * 100:.0f}% at this CV: experiment.repetitions)"
        )
    elif interval.too_wide:
        warnings.append(f"too few runs: the 95% interval spans more than x{WIDE_FACTOR:g} (experiment.repetitions)")
    return Summary(
        n=len(x),
        mean=float(x.mean()),
        interval=interval,
        sd=float(x.std(ddof=1)) if len(x) > 1 else math.nan,
        cv=cv,
        minimum=float(x.min()),
        maximum=float(x.max()),
        outlier_indices=out,
        warnings=warnings,
        values=[float(v) for v in x],
    )


# --------------------------------------------------------------------- Mann-Whitney U


@dataclass(frozen=True)
class TestResult:
    statistic: float
    p_value: float
    method: str


def _rank(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=float)
    sorted_values = values[order]
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and sorted_values[j + 1] == sorted_values[i]:
            j += 1
        ranks[order[i : j + 1]] = 0.5 * (i + j) + 1.0
        i = j + 1
    return ranks


def _mwu_exact_cdf(u: int, n1: int, n2: int) -> float:
    """P(U <= u) under H0 without ties: counts of rank arrangements by the
    recursion f(n1, n2, u) = f(n1-1, n2, u-n2) + f(n1, n2-1, u) (Mann & Whitney 1947)."""
    # counts[j][k]: arrangements of i values of sample 1 and j of sample 2 with U = k
    max_u = n1 * n2
    prev = [[1] + [0] * max_u for _ in range(n2 + 1)]  # i = 0: U is 0
    for _ in range(n1):  # add sample-1 values one at a time
        cur = [[0] * (max_u + 1) for _ in range(n2 + 1)]
        cur[0][0] = 1
        for j in range(1, n2 + 1):
            for k in range(max_u + 1):
                # the largest value is from sample 1 (beats all j of sample 2) or sample 2
                from_1 = prev[j][k - j] if k >= j else 0
                cur[j][k] = from_1 + cur[j - 1][k]
        prev = cur
    counts = prev[n2]
    total = math.comb(n1 + n2, n1)
    return sum(counts[: u + 1]) / total


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> TestResult:
    """Two-sided Mann-Whitney U test that a and b come from one distribution.

    The statistic is U of sample `a` (the number of pairs with a > b, ties
    counting one half). Exact p-value when there are no ties and the samples
    hold at most MWU_EXACT_MAX_N values together; otherwise the normal
    approximation with continuity and tie correction.
    """
    xa, xb = _values(a), _values(b)
    n1, n2 = len(xa), len(xb)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need values")
    pooled = np.concatenate([xa, xb])
    ranks = _rank(pooled)
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    has_ties = len(np.unique(pooled)) < len(pooled)
    if not has_ties and n1 + n2 <= MWU_EXACT_MAX_N:
        u_small = int(round(min(u1, n1 * n2 - u1)))
        p = min(1.0, 2.0 * _mwu_exact_cdf(u_small, n1, n2))
        return TestResult(u1, p, "Mann-Whitney U, exact")
    n = n1 + n2
    _, tie_counts = np.unique(pooled, return_counts=True)
    tie_term = float(((tie_counts**3) - tie_counts).sum()) / (n * (n - 1))
    sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term))
    if sigma == 0:
        return TestResult(u1, 1.0, "Mann-Whitney U, normal approximation (all values tied)")
    mu = n1 * n2 / 2.0
    z = (abs(u1 - mu) - 0.5) / sigma  # 0.5: continuity correction
    p = min(1.0, 2.0 * (1.0 - normal_cdf(max(z, 0.0))))
    return TestResult(u1, p, "Mann-Whitney U, normal approximation with tie correction")


# --------------------------------------------------------------------- two samples at small n


@dataclass(frozen=True)
class WelchResult:
    """Welch's t test of mean(b) - mean(a), with the difference's interval."""

    difference: float
    low: float
    high: float
    statistic: float
    df: float
    p_value: float
    confidence: float
    method: str = "Welch t"


def welch(a: Values, b: Values, confidence: float = CONFIDENCE) -> WelchResult:
    """Welch's unequal-variance t test (Welch 1947): t = (mean_b - mean_a) / se,
    se^2 = s_a^2/n_a + s_b^2/n_b, df by Welch-Satterthwaite; two-sided p and the
    interval difference +- t_{(1+c)/2, df} se. Each side needs 2 values."""
    xa, xb = _values(a), _values(b)
    if len(xa) < 2 or len(xb) < 2:
        raise ValueError("Welch's test needs two values a side")
    diff = float(xb.mean() - xa.mean())
    va, vb = float(xa.var(ddof=1)) / len(xa), float(xb.var(ddof=1)) / len(xb)
    se2 = va + vb
    if se2 == 0:  # both sides constant: the difference is known exactly
        return WelchResult(diff, diff, diff, math.copysign(math.inf, diff) if diff else 0.0, math.nan,
                           0.0 if diff else 1.0, confidence)
    se = math.sqrt(se2)
    df = se2 * se2 / (va * va / (len(xa) - 1) + vb * vb / (len(xb) - 1))
    t = diff / se
    p = min(1.0, 2.0 * (1.0 - t_cdf(abs(t), df)))
    half = t_ppf((1.0 + confidence) / 2.0, df) * se
    return WelchResult(diff, diff - half, diff + half, t, df, p, confidence)


def permutation_test(a: Values, b: Values, seed: int = DEFAULT_SEED,
                     resamples: int = PERMUTATION_RESAMPLES) -> TestResult:
    """Two-sided permutation test of mean(b) - mean(a) (Fisher 1935; Good 2005):
    every relabelling of the pooled values when there are at most
    EXACT_PERMUTATION_MAX of them (exact), else `resamples` random ones with
    p = (1 + b) / (1 + R) each side (Phipson & Smyth 2010). Two-sided p is twice
    the smaller one-sided p, at most 1, as scipy.stats.permutation_test gives
    it. It assumes only that the runs are exchangeable under no effect. Its
    smallest p is 2 / C(n_a + n_b, n_a): with 3 runs a side 0.1, so it can
    never find a difference there (the report says so)."""
    xa, xb = _values(a), _values(b)
    na, nb = len(xa), len(xb)
    if na == 0 or nb == 0:
        raise ValueError("both samples need values")
    pooled = np.concatenate([xa, xb])
    total = float(pooled.sum())
    observed = float(xb.mean() - xa.mean())
    count = math.comb(na + nb, na)
    if count <= EXACT_PERMUTATION_MAX:
        index = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(na + nb), na)),
                            dtype=np.int64, count=count * na).reshape(count, na)
        exact, adjustment, draws = True, 0, count
    else:
        rng = np.random.default_rng(seed)
        index = np.argsort(rng.random((resamples, na + nb)), axis=1)[:, :na]
        exact, adjustment, draws = False, 1, resamples
    sum_a = pooled[index].sum(axis=1)
    null = (total - sum_a) / nb - sum_a / na
    gamma = abs(observed) * np.finfo(float).eps * 100  # equal up to rounding counts as equal
    less = (int((null <= observed + gamma).sum()) + adjustment) / (draws + adjustment)
    greater = (int((null >= observed - gamma).sum()) + adjustment) / (draws + adjustment)
    p = min(1.0, 2.0 * min(less, greater))
    method = ("exact permutation test (all relabellings)" if exact
              else f"permutation test ({resamples:,} random relabellings)")
    return TestResult(observed, p, method)


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values): q_(i) = min over j >= i
    of p_(j) m / j, at most 1 (Benjamini & Hochberg 1995). Calling a finding
    where q < alpha keeps the expected share of false findings among all the
    findings at or below alpha."""
    p = np.asarray(p_values, dtype=float)
    m = len(p)
    if m == 0:
        return []
    order = np.argsort(p)
    scaled = p[order] * m / np.arange(1, m + 1)
    q_sorted = np.minimum.accumulate(scaled[::-1])[::-1]
    q = np.empty(m)
    q[order] = np.minimum(q_sorted, 1.0)
    return [float(v) for v in q]


# --------------------------------------------------------------------- noise floor


@dataclass(frozen=True)
class NoiseFloor:
    """The spread of runs of identical set-ups (repetitions, and levels that
    resolve to one set-up), on the log scale: ratios within [1/factor, factor]
    are what one set-up gives run to run."""

    sd_log: float  # pooled standard deviation of ln(value)
    df: int  # its degrees of freedom: sum of (n_i - 1)
    groups: int  # groups of identical set-ups with two or more runs
    largest_ratio: float  # the largest max/min inside one group, as observed

    @property
    def factor(self) -> float:
        """The ISO 5725-6 repeatability limit as a ratio: exp(2.8 s_r). Two
        single runs of one set-up differ by more than this 5% of the time."""
        return math.exp(REPEATABILITY_K * self.sd_log)

    @property
    def percent(self) -> float:
        return (self.factor - 1.0) * 100.0

    def contains(self, ratio: float) -> bool:
        """Whether a ratio is within the floor (no change can be told)."""
        return math.isfinite(ratio) and ratio > 0 and abs(math.log(ratio)) <= math.log(self.factor)


def noise_floor(groups: Sequence[Sequence[float]]) -> NoiseFloor | None:
    """The pooled spread of groups of runs of identical set-ups: s_r^2 =
    sum (n_i - 1) s_i^2 / sum (n_i - 1) over ln(value) (the repeatability
    standard deviation of ISO 5725-2, on the log scale so it is relative).
    None without a group of two or more values, or when a value is 0 or
    negative (a relative spread needs positive figures)."""
    ss, df, used, largest = 0.0, 0, 0, 1.0
    for group in groups:
        x = _values(group)
        if (x <= 0).any():
            return None
        if len(x) < 2:
            continue
        y = np.log(x)
        ss += float(((y - y.mean()) ** 2).sum())
        df += len(y) - 1
        used += 1
        largest = max(largest, float(x.max() / x.min()))
    if df == 0:
        return None
    return NoiseFloor(math.sqrt(ss / df), df, used, largest)
