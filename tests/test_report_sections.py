"""The report as the composite of its sections: each one class with one
method, registered by declaration in its own module, shown in rank order."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from perflab.report import sections, write_report
from perflab.report.sections import base
from perflab.report.sections.base import ReportContext, SectionHtml, register
from synthetic_store import build_store


@pytest.fixture
def registered() -> Iterator[list[type]]:
    """The sections a test declares, taken out of the registry after it."""
    sections.ordered()  # every module's own first, as a report has them
    before = list(base.SECTIONS)
    yield base.SECTIONS
    base.SECTIONS[:] = before


def test_every_section_module_registers_and_the_ranks_order_them() -> None:
    found = sections.ordered()
    ranks = [s.rank for s in found]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    # each module under sections/ (but base) declares at least one section
    modules = {type(s).__module__.rsplit(".", 1)[-1] for s in found}
    files = {p.stem for p in Path(sections.__file__).parent.glob("*.py")} - {"__init__", "base"}
    assert modules == files


def test_a_rank_is_declared_once(registered: list[type]) -> None:
    taken = sections.ordered()[0].rank

    with pytest.raises(ValueError, match=str(taken)):
        @register(rank=taken)
        class Twice:
            def render(self, ctx: ReportContext) -> list[SectionHtml]:
                return []

    assert all(cls.__name__ != "Twice" for cls in registered)


def test_a_declared_section_joins_the_report_at_its_rank(tmp_path: Path, registered: list[type]) -> None:
    ranks = {type(s).__name__: s.rank for s in sections.ordered()}
    between = (ranks["Experiment"] + ranks["Plan"]) // 2
    assert ranks["Experiment"] < between < ranks["Plan"]

    @register(rank=between)
    class Runs:
        def render(self, ctx: ReportContext) -> list[SectionHtml]:
            return [("runs-counted", "Runs counted", f"<p>{len(ctx.data.runs)} runs</p>")]

    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=2, histograms=False)
    html = write_report(out).read_text()
    order = re.findall(r'<section id="([^"]+)">', html)
    assert order[-3:] == ["experiment", "runs-counted", "plan"]
    assert "<p>2 runs</p>" in html
    assert '<a href="#runs-counted">' in html  # in the navigation, as every section is
