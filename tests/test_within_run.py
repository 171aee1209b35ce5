"""Degradation inside a run (issue 48, item 6): the rate per whole hour of one
run and a trend over the hours that allows for autocorrelated hours."""

from __future__ import annotations

import math

import numpy as np

from perflab.analysis.degradation import ols_trend, within_run


def _ar1(rng: np.random.Generator, n: int, phi: float, sd: float) -> np.ndarray:
    out = np.zeros(n)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + rng.normal(0.0, sd)
    return out


def test_a_three_day_run_that_slows_within_itself_says_so() -> None:
    rng = np.random.default_rng(11)
    n = 3 * 86400
    t = np.arange(1, n + 1, dtype=float)
    hours = t / 3600.0
    rate = 1000.0 * (1 - 0.002 * hours) + rng.normal(0.0, 30.0, n)  # -0.2% an hour: -14% over three days
    rate[5000:5010] = np.nan  # seconds with nothing measured count in no mean
    result = within_run(t, rate, higher_is_better=True)
    assert len(result.means) == 72 and result.starts[1] - result.starts[0] == 3600.0
    assert result.trend is not None and result.trend.significant and result.trend.slope < 0
    assert result.verdict.startswith("degrades within the run")
    assert result.change_pct[-1] < -12.0
    # the same run, flat: no trend called
    flat = within_run(t, 1000.0 + rng.normal(0.0, 30.0, n), higher_is_better=True)
    assert flat.trend is not None and flat.verdict.startswith("no significant trend")


def test_a_part_of_an_hour_is_no_hour_and_two_hours_make_no_trend() -> None:
    t = np.arange(1, int(2.5 * 3600) + 1, dtype=float)
    result = within_run(t, np.full(len(t), 5.0), higher_is_better=True)
    assert len(result.means) == 2 and result.trend is None and "needs 3" in result.verdict
    assert within_run([], [], True).means == []
    # a window with no value at all is a gap, not a zero
    t = np.arange(1, 4 * 60 + 1, dtype=float)
    v: list[float | None] = [None if 60 < x <= 120 else 10.0 + x / 60 for x in t]
    short = within_run(t, v, higher_is_better=False, window_s=60.0)
    assert len(short.means) == 4 and math.isnan(short.means[1]) and short.trend is not None
    assert short.trend.n == 3 and short.verdict.startswith("degrades")  # a latency that rises is worse


def test_autocorrelated_hours_do_not_make_a_trend_out_of_noise() -> None:
    """Flat runs whose hours wander (AR(1), phi 0.7): the test calls a trend
    in about 5% of them, as its level says, where plain OLS on the hours
    calls several times as many."""
    rng = np.random.default_rng(5)
    adjusted = plain = 0
    runs = 400
    for _ in range(runs):
        hours = 1000.0 + _ar1(rng, 48, 0.7, 10.0)
        result = within_run(np.arange(48, dtype=float), hours, True, window_s=1.0)
        assert result.trend is not None
        adjusted += result.trend.significant
        plain += ols_trend(hours).significant
    assert adjusted / runs < 0.10
    assert plain > 2 * adjusted
