"""Latency percentiles from the stored HDR histograms, through the engine.

Histograms of one combination's repetitions are merged exactly by the engine
(every perflab histogram has the same bucket layout), so the spectrum of a
combination is that of every transaction in all of its runs. A histogram in an
encoding this engine does not read is skipped with the reason, instead of
failing the report.
"""

from __future__ import annotations

from collections.abc import Sequence

from perflab import _engine

# The encoding the engine writes and reads (crates/engine/src/hist.rs).
HDR_ENCODING = "hdr-v2-deflate"


class HistogramsUnavailable(Exception):
    pass


def merged_percentiles(
    blobs: Sequence[bytes], percentiles: Sequence[float], encoding: str = HDR_ENCODING
) -> tuple[list[float], int]:
    """Values at `percentiles` (0-100) of the merged histograms, in the
    histograms' unit, and the number of values recorded."""
    if encoding != HDR_ENCODING:
        raise HistogramsUnavailable(f"histograms encoded as {encoding!r}; this engine reads {HDR_ENCODING!r}")
    merged = _engine.hdr_merge(list(blobs)) if len(blobs) > 1 else blobs[0]
    values = [float(_engine.hdr_quantile_us(merged, p / 100.0)) for p in percentiles]
    return values, _engine.hdr_summary(merged).count
