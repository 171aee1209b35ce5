"""perflab.analysis on textbook examples with known answers, and against an
independent computation (scipy.stats, a dev dependency used only here)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from perflab.analysis import degradation, scaling, stats

scipy_stats = pytest.importorskip("scipy.stats")

# Anscombe (1973), "Graphs in Statistical Analysis", data set I: the fit is
# y = 3.00 + 0.500 x (published), r^2 = 0.67, slope p = 0.00217.
ANSCOMBE_X = [10, 8, 13, 9, 11, 14, 6, 4, 12, 7, 5]
ANSCOMBE_Y1 = [8.04, 6.95, 7.58, 8.81, 8.33, 9.96, 7.24, 4.26, 10.84, 4.82, 5.68]


# ----------------------------------------------------------------- distributions


@pytest.mark.parametrize(
    ("df", "quantile"),
    # Student t table, two-sided 95% (p = 0.975): 12.706, 2.776, 2.262, 2.042, 1.960 (inf)
    [(1, 12.7062), (4, 2.7764), (9, 2.2622), (30, 2.0423), (10_000, 1.9602)],
)
def test_t_quantiles_match_the_table(df: int, quantile: float) -> None:
    assert stats.t_ppf(0.975, df) == pytest.approx(quantile, abs=1e-4)


def test_t_cdf_and_ppf_match_scipy() -> None:
    for df, p in itertools.product([1, 2, 3, 7, 29, 200], [0.6, 0.9, 0.95, 0.975, 0.995, 0.9995]):
        assert stats.t_ppf(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-9)
    for df, t in itertools.product([1, 3, 12], [-4.0, -0.3, 0.0, 1.1, 6.0]):
        assert stats.t_cdf(t, df) == pytest.approx(scipy_stats.t.cdf(t, df), abs=1e-12)


# ----------------------------------------------------------------- intervals


def test_t_interval_matches_scipy_and_says_its_method() -> None:
    tps = [1012.5, 998.1, 1030.7, 1005.2]
    ci = stats.t_interval(tps)
    low, high = scipy_stats.t.interval(0.95, len(tps) - 1, loc=np.mean(tps), scale=scipy_stats.sem(tps))
    assert (ci.low, ci.high) == pytest.approx((low, high), rel=1e-10)
    assert ci.method == "student-t"
    assert ci.estimate == pytest.approx(1011.625)


def test_mean_interval_uses_t_when_small_and_bootstrap_when_large() -> None:
    assert stats.mean_interval([10.0, 11.0, 12.0]).method == "student-t"
    rng = np.random.default_rng(7)
    large = rng.normal(100.0, 5.0, size=200)
    boot = stats.mean_interval(large)
    assert boot.method == "bootstrap-percentile"
    t = stats.t_interval(large)
    # For 200 normal values the two intervals agree closely (both ~ +-1.96 s/sqrt(n)).
    assert boot.low == pytest.approx(t.low, abs=0.15)
    assert boot.high == pytest.approx(t.high, abs=0.15)
    # Seeded: the same input gives the same interval.
    assert stats.mean_interval(large) == boot
    assert stats.bootstrap_interval(large, seed=1) != stats.bootstrap_interval(large, seed=2)


def test_bootstrap_interval_agrees_with_scipy_percentile_bootstrap() -> None:
    rng = np.random.default_rng(11)
    skewed = rng.exponential(10.0, size=60)
    ours = stats.bootstrap_interval(skewed, resamples=20_000)
    theirs = scipy_stats.bootstrap(
        (skewed,), np.mean, confidence_level=0.95, n_resamples=20_000, method="percentile", random_state=3
    ).confidence_interval
    assert ours.low == pytest.approx(theirs.low, rel=0.03)
    assert ours.high == pytest.approx(theirs.high, rel=0.03)


def test_positive_figures_get_no_negative_bound() -> None:
    """TPS of three spread runs: the t interval reaches below zero, which TPS
    cannot; the log-normal interval is used and stays above it."""
    tps = [293.0, 977.0, 533.0]
    assert stats.t_interval(tps).low < 0
    ci = stats.mean_interval(tps)
    assert ci.method == "log-normal (modified Cox)" and 0 < ci.low < ci.estimate < ci.high
    assert ci.estimate == pytest.approx(np.mean(tps))
    # a figure that can be negative (a change in %) keeps the t interval
    assert stats.mean_interval([-3.0, 5.0, 1.0]).method == "student-t"


def test_lognormal_interval_covers_the_mean_95_percent_of_the_time() -> None:
    """Modified Cox (Olsson 2005) on log-normal samples of 5 with sigma 1, the
    spread of a noisy disk: the true mean exp(mu + sigma^2/2) is inside the
    interval close to 95% of the time (the t interval, about 85% here)."""
    rng = np.random.default_rng(3)
    true_mean = math.exp(0.5)
    trials = 2000
    inside = 0
    for _ in range(trials):
        ci = stats.lognormal_interval(rng.lognormal(0.0, 1.0, size=5))
        inside += ci.low <= true_mean <= ci.high
    assert 0.93 <= inside / trials <= 0.975


def test_two_runs_say_the_interval_means_little_and_how_many_to_run() -> None:
    summary = stats.summarize([1000.0, 1100.0])
    assert any(w.startswith("n=2: the interval means little; about ") for w in summary.warnings)
    # CV 6.73%: t_{n-1} CV / sqrt(n) is 5.18% at n = 9 (t 2.306) and 4.82% at n = 10 (t 2.262)
    assert stats.repetitions_for([1000.0, 1100.0]) == 10
    assert stats.repetitions_for([1000.0, 1000.5]) == stats.MIN_MEANINGFUL_N


def test_single_value_has_no_interval() -> None:
    ci = stats.mean_interval([5.0])
    assert ci.estimate == 5.0 and math.isnan(ci.low) and ci.method == "none (n=1)"


def test_ratio_interval() -> None:
    exact = stats.ratio_interval([10.0, 10.0, 10.0], [20.0, 20.0, 20.0])
    assert (exact.estimate, exact.low, exact.high) == (2.0, 2.0, 2.0)
    rng = np.random.default_rng(5)
    a = rng.normal(1000.0, 20.0, size=30)
    b = rng.normal(1100.0, 20.0, size=30)
    ci = stats.ratio_interval(a, b)
    assert ci.low < 1.1 < ci.high and ci.excludes(1.0)
    assert ci.estimate == pytest.approx(b.mean() / a.mean())


# ----------------------------------------------------------------- spread, outliers


def test_coefficient_of_variation() -> None:
    # mean 10, sample sd sqrt(((-2)^2 + 0 + 2^2) / 2) = 2  ->  CV 0.2
    assert stats.coefficient_of_variation([8.0, 10.0, 12.0]) == pytest.approx(0.2)
    assert math.isnan(stats.coefficient_of_variation([3.0]))


def test_modified_z_score_by_hand() -> None:
    # median 2.2; |deviations| 0.1 0 0.2 0.1 0 6.8 -> MAD 0.1;
    # M(9.0) = 0.6745 * 6.8 / 0.1 = 45.866; M(2.0) = 0.6745 * -0.2 / 0.1 = -1.349
    values = [2.1, 2.2, 2.0, 2.3, 2.2, 9.0]
    z = stats.modified_z_scores(values)
    assert z[5] == pytest.approx(45.866)
    assert z[2] == pytest.approx(-1.349)
    assert stats.outliers(values) == [5]
    assert stats.MODIFIED_Z_CONSTANT == 0.6745 and stats.MODIFIED_Z_THRESHOLD == 3.5


def test_modified_z_score_when_mad_is_zero_falls_back_to_mean_absolute_deviation() -> None:
    values = [5.0, 5.0, 5.0, 5.0, 9.0]
    # MAD = 0; mean |dev| = 0.8; M(9) = 4 / (1.253314 * 0.8) = 3.989 > 3.5
    assert stats.modified_z_scores(values)[4] == pytest.approx(4 / (1.253314 * 0.8))
    assert stats.outliers(values) == [4]
    assert stats.outliers([5.0, 5.0, 5.0]) == []


def test_summary_warns_about_noise_and_outliers() -> None:
    quiet = stats.summarize([1000.0, 1001.0, 999.0, 1000.5])
    assert quiet.warnings == [] and quiet.n == 4 and quiet.interval.method == "student-t"
    noisy = stats.summarize([1000.0, 1200.0, 800.0])
    assert any("high CV" in w for w in noisy.warnings)
    odd = stats.summarize([100.0, 101.0, 99.0, 100.5, 100.2, 60.0])
    assert odd.outlier_indices == [5]
    assert any("Iglewicz & Hoaglin" in w for w in odd.warnings)


# ----------------------------------------------------------------- Mann-Whitney U


def test_mann_whitney_exact_textbook_values() -> None:
    # Fully separated samples: the most extreme of C(n1+n2, n1) arrangements on
    # each side, so p = 2 / C(6, 3) = 0.1 and 2 / C(8, 4) = 2 / 70.
    assert stats.mann_whitney_u([1, 2, 3], [4, 5, 6]).p_value == pytest.approx(0.1)
    r = stats.mann_whitney_u([1, 2, 3, 4], [5, 6, 7, 8])
    assert r.p_value == pytest.approx(2 / 70) and r.statistic == 0 and "exact" in r.method


@pytest.mark.parametrize("seed", range(6))
def test_mann_whitney_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n1, n2 = int(rng.integers(3, 15)), int(rng.integers(3, 15))
    a = rng.normal(0.0, 1.0, n1)
    b = rng.normal(0.7, 1.0, n2)
    ours = stats.mann_whitney_u(a, b)
    theirs = scipy_stats.mannwhitneyu(a, b, alternative="two-sided", method="exact")
    assert ours.statistic == theirs.statistic
    assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-9)


def test_mann_whitney_with_ties_uses_the_corrected_normal_approximation() -> None:
    a = [3, 4, 4, 5, 6, 6, 6, 8, 9]
    b = [5, 6, 7, 7, 8, 8, 9, 10, 10, 11]
    ours = stats.mann_whitney_u(a, b)
    theirs = scipy_stats.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic", use_continuity=True)
    assert "tie correction" in ours.method
    assert ours.statistic == theirs.statistic
    assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-9)


def test_mann_whitney_large_samples_use_the_normal_approximation() -> None:
    rng = np.random.default_rng(9)
    a, b = rng.normal(0, 1, 40), rng.normal(0.2, 1, 45)
    ours = stats.mann_whitney_u(a, b)
    theirs = scipy_stats.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic")
    assert "normal" in ours.method
    assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-9)


# ----------------------------------------------------------------- degradation


def test_change_from_first_reproduces_the_osdl_durability_column() -> None:
    # OSDL DBT-3 durability runs: throughput change from the first run
    # -0.58%, -4.33%, -8.22%, -8.73% (first run taken as 100).
    values = [100.0, 99.42, 95.67, 91.78, 91.27]
    assert degradation.change_from_first_pct(values) == pytest.approx([0.0, -0.58, -4.33, -8.22, -8.73])


def test_ols_trend_on_anscombe_i() -> None:
    trend = degradation.ols_trend(ANSCOMBE_Y1, ANSCOMBE_X)
    assert trend.slope == pytest.approx(0.5001, abs=1e-4)
    assert trend.intercept == pytest.approx(3.0001, abs=1e-4)
    assert trend.p_value == pytest.approx(0.00217, abs=1e-5)
    fit = scipy_stats.linregress(ANSCOMBE_X, ANSCOMBE_Y1)
    half = scipy_stats.t.ppf(0.975, len(ANSCOMBE_X) - 2) * fit.stderr
    assert (trend.slope_low, trend.slope_high) == pytest.approx((fit.slope - half, fit.slope + half), rel=1e-9)
    assert trend.p_value == pytest.approx(fit.pvalue, rel=1e-9)
    assert trend.significant


def _energy_q_by_definition(x: np.ndarray, tau: int, kappa: int) -> float:
    """Matteson & James (2014) eq. 3 written out with plain loops:
    X = x[:tau], Y = x[tau:kappa]."""
    left, right = x[:tau], x[tau:kappa]
    m, k = len(left), len(right)
    between = sum(abs(a - b) for a in left for b in right) * 2.0 / (m * k)
    within_left = sum(abs(left[i] - left[j]) for i in range(m) for j in range(i + 1, m)) / math.comb(m, 2)
    within_right = sum(abs(right[i] - right[j]) for i in range(k) for j in range(i + 1, k)) / math.comb(k, 2)
    return m * k / (m + k) * (between - within_left - within_right)


def test_energy_statistic_matches_its_definition() -> None:
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(10, 1, 9), rng.normal(8, 1, 7), rng.normal(10, 1, 4)])
    tau, q = degradation._best_split(x, degradation.MIN_SEGMENT)
    by_definition = {
        (t, k): _energy_q_by_definition(x, t, k)
        for t in range(2, len(x) - 1)
        for k in range(t + 2, len(x) + 1)
    }
    best = max(by_definition, key=lambda tk: by_definition[tk])
    assert tau == best[0]
    assert q == pytest.approx(by_definition[best], rel=1e-12)


def test_change_point_found_at_a_step_and_not_in_noise() -> None:
    rng = np.random.default_rng(1)
    step = np.concatenate([rng.normal(1000, 5, 12), rng.normal(920, 5, 10)])
    found = degradation.change_points(step)
    assert [cp.index for cp in found] == [12]
    assert found[0].p_value < 0.05 and found[0].change_pct == pytest.approx(-8.0, abs=1.5)
    noise = rng.normal(1000, 5, 22)
    assert degradation.change_points(noise) == []


def test_two_change_points() -> None:
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(100, 1, 10), rng.normal(90, 1, 10), rng.normal(100, 1, 10)])
    found = degradation.change_points(x)
    # Both steps are found with the smallest p a 199-permutation test can give;
    # at a 5% level an extra, weaker split inside a flat segment may also pass.
    strongest = sorted(found, key=lambda cp: cp.statistic, reverse=True)[:2]
    assert sorted(cp.index for cp in strongest) == [10, 20]
    assert all(cp.p_value == pytest.approx(1 / 200) for cp in strongest)


def test_assess_says_whether_degradation_is_real() -> None:
    osdl = degradation.assess([100.0, 99.42, 95.67, 91.78, 91.27], higher_is_better=True)
    assert osdl.trend is not None and osdl.trend.slope < 0 and osdl.trend.significant
    assert "degrades" in osdl.verdict
    flat = degradation.assess([100.0, 100.4, 99.7, 100.2, 99.9], higher_is_better=True)
    assert flat.verdict.startswith("no significant change")
    latency = degradation.assess([5.0, 5.5, 6.1, 6.4, 7.2, 7.4], higher_is_better=False)
    assert "degrades" in latency.verdict
    assert "too few runs" in degradation.assess([1.0, 2.0], True).verdict


# ----------------------------------------------------------------- scaling


def test_numeric_factors() -> None:
    factors = {
        "workload.clients": [1, 2, 4],
        "target.settings.synchronous_commit": ["on", "off"],
        "workload.flag": [True, False],
        "workload.scale": [10],
    }
    assert scaling.numeric_factors(factors) == ["workload.clients"]


def test_scaling_curves_group_by_the_other_factors() -> None:
    rows = []
    for sync, clients, rep in itertools.product(["on", "off"], [1, 2, 4], range(3)):
        tps = clients * (500.0 if sync == "off" else 300.0) + rep
        rows.append(({"workload.clients": clients, "target.settings.synchronous_commit": sync}, tps))
    curves = scaling.scaling_curves(rows, "workload.clients")
    assert [c.label for c in curves] == ["synchronous_commit=off", "synchronous_commit=on"]
    off = curves[0]
    assert [p.x for p in off.points] == [1.0, 2.0, 4.0]
    assert [p.summary.mean for p in off.points] == [501.0, 1001.0, 2001.0]
    assert all(p.summary.n == 3 for p in off.points)
    assert off.peak().x == 4.0
    assert scaling.scaling_efficiency(off) == pytest.approx([1.0, 1001 / 1002, 2001 / 2004])


def test_linear_fit_recovers_a_known_loss_per_rule_with_r2() -> None:
    from perflab.analysis.linear import linear_fit

    xs = [0, 0, 0, 1000, 1000, 1000, 2000, 2000, 2000, 4000, 4000, 4000]
    wobble = [1.5, -1.0, -0.5, 0.8, -1.2, 0.4, -0.3, 1.1, -0.8, 0.6, -0.9, 0.3]
    ys = [900.0 - 0.05 * x + w for x, w in zip(xs, wobble, strict=True)]
    fit = linear_fit(xs, ys)
    assert fit.trend.slope_low < -0.05 < fit.trend.slope_high
    assert fit.r2 > 0.99 and fit.n == 12 and abs(fit.intercept - 900) < 2
    flat = linear_fit(xs, [900.0 + w for w in wobble])
    assert not flat.trend.significant and flat.r2 < 0.2
    assert fit.overlaps(fit) and not fit.overlaps(flat)
