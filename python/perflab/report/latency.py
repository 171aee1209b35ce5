"""Latency percentiles from the stored HDR histograms, through the engine.

Histograms of one combination's repetitions are merged exactly by the engine
(every perflab histogram has the same bucket layout), so the spectrum of a
combination is that of every transaction in all of its runs. The engine's
histogram functions are looked up when used: a perflab built without them
skips the spectrum and says why, instead of failing the report.
"""

from __future__ import annotations

from collections.abc import Sequence

from perflab import _engine


class HistogramsUnavailable(Exception):
    pass


def _function(name: str):  # type: ignore[no-untyped-def]
    fn = getattr(_engine, name, None)
    if fn is None:
        raise HistogramsUnavailable(
            f"this perflab's engine has no {name}() (perflab._engine {_engine.__version__}); "
            "rebuild it with `maturin develop --release`"
        )
    return fn


def merged_percentiles(blobs: Sequence[bytes], percentiles: Sequence[float]) -> tuple[list[float], int]:
    """Values at `percentiles` (0-100) of the merged histograms, in the
    histograms' unit, and the number of values recorded."""
    merge = _function("histogram_merge")
    quantiles = _function("histogram_quantiles")
    merged = merge(list(blobs)) if len(blobs) > 1 else blobs[0]
    values, count = quantiles(merged, [p / 100.0 for p in percentiles])
    return [float(v) for v in values], int(count)
