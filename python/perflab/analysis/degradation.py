"""Degradation over repeated runs in order (durability mode). Pure functions.

The model is OSDL's DBT-3 durability table: for runs 1..n of one combination,
the metric and its change from the first run in percent (-0.58%, -4.33%, ...).
A change is only called real when a test says so:

- a trend: the ordinary least-squares slope of the metric against the run
  number, with its Student t confidence interval (Montgomery & Runger sec. 11.4);
- change points: E-divisive (Matteson & James 2014, "A Nonparametric Approach
  for Multiple Change Point Analysis of Multivariate Data", JASA 109:505), as
  Apache Otava (formerly Hunter, DataStax) and MongoDB's signal processing
  use it on performance histories: the split that maximises the divergence in
  the energy distance between the two sides, accepted when a permutation test
  gives p below the level, then applied again to each side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from perflab.analysis.stats import CONFIDENCE, DEFAULT_SEED, t_cdf, t_ppf

SIGNIFICANCE = 0.05
# Permutations per change point test; p can go as low as 1/(R+1) = 0.005.
PERMUTATIONS = 199
# Matteson & James use alpha in (0, 2); alpha = 1 (plain absolute distance) is
# their and Otava's default.
ENERGY_ALPHA = 1.0
# Fewest values each side of a change point (Otava's default window is larger;
# durability studies have few runs, so two per side is the least that has a spread).
MIN_SEGMENT = 2


def change_from_first_pct(values: Sequence[float]) -> list[float]:
    """Each value's change from the first, in percent of the first (OSDL's column)."""
    if not values:
        return []
    first = values[0]
    if first == 0:
        return [math.nan for _ in values]
    return [(v - first) / abs(first) * 100.0 for v in values]


@dataclass(frozen=True)
class Trend:
    """OLS fit y = intercept + slope * x with the slope's CI and two-sided p-value."""

    slope: float
    intercept: float
    slope_low: float
    slope_high: float
    p_value: float
    confidence: float
    n: int
    method: str = "OLS slope, Student t interval (n-2 df)"

    @property
    def significant(self) -> bool:
        return math.isfinite(self.slope_low) and not (self.slope_low <= 0.0 <= self.slope_high)


def ols_trend(y: Sequence[float], x: Sequence[float] | None = None, confidence: float = CONFIDENCE) -> Trend:
    """Least-squares slope with its t interval; x defaults to 1..n (run numbers)."""
    ys = np.asarray(y, dtype=float)
    xs = np.arange(1, len(ys) + 1, dtype=float) if x is None else np.asarray(x, dtype=float)
    n = len(ys)
    if n < 2:
        raise ValueError("a trend needs two values")
    x_mean, y_mean = xs.mean(), ys.mean()
    sxx = float(((xs - x_mean) ** 2).sum())
    if sxx == 0:
        raise ValueError("x has no spread")
    slope = float(((xs - x_mean) * (ys - y_mean)).sum()) / sxx
    intercept = float(y_mean - slope * x_mean)
    if n < 3:
        return Trend(slope, intercept, math.nan, math.nan, math.nan, confidence, n)
    residuals = ys - (intercept + slope * xs)
    s2 = float((residuals**2).sum()) / (n - 2)
    se = math.sqrt(s2 / sxx)
    if se == 0:
        p = 0.0 if slope != 0 else 1.0
        return Trend(slope, intercept, slope, slope, p, confidence, n)
    half = t_ppf((1.0 + confidence) / 2.0, n - 2) * se
    t_stat = slope / se
    p = 2.0 * (1.0 - t_cdf(abs(t_stat), n - 2))
    return Trend(slope, intercept, slope - half, slope + half, p, confidence, n)


# --------------------------------------------------------------------- E-divisive


