"""Scaling curves: a metric against one numeric factor, one curve per value of
the other factors (TPS against clients, per synchronous_commit). Pure functions.

Input rows are (factors, value) pairs, one per run that produced the metric;
repetitions of one combination are summarised (mean and CI) per point.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from perflab.analysis.stats import DEFAULT_SEED, Summary, summarize
from perflab.model import fmt_factors


def is_numeric(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def numeric_factors(factor_values: Mapping[str, Sequence[Any]]) -> list[str]:
    """Factors whose values are all numbers and that take at least two values:
    the ones a curve can be drawn against."""
    return [
        name
        for name, values in factor_values.items()
        if len({json.dumps(v) for v in values}) >= 2 and all(is_numeric(v) for v in values)
    ]


@dataclass
class CurvePoint:
    x: float
    summary: Summary


@dataclass
class Curve:
    """One line of a scaling figure: the other factors' values, and its points by x."""

    others: dict[str, Any]
    points: list[CurvePoint]

    @property
    def label(self) -> str:
        return fmt_factors(self.others, ", ") or "all runs"

    def peak(self, higher_is_better: bool | None = True) -> CurvePoint | None:
        """The best point (highest mean, or lowest when lower is better)."""
        if not self.points:
            return None
        if higher_is_better is False:
            return min(self.points, key=lambda p: p.summary.mean)
        return max(self.points, key=lambda p: p.summary.mean)


def scaling_curves(
    rows: Iterable[tuple[dict[str, Any], float]],
    factor: str,
    seed: int = DEFAULT_SEED,
) -> list[Curve]:
    """Group runs by the values of every factor but `factor`; within a group,
    summarise the runs at each value of `factor`. Rows without the factor, or
    with a non-numeric value of it, are left out."""
    groups: dict[str, dict[float, list[float]]] = {}
    others_of: dict[str, dict[str, Any]] = {}
    for factors, value in rows:
        x = factors.get(factor)
        if not is_numeric(x) or value is None or not math.isfinite(value):
            continue
        others = {k: v for k, v in factors.items() if k != factor}
        key = json.dumps(others, sort_keys=True, default=str)
        others_of[key] = others
        groups.setdefault(key, {}).setdefault(float(cast(float, x)), []).append(float(value))
    curves = []
    for key in sorted(groups):
        points = [CurvePoint(x, summarize(vals, seed=seed)) for x, vals in sorted(groups[key].items())]
        curves.append(Curve(others_of[key], points))
    return curves


def scaling_efficiency(curve: Curve) -> list[float]:
    """Each point's mean over what linear scaling from the first point predicts:
    mean(x) / (mean(x0) * x / x0). 1.0 is perfect scaling; meaningful for
    throughput against a count of clients, workers or cores."""
    if not curve.points:
        return []
    first = curve.points[0]
    if first.x == 0 or first.summary.mean == 0:
        return [math.nan for _ in curve.points]
    return [p.summary.mean / (first.summary.mean * p.x / first.x) for p in curve.points]
