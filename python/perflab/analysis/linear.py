"""A straight line through (x, y) points: the netfilter study's question, is
the throughput lost per rule constant?

`linear_fit` gives the OLS slope with its Student t interval (from
`degradation.ols_trend`) and R², the share of y's variance the line
explains. Every repetition is its own point, so the interval knows the noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perflab.analysis.degradation import Trend, ols_trend
from perflab.analysis.stats import CONFIDENCE

# R² from which the report calls a loss "linear in the rule count".
LINEAR_R2 = 0.9


@dataclass(frozen=True)
class LinearFit:
    trend: Trend
    r2: float
    n: int

    @property
    def slope(self) -> float:
        return self.trend.slope

    @property
    def intercept(self) -> float:
        return self.trend.intercept

    def overlaps(self, other: LinearFit) -> bool:
        """Whether the two slopes' intervals overlap (no difference shown)."""
        a, b = self.trend, other.trend
        if not all(math.isfinite(v) for v in (a.slope_low, a.slope_high, b.slope_low, b.slope_high)):
            return True
        return a.slope_low <= b.slope_high and b.slope_low <= a.slope_high


def linear_fit(x: Sequence[float], y: Sequence[float], confidence: float = CONFIDENCE) -> LinearFit:
    trend = ols_trend(y, x, confidence)
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    total = float(((ys - ys.mean()) ** 2).sum())
    residual = float(((ys - (trend.intercept + trend.slope * xs)) ** 2).sum())
    r2 = 1.0 - residual / total if total > 0 else 1.0
    return LinearFit(trend, r2, len(ys))
