"""perflab.analysis on textbook examples with known answers, and against an
independent computation (scipy.stats, a dev dependency used only here)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from perflab.analysis import degradation, effects, scaling, stats

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


def test_mean_interval_is_chosen_by_sign_and_number() -> None:
    # positive figures: the geometric mean's interval at any n
    assert stats.mean_interval([10.0, 11.0, 12.0]).method == "t interval of the mean of logs (geometric mean)"
    rng = np.random.default_rng(7)
    assert stats.mean_interval(rng.normal(100.0, 5.0, size=200)).method.startswith("t interval of the mean of logs")
    # figures that can be 0 or negative: Student t at small n, the bootstrap from BOOTSTRAP_MIN_N
    assert stats.mean_interval([-3.0, 5.0, 1.0]).method == "student-t"
    large = rng.normal(0.0, 5.0, size=200)
    boot = stats.mean_interval(large)
    assert boot.method == "bootstrap-percentile"
    t = stats.t_interval(large)
    # For 200 normal values the two intervals agree closely (both ~ +-1.96 s/sqrt(n)).
    assert boot.low == pytest.approx(t.low, abs=0.15)
    assert boot.high == pytest.approx(t.high, abs=0.15)
    # Seeded: the same input gives the same interval.
    assert stats.mean_interval(large) == boot
    assert stats.bootstrap_interval(large, seed=1) != stats.bootstrap_interval(large, seed=2)
    # counts with zeros: the t interval is cut at 0, which the mean of non-negative values cannot pass
    cut = stats.mean_interval([0.0, 0.0, 3.0])
    assert cut.low == 0.0 and cut.method == "student-t, cut at 0"
    assert cut.high == pytest.approx(stats.t_interval([0.0, 0.0, 3.0]).high)


def test_geometric_interval_matches_scipy_on_the_logs() -> None:
    tps = [1012.5, 998.1, 1030.7, 1005.2]
    ci = stats.geometric_interval(tps)
    y = np.log(tps)
    low, high = scipy_stats.t.interval(0.95, len(y) - 1, loc=y.mean(), scale=scipy_stats.sem(y))
    assert (ci.low, ci.high) == pytest.approx((math.exp(low), math.exp(high)), rel=1e-10)
    assert ci.estimate == pytest.approx(scipy_stats.gmean(tps), rel=1e-12)
    assert not ci.too_wide and ci.shown


def test_below_three_values_there_is_no_interval() -> None:
    for values in ([5.0], [428.9, 431.2], [0.0, 1.0]):
        ci = stats.mean_interval(values)
        assert math.isnan(ci.low) and math.isnan(ci.high) and not ci.shown
        assert ci.method == f"none (n={len(values)}; an interval needs 3)"
    summary = stats.summarize([1000.0, 1100.0])
    assert summary.values == [1000.0, 1100.0]
    assert any(w.startswith("n=2: no interval (an interval needs 3 repetitions; about 10 ") for w in summary.warnings)


def test_positive_figures_get_no_negative_bound() -> None:
    """TPS of three spread runs: the t interval reaches below zero, which TPS
    cannot; the geometric mean's interval stays above it."""
    tps = [293.0, 977.0, 533.0]
    assert stats.t_interval(tps).low < 0
    ci = stats.mean_interval(tps)
    assert 0 < ci.low < ci.estimate < ci.high
    assert ci.estimate == pytest.approx(scipy_stats.gmean(tps))


def test_an_interval_too_wide_to_inform_says_so() -> None:
    # ln-spread 0.9 over 3 runs: the interval spans exp(2 * 4.303 * 0.9 / sqrt 3) = x88
    wide = stats.mean_interval([100.0, 300.0, 40.0])
    assert wide.too_wide and not wide.shown and wide.high / wide.low > stats.WIDE_FACTOR
    summary = stats.summarize([100.0, 300.0, 40.0])
    assert any(w.startswith("too few runs") for w in summary.warnings)
    narrow = stats.mean_interval([100.0, 104.0, 98.0])
    assert not narrow.too_wide and narrow.high / narrow.low < stats.WIDE_FACTOR
    # other figures: wider than WIDE_FACTOR x the range of the values
    assert not stats.mean_interval([-3.0, 5.0, 1.0]).too_wide


