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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
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

# Fewer repetitions than this and a 95% interval means little (with n = 2 the
# t quantile is 12.7): the report says so and suggests how many to run.
MIN_MEANINGFUL_N = 3
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


def normal_ppf(p: float) -> float:
    return _NORMAL.inv_cdf(p)


# --------------------------------------------------------------------- intervals


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval and the method that made it."""

    estimate: float
    low: float
    high: float
    confidence: float
    method: str  # "student-t", "bootstrap-percentile", "none (n=1)"

    def excludes(self, value: float) -> bool:
        return not (self.low <= value <= self.high)


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


def mean_interval(values: Values, confidence: float = CONFIDENCE, seed: int = DEFAULT_SEED) -> Interval:
    """The report's interval of a mean: Student t when n < BOOTSTRAP_MIN_N (the
    usual case of 3-10 repetitions), the seeded percentile bootstrap otherwise,
    which does not assume the runs' figures are normal. When every value is
    positive (TPS, a latency) and the t interval would reach below zero (few,
    spread runs), the log-normal interval is used instead: a quantity that
    cannot be negative gets no negative bound. (The bootstrap's bounds are
    means of resamples, never below the smallest value.)"""
    x = _values(values)
    if len(x) < BOOTSTRAP_MIN_N:
        t = t_interval(x, confidence)
        if len(x) > 1 and t.low < 0 and (x > 0).all():
            return lognormal_interval(x, confidence)
        return t
    return bootstrap_interval(x, confidence, seed=seed)


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
    a: Sequence[float],
    b: Sequence[float],
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
    if len(x) == 1:
        warnings.append("n=1: no interval; repeat the run (experiment.repetitions)")
    elif len(x) < MIN_MEANINGFUL_N:
        warnings.append(
            f"n={len(x)}: the interval means little; about {repetitions_for(x)} repetitions would give "
            f"+-{TARGET_HALF_WIDTH * 100:.0f}% at this CV (experiment.repetitions)"
        )
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
