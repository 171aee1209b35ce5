"""What a workload adds to the report: sections made of a few kinds of block.

A workload's `report_sections(store, runs)` returns `Section`s; the report
renders them (figures saved under figures/ and inlined), so workloads never
write HTML files or know where the report lives, and the report never
branches on a workload's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
    figure: Any
    caption: str = ""


Block = Text | Table | Figure


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