def test_bootstrap_interval_agrees_with_scipy_percentile_bootstrap() -> None:
    rng = np.random.default_rng(11)
    skewed = rng.exponential(10.0, size=60)
    ours = stats.bootstrap_interval(skewed, resamples=20_000)
    theirs = scipy_stats.bootstrap(
        (skewed,), np.mean, confidence_level=0.95, n_resamples=20_000, method="percentile", random_state=3
    ).confidence_interval
    assert ours.low == pytest.approx(theirs.low, rel=0.03)
    assert ours.high == pytest.approx(theirs.high, rel=0.03)


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


def test_repetitions_for_a_target_precision() -> None:
    # CV 6.73%: t_{n-1} CV / sqrt(n) is 5.18% at n = 9 (t 2.306) and 4.82% at n = 10 (t 2.262)
    assert stats.repetitions_for([1000.0, 1100.0]) == 10
    assert stats.repetitions_for([1000.0, 1000.5]) == stats.MIN_MEANINGFUL_N


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
    assert quiet.warnings == [] and quiet.n == 4 and quiet.interval.method.startswith("t interval of the mean of logs")
    noisy = stats.summarize([1000.0, 1200.0, 800.0])
    assert any("high CV" in w for w in noisy.warnings)
    odd = stats.summarize([100.0, 101.0, 99.0, 100.5, 100.2, 60.0])
    assert odd.outlier_indices == [5]
    assert any("Iglewicz & Hoaglin" in w for w in odd.warnings)


# ----------------------------------------------------------------- two samples at small n


@pytest.mark.parametrize("n", [3, 5, 10])
def test_ratio_interval_covers_the_true_ratio_95_percent_of_the_time(n: int) -> None:
    """Property: for log-normal runs (sigma 0.1 against 0.2: a quiet and a
    noisier level), the 95% interval of B/A the report prints covers the true
    ratio of geometric means, 1.1, in 93-97% of 1,000 simulated experiments.
    (Welch's interval is slightly conservative at n = 3: about 96%.)"""
    rng = np.random.default_rng(2600 + n)
    trials, inside = 1000, 0
    for _ in range(trials):
        a = rng.lognormal(math.log(1000.0), 0.1, size=n)
        b = rng.lognormal(math.log(1100.0), 0.2, size=n)
        ratio = effects.effect(list(a), list(b), True).ratio
        inside += ratio.low <= 1.1 <= ratio.high
    coverage = inside / trials
    print(f"coverage n={n}: {coverage:.3f}")
    assert 0.93 <= coverage <= 0.97


@pytest.mark.parametrize("n", [3, 5, 10])
def test_geometric_interval_covers_the_true_geometric_mean(n: int) -> None:
    rng = np.random.default_rng(2700 + n)
    inside = sum(
        (ci := stats.geometric_interval(rng.lognormal(math.log(500.0), 0.3, size=n))).low <= 500.0 <= ci.high
        for _ in range(1000)
    )
    print(f"geometric mean coverage n={n}: {inside / 1000:.3f}")
    assert 0.93 <= inside / 1000 <= 0.97


@pytest.mark.parametrize("seed", range(6))
def test_welch_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.lognormal(0.0, rng.uniform(0.05, 0.5), size=int(rng.integers(2, 12)))
    b = rng.lognormal(rng.uniform(-0.3, 0.3), rng.uniform(0.05, 0.5), size=int(rng.integers(2, 12)))
    ours = stats.welch(a, b)
    theirs = scipy_stats.ttest_ind(b, a, equal_var=False)
    assert ours.statistic == pytest.approx(theirs.statistic, rel=1e-10)
    assert ours.df == pytest.approx(theirs.df, rel=1e-10)
    assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-8, abs=1e-12)
    low, high = theirs.confidence_interval(0.95)
    assert (ours.low, ours.high) == pytest.approx((low, high), rel=1e-8)