def _split_statistics(segments: np.ndarray, min_segment: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q(tau, kappa) for a batch of segments (R x L values) over every valid
    (tau, kappa), with X = [0, tau) (m values) and Y = [tau, kappa) (k values):

        Q = m k / (m + k) * (2/(m k) S_xy - S_xx / C(m,2) - S_yy / C(k,2))

    Matteson & James (2014) eq. 3 and 4, S the sums of |x_i - x_j|^alpha.
    The sums come from one 2-D prefix sum per segment, so a segment costs O(L^2).
    Returns (q of shape R x G, taus of G, kappas of G)."""
    length = segments.shape[1]
    taus = np.arange(min_segment, length - min_segment + 1)
    kappas = np.arange(2 * min_segment, length + 1)
    tau, kappa = np.meshgrid(taus, kappas, indexing="ij")
    valid = kappa - tau >= min_segment
    tau, kappa = tau[valid], kappa[valid]
    d = np.abs(segments[:, :, None] - segments[:, None, :]) ** ENERGY_ALPHA
    prefix = np.zeros((segments.shape[0], length + 1, length + 1))
    prefix[:, 1:, 1:] = d.cumsum(axis=1).cumsum(axis=2)
    s_xx = prefix[:, tau, tau]  # each unordered pair of X counted twice
    s_cross = prefix[:, tau, kappa] - s_xx  # X x Y
    s_yy = prefix[:, kappa, kappa] - s_xx - 2 * s_cross
    m = tau.astype(float)
    k = (kappa - tau).astype(float)
    # sum_{i<j} / C(m,2) = s_xx / (m (m-1)), since s_xx holds each pair twice
    within_x = s_xx / (m * (m - 1))
    within_y = s_yy / (k * (k - 1))
    between = s_cross / (m * k)
    return m * k / (m + k) * (2.0 * between - within_x - within_y), tau, kappa


def _best_split(segment: np.ndarray, min_segment: int) -> tuple[int, float]:
    """The tau (and its Q) that maximises Q over tau and kappa in one segment."""
    if len(segment) < 2 * min_segment:
        return -1, -math.inf
    q, tau, _ = _split_statistics(segment[None, :], min_segment)
    best = int(np.argmax(q[0]))
    return int(tau[best]), float(q[0, best])


def _permutation_maxima(segment: np.ndarray, permutations: int, min_segment: int, rng: np.random.Generator) -> np.ndarray:
    """max Q of each of `permutations` shuffles of the segment, batched so a
    batch holds about 4 million distances."""
    length = len(segment)
    batch = max(1, 4_000_000 // (length * length))
    maxima = []
    done = 0
    while done < permutations:
        r = min(batch, permutations - done)
        shuffled = np.stack([rng.permutation(segment) for _ in range(r)])
        q, _, _ = _split_statistics(shuffled, min_segment)
        maxima.append(q.max(axis=1))
        done += r
    return np.concatenate(maxima)


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first value after the change (0-based)
    p_value: float
    statistic: float
    mean_before: float
    mean_after: float

    @property
    def change_pct(self) -> float:
        if self.mean_before == 0:
            return math.nan
        return (self.mean_after - self.mean_before) / abs(self.mean_before) * 100.0


def change_points(
    values: Sequence[float],
    significance: float = SIGNIFICANCE,
    permutations: int = PERMUTATIONS,
    min_segment: int = MIN_SEGMENT,
    seed: int = DEFAULT_SEED,
) -> list[ChangePoint]:
    """E-divisive change points, hierarchically: the best split over all current
    segments is tested by permuting its segment (p = (1 + #{Q_perm >= Q}) / (R + 1));
    if p < significance it is kept and its two sides become segments; the
    search stops at the first split that is not significant."""
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    bounds = [0, len(x)]
    found: list[ChangePoint] = []
    tested: dict[tuple[int, int], tuple[int, float]] = {}
    while True:
        candidates = []
        for start, end in zip(bounds, bounds[1:], strict=False):
            if (start, end) not in tested:
                tested[(start, end)] = _best_split(x[start:end], min_segment)
            tau, q = tested[(start, end)]
            if tau > 0:
                candidates.append((q, start, end, tau))
        if not candidates:
            break
        q, start, end, tau = max(candidates)
        exceed = int((_permutation_maxima(x[start:end], permutations, min_segment, rng) >= q).sum())
        p = (1 + exceed) / (permutations + 1)
        if p >= significance:
            break
        cut = start + tau
        found.append(
            ChangePoint(cut, p, q, float(x[start:cut].mean()), float(x[cut:end].mean()))
        )
        bounds = sorted(bounds + [cut])
    return sorted(found, key=lambda c: c.index)


# --------------------------------------------------------------------- verdict


@dataclass
class Degradation:
    """The durability table of one combination and one metric, and the verdict."""

    values: list[float]
    change_pct: list[float]
    trend: Trend | None
    change_points: list[ChangePoint] = field(default_factory=list)
    higher_is_better: bool | None = None
    verdict: str = ""


def assess(
    values: Sequence[float],
    higher_is_better: bool | None,
    significance: float = SIGNIFICANCE,
    seed: int = DEFAULT_SEED,
    positions: Sequence[float] | None = None,
) -> Degradation:
    """Change from the first run, the trend and the change points, and a one-line
    verdict that says whether the metric really got worse. `positions`: each
    value's repetition number (default 1..n), so a missing run (a failed
    one) leaves its gap in the trend rather than closing it."""
    vals = [float(v) for v in values]
    trend = ols_trend(vals, positions) if len(vals) >= 3 else None
    cps = change_points(vals, significance=significance, seed=seed) if len(vals) >= 2 * MIN_SEGMENT else []
    result = Degradation(vals, change_from_first_pct(vals), trend, cps, higher_is_better)
    result.verdict = _verdict(result, significance)
    return result


def _worse(delta: float, higher_is_better: bool | None) -> bool | None:
    if higher_is_better is None or delta == 0:
        return None
    return (delta < 0) if higher_is_better else (delta > 0)


def _verdict(d: Degradation, significance: float) -> str:
    if d.trend is None:
        return f"too few runs for a trend test ({len(d.values)}; need 3)"
    parts = []
    if d.trend.significant:
        worse = _worse(d.trend.slope, d.higher_is_better)
        direction = {True: "degrades", False: "improves", None: "changes"}[worse]
        parts.append(f"{direction} by trend (slope CI excludes 0, p={d.trend.p_value:.3g})")
    for cp in d.change_points:
        worse = _worse(cp.mean_after - cp.mean_before, d.higher_is_better)
        word = {True: "drop", False: "rise", None: "shift"}[worse]
        if d.higher_is_better is False:
            word = {True: "rise (worse)", False: "drop (better)", None: "shift"}[worse]
        parts.append(f"{word} of {cp.change_pct:+.2f}% at run {cp.index + 1} (p={cp.p_value:.3f})")
    if not parts:
        return f"no significant change (trend p={d.trend.p_value:.3g}; no change point at p<{significance})"
    return "; ".join(parts)


# --------------------------------------------------------------------- within a run

# A durability run lasts days: its rate per hour of the run, and a trend over
# those hours, says whether it slowed within itself.
# A trend over n runs has n - 2 degrees of freedom: over 3 runs its 95% CI
# uses t = 12.7 and spans thousands of tx/s either way (a WAL sweep of 3
# repetitions showed "120 [-4,017, 4,257]" per run), which reads as a finding
# and is none. From 5 runs (t = 3.18) a trend can say something: the least
# runs of one combination the report, its durability study and serve judge.
MIN_RUNS = 5
WINDOW_S = 3600.0
MIN_WINDOWS = 3


@dataclass(frozen=True)
class WithinRun:
    """A series' mean over each whole window of one run, in order, each one's
    change from the first, and a trend over them."""

    window_s: float
    starts: list[float]  # each window's start on the run's clock (s)
    means: list[float]  # NaN: a window with no value in it
    change_pct: list[float]
    trend: Trend | None  # slope per window; None below MIN_WINDOWS windows with a value
    verdict: str
    autocorrelation: float = math.nan  # lag-1, of the trend's residuals


def _trend_with_autocorrelation(y: np.ndarray, x: np.ndarray, confidence: float) -> tuple[Trend, float]:
    """OLS slope whose interval allows for lag-1 autocorrelated residuals, as
    the hours of one run are (a slow hour is often followed by another): the
    effective sample size n (1 - r1) / (1 + r1) sets the standard error and
    the degrees of freedom (Santer et al. 2000, "Statistical significance of
    trends and trend differences in layer-average atmospheric temperature
    time series", JGR 105(D6):7337, eq. 6). Undefined (NaN interval) when
    fewer than three effective values are left."""
    plain = ols_trend(y.tolist(), x.tolist(), confidence)
    n = len(y)
    residuals = y - (plain.intercept + plain.slope * x)
    ss = float((residuals**2).sum())
    r1 = float((residuals[:-1] * residuals[1:]).sum()) / ss if ss > 0 else 0.0
    n_eff = n * (1.0 - r1) / (1.0 + r1) if r1 > 0 else float(n)
    method = "OLS slope per window, Student t interval on the effective sample size for lag-1 autocorrelation " \
             "(Santer et al. 2000)"
    if n_eff <= 2.0 or ss == 0:
        if ss == 0:  # a straight line: the slope is exact
            return Trend(plain.slope, plain.intercept, plain.slope, plain.slope,
                         0.0 if plain.slope != 0 else 1.0, confidence, n, method), r1
        return Trend(plain.slope, plain.intercept, math.nan, math.nan, math.nan, confidence, n, method), r1
    sxx = float(((x - x.mean()) ** 2).sum())
    df = n_eff - 2.0
    se = math.sqrt(ss / df / sxx)
    half = t_ppf((1.0 + confidence) / 2.0, df) * se
    p = 2.0 * (1.0 - t_cdf(abs(plain.slope / se), df))
    return Trend(plain.slope, plain.intercept, plain.slope - half, plain.slope + half, p, confidence, n, method), r1


def within_run(t: Sequence[float] | np.ndarray, values: Sequence[float | None] | np.ndarray,
               higher_is_better: bool | None,
               window_s: float = WINDOW_S, confidence: float = CONFIDENCE) -> WithinRun:
    """The series (t, values in time order, e.g. a run's per-second rate) cut
    into whole windows of `window_s` from its first sample (a last window the
    run did not fill is left out: a part of an hour is no hour), each
    window's mean (missing values count in none), and a trend over the
    windows with a verdict that says whether the run slowed within itself."""
    if window_s <= 0:
        raise ValueError("window_s must be positive")
    ts = np.asarray(t, dtype=float)
    vs = np.asarray(values, dtype=float)
    if len(ts) == 0:
        return WithinRun(window_s, [], [], [], None, "no values")
    step = float(np.median(np.diff(ts))) if len(ts) > 1 else 0.0
    whole = int((ts[-1] - ts[0] + step) // window_s)
    index = ((ts - ts[0]) // window_s).astype(np.int64)
    keep = np.isfinite(vs) & (index < whole)
    sums = np.bincount(index[keep], weights=vs[keep], minlength=whole)[:whole]
    counts = np.bincount(index[keep], minlength=whole)[:whole]
    means = [float(s / c) if c else math.nan for s, c in zip(sums, counts, strict=True)]
    starts = [float(ts[0] + k * window_s) for k in range(whole)]
    change = change_from_first_pct(means) if means and math.isfinite(means[0]) else [math.nan] * len(means)
    have = [k for k, m in enumerate(means) if math.isfinite(m)]
    span = _window_words(window_s)
    if len(have) < MIN_WINDOWS:
        return WithinRun(window_s, starts, means, change, None,
                         f"{len(have)} whole {span} window(s) with values; a trend within the run needs {MIN_WINDOWS}")
    trend, r1 = _trend_with_autocorrelation(np.asarray([means[k] for k in have]),
                                            np.asarray([k + 1.0 for k in have]), confidence)
    first = means[have[0]]
    per_window = trend.slope / abs(first) * 100.0 if first else math.nan
    if not math.isfinite(trend.slope_low):
        verdict = (f"no trend test: the {len(have)} {span} windows are too autocorrelated "
                   f"(lag-1 r = {r1:.2f}) to leave three independent values")
    elif trend.significant:
        worse = _worse(trend.slope, higher_is_better)
        word = {True: "degrades", False: "improves", None: "changes"}[worse]
        verdict = (f"{word} within the run: {per_window:+.2f}% of the first window's mean per {span} "
                   f"(slope CI excludes 0, p={trend.p_value:.3g}, {len(have)} windows)")
    else:
        verdict = (f"no significant trend within the run over {len(have)} {span} windows "
                   f"({per_window:+.2f}% per {span}, p={trend.p_value:.3g})")
    return WithinRun(window_s, starts, means, change, trend, verdict, r1)


def _window_words(window_s: float) -> str:
    if window_s % 3600 == 0:
        return "hour" if window_s == 3600 else f"{window_s / 3600:g}-hour"
    if window_s % 60 == 0:
        return "minute" if window_s == 60 else f"{window_s / 60:g}-minute"
    return f"{window_s:g}-s"
