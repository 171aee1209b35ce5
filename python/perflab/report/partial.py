"""What an earlier attempt of a run measured before it stopped (killed,
interrupted, failed and run again): its partial figures, kept by the runner
in its files (runs/NNN/attempt-K/series.csv and queries.csv) when the run
was run again. Read for the report's history and `perflab serve`."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Partial:
    samples: int  # per-second series rows
    measured_s: float | None  # the last sample's time on the run's clock: how far the attempt got
    queries: int  # query records

    def describe(self) -> str:
        if not self.samples and not self.queries:
            return "nothing measured"
        parts = []
        if self.samples:
            span = f" over {self.measured_s:,.0f} s" if self.measured_s is not None else ""
            parts.append(f"{self.samples:,} samples{span}")
        if self.queries:
            parts.append(f"{self.queries:,} queries")
        return "partial: " + ", ".join(parts)


def attempt_partial(out_dir: Path, attempt: dict[str, Any]) -> Partial | None:
    """The partial figures an attempt's kept files hold, or None when it kept none."""
    files = attempt.get("files")
    if not files:
        return None
    where = (Path(out_dir) / files).resolve()
    if not where.is_relative_to(Path(out_dir).resolve()) or not where.is_dir():
        return None
    samples, last = 0, -math.inf
    series = where / "series.csv"
    if series.is_file():
        with series.open(newline="") as f:
            for row in csv.DictReader(f):
                samples += 1
                try:
                    last = max(last, float(row.get("t") or "nan"))
                except ValueError:
                    pass
    queries = 0
    kept = where / "queries.csv"
    if kept.is_file():
        with kept.open(newline="") as f:
            queries = sum(1 for _ in csv.DictReader(f))
    return Partial(samples, last if math.isfinite(last) else None, queries)


def lost_seconds(attempts: list[dict[str, Any]]) -> float:
    """Measured time lost to attempts that did not finish: their seconds, summed."""
    return sum(a["seconds"] or 0.0 for a in attempts if a["status"] in ("killed", "interrupted"))