@pytest.mark.parametrize(("na", "nb", "seed"), [(3, 3, 0), (3, 4, 1), (4, 6, 2), (5, 5, 3), (2, 7, 4), (8, 9, 5)])
def test_exact_permutation_test_matches_scipy(na: int, nb: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.poisson(3.0, size=na).astype(float)  # counts: ties and zeros, as failed queries are
    b = rng.poisson(5.0, size=nb).astype(float)
    ours = stats.permutation_test(a, b)
    theirs = scipy_stats.permutation_test(
        (b, a), lambda x, y, axis: np.mean(x, axis=axis) - np.mean(y, axis=axis),
        permutation_type="independent", n_resamples=np.inf, alternative="two-sided")
    assert ours.method == "exact permutation test (all relabellings)"
    assert ours.statistic == pytest.approx(theirs.statistic)
    assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-12)
    # the smallest p it can give is 2 / C(na + nb, na): with 3 and 3, 0.1
    separated = stats.permutation_test([1.0, 2.0, 3.0], [10.0, 11.0, 12.0])
    assert separated.p_value == pytest.approx(2 / math.comb(6, 3))


def test_random_permutation_test_beyond_the_exact_limit() -> None:
    rng = np.random.default_rng(9)
    a, b = rng.normal(10, 1, size=15), rng.normal(11, 1, size=15)  # C(30, 15) = 155 million
    ours = stats.permutation_test(a, b, seed=1)
    assert ours.method.startswith("permutation test (9,999 random")
    theirs = scipy_stats.permutation_test(
        (b, a), lambda x, y, axis: np.mean(x, axis=axis) - np.mean(y, axis=axis),
        permutation_type="independent", n_resamples=9_999, random_state=2).pvalue
    assert ours.p_value == pytest.approx(theirs, abs=0.01)


