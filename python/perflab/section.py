"""What a workload or a collector adds to the report: sections made of a few
kinds of block.

A workload's or a collector's `report_sections(...)` returns `Section`s; the
report renders them (figures saved under figures/ and inlined), so they never
write HTML files or know where the report lives, and the report never
branches on their names. This module sits below workloads, collectors and
the report: plain data, no imports from perflab.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import matplotlib.figure


@dataclass
class Text:
    """A paragraph of plain text (escaped when rendered)."""

    text: str


@dataclass
class Table:
    """A table of plain values; numbers are formatted by the report."""

    headers: list[str]
    rows: list[list[Any]]
    caption: str = ""


@dataclass
class Figure:
    """A matplotlib Figure; `name` becomes figures/<name>.svg and .png (letters,
    digits, '-' and '_'). The report closes the figure after saving it."""

    name: str
    figure: matplotlib.figure.Figure
    caption: str = ""


Block = Text | Table | Figure


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    # The workload's (or collector's) headline: the study's own table, shown
    # in the report's summary.
    headline: bool = False


@dataclass
class RunGroup:
    """Runs that share every factor but the repetition (a combination of the
    factors), as the report hands them to a collector's `report_sections`:
    each run is its store row (Store.runs()) plus "metrics": {name: value}."""

    index: int  # the combination's number in the report
    label: str
    runs: list[dict[str, Any]]
    # The report's reader of a run's stored series, (run id, source) -> rows
    # with "name", "t" and "value" (Store.series), for a collector that draws
    # per-event series (syscalls' successive fsync calls); None: not given.
    read_series: Callable[[int, str], list[dict[str, Any]]] | None = None
    # The report's reader of a run's stored queries (Store.queries: stream,
    # seq, query, seconds, started_s, energy_j, ...); None: not given.
    read_queries: Callable[[int], list[dict[str, Any]]] | None = None
    # The report's reader of one series in buckets of time, (run id, source,
    # name, buckets) -> rows of (t, min, max, mean) aggregated by SQLite, for a
    # figure of a long run that need not read every sample; None: not given.
    read_envelope: Callable[[int, str, str, int], Any] | None = None