def test_benjamini_hochberg_matches_scipy() -> None:
    rng = np.random.default_rng(4)
    for m in (1, 2, 7, 40):
        p = np.concatenate([rng.uniform(0, 0.01, size=m // 3), rng.uniform(0, 1, size=m - m // 3)])
        assert stats.benjamini_hochberg(list(p)) == pytest.approx(list(scipy_stats.false_discovery_control(p)))
    # the textbook case (Benjamini & Hochberg 1995, sec. 3.2 style): ties and order kept
    assert stats.benjamini_hochberg([0.01, 0.04, 0.03, 0.04]) == pytest.approx([0.04, 0.04, 0.04, 0.04])
    assert stats.benjamini_hochberg([]) == []


def test_a_ratio_with_a_zero_or_undefined_side_is_undefined() -> None:
    for a, b, reason in (([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], "0/0"), ([0.0, 0.0, 0.0], [1.0, 2.0, 0.0], "A is 0"),
                         ([3.0, 4.0, 5.0], [0.0, 0.0, 0.0], "B is 0"),
                         ([math.nan, math.nan], [1.0, 2.0, 3.0], "A has no finite value")):
        found = effects.effect(a, b, higher_is_better=False)
        assert found.verdict == "undefined" and found.p_value is None and reason in found.method
        assert math.isnan(found.ratio.estimate)
        assert effects.settle([found])[0].verdict == "undefined"


def test_fewer_than_three_a_side_gives_no_verdict() -> None:
    found = effects.effect([100.0, 101.0], [200.0, 201.0], True)
    assert found.verdict == effects.TOO_FEW and found.p_value is None and math.isnan(found.ratio.low)
    assert found.ratio.estimate == pytest.approx(math.sqrt(200 * 201) / math.sqrt(100 * 101))


def test_a_ratio_interval_too_wide_to_inform_says_so() -> None:
    wide = effects.effect([100.0, 300.0, 40.0], [90.0, 500.0, 30.0], True).ratio
    assert wide.too_wide and not wide.shown and wide.high / wide.low > stats.WIDE_FACTOR
    narrow = effects.effect([100.0, 104.0, 98.0], [110.0, 108.0, 113.0], True).ratio
    assert narrow.shown and narrow.high / narrow.low < stats.WIDE_FACTOR


def test_effect_tests_positive_figures_with_welch_on_logs_and_counts_by_permutation() -> None:
    a, b = [1000.0, 1010.0, 990.0, 1005.0], [1100.0, 1090.0, 1120.0, 1105.0]
    found = effects.effect(a, b, True)
    assert found.method == "Welch t on logs" and found.verdict == "better"
    assert found.p_value == pytest.approx(scipy_stats.ttest_ind(np.log(b), np.log(a), equal_var=False).pvalue)
    assert found.ratio.estimate == pytest.approx(scipy_stats.gmean(b) / scipy_stats.gmean(a))
    counts = effects.effect([0.0, 1.0, 0.0, 2.0], [5.0, 3.0, 4.0, 6.0], False)
    assert counts.method.startswith("exact permutation test") and counts.verdict == "worse"
    assert counts.ratio.estimate == pytest.approx(4.5 / 0.75) and math.isnan(counts.ratio.low)


def test_settle_controls_the_false_discovery_rate_and_the_noise_floor() -> None:
    rng = np.random.default_rng(12)
    # 20 comparisons of identical set-ups: some p < 0.05 by chance, none survives BH
    found = [effects.effect(list(rng.lognormal(0, 0.1, 5)), list(rng.lognormal(0, 0.1, 5)), True)
             for _ in range(20)]
    raw_hits = sum(f.verdict != "~" for f in found)
    settled = effects.settle(found)
    assert all(f.verdict == "~" for f in settled)
    assert [f.q_value for f in settled] == pytest.approx(stats.benjamini_hochberg([f.p_value for f in found]))
    assert raw_hits >= 1  # this seed has a false "change" unadjusted; BH removes it
    # a significant 3% change under a floor of +-5.8% is not called a change
    small = effects.effect([100.0, 100.5, 99.8, 100.2, 99.9], [103.0, 103.2, 102.9, 103.1, 103.0], True)
    assert small.verdict == "better"
    floor = stats.noise_floor([[100.0, 102.0, 98.0], [50.0, 51.0, 49.0]])
    assert floor is not None and floor.contains(1.03)
    assert effects.settle([small], [floor])[0].verdict == effects.WITHIN_NOISE
    assert effects.settle([small], [None])[0].verdict == "better"


def test_noise_floor_is_the_pooled_spread_of_identical_set_ups() -> None:
    groups = [[100.0, 104.0, 97.0], [50.0, 52.0], [7.0]]  # the single run adds nothing
    floor = stats.noise_floor(groups)
    assert floor is not None and floor.df == 3 and floor.groups == 2
    logs = [np.log(g) for g in groups[:2]]
    pooled = math.sqrt(sum(((y - y.mean()) ** 2).sum() for y in logs) / 3)
    assert floor.sd_log == pytest.approx(pooled)
    assert floor.factor == pytest.approx(math.exp(2.8 * pooled))
    assert floor.largest_ratio == pytest.approx(104.0 / 97.0)
    assert stats.noise_floor([[1.0], [2.0]]) is None
    assert stats.noise_floor([[0.0, 1.0, 2.0], [5.0, 6.0]]) is None  # failed-query counts: no relative spread


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


def test_family_comparison_says_not_tested_when_a_fit_has_no_interval() -> None:
    """Two rule counts with one run each fit a line with no interval: the
    IPv4/IPv6 table must not call the two losses "same" (an earlier version
    did, because a missing interval counted as overlapping)."""
    from perflab.analysis.linear import linear_fit
    from perflab.workloads.stream import _family_comparison

    key = {"workload.protocol": "udp"}
    groups = {"v4": {"key": {**key, "workload.family": "ipv4"}}, "v6": {"key": {**key, "workload.family": "ipv6"}}}
    two = {"v4": linear_fit([0, 500], [312.0, 197.0]), "v6": linear_fit([0, 500], [654.0, 377.0])}
    assert not math.isfinite(two["v4"].trend.slope_low)
    (table,) = _family_comparison(groups, two)
    assert table.rows[0][3] == "not tested (too few points for an interval)"
    xs = [0, 0, 0, 500, 500, 500, 1000, 1000, 1000]
    wobble = [1.5, -1.0, -0.5, 0.8, -1.2, 0.4, -0.3, 1.1, -0.8]
    many = {"v4": linear_fit(xs, [900.0 - 0.05 * x + w for x, w in zip(xs, wobble, strict=True)]),
            "v6": linear_fit(xs, [900.0 - 0.5 * x + w for x, w in zip(xs, wobble, strict=True)])}
    (table,) = _family_comparison(groups, many)
    assert table.rows[0][3] == "different (intervals apart)"
