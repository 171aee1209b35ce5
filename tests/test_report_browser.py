"""The report in a real headless browser (Debian's chromium): it loads with no
console errors and no request leaving the file; its first screen is kept as
test-artifacts/report-first-screen.png."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chromium import Chromium, find_chromium
from perflab.report import write_report
from synthetic_store import build_store

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

pytestmark = pytest.mark.slow

CHROMIUM = find_chromium()
if CHROMIUM is None:  # the test command installs it (.ci/apt-packages); say so when it could not
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    with Chromium(CHROMIUM) as c:
        yield c


def test_report_loads_clean_and_stays_inside_the_file(tmp_path: Path, browser: Chromium) -> None:
    out = build_store(tmp_path / "out", repetitions=3, fail_runs=(4,), client_bound_from=8)
    report = write_report(out)
    page = browser.load(report.as_uri())
    assert page.problems == []
    assert page.external_requests() == []
    assert page.requests == [report.as_uri()]  # the file itself and nothing else
    # the inline script ran: it read the embedded data
    assert browser.evaluate("document.documentElement.getAttribute('data-runs')") == "24"
    assert browser.evaluate("document.querySelectorAll('figure svg').length") >= 5
    # the first screen answers the question: the summary, one row per combination (4 clients x 2 sync)
    assert browser.evaluate("document.querySelector('section').id") == "summary"
    assert browser.evaluate("document.querySelectorAll('#summary tbody tr').length") == 8
    shot = browser.screenshot(ARTIFACTS / "report-first-screen.png")
    assert shot.stat().st_size > 10_000
    # sorting a column by clicking its header works, and raises nothing
    browser.evaluate("document.querySelector('#results th:nth-child(5)').click()")
    assert browser.evaluate("document.querySelector('#results th.sorted-asc') !== null") is True
    thrown = [e for e in browser.events if e.get("method") == "Runtime.exceptionThrown"]
    assert thrown == []


def test_the_check_sees_a_page_that_reaches_out(tmp_path: Path, browser: Chromium) -> None:
    """The same check on a page that fetches and fails: it must not pass."""
    page_path = tmp_path / "bad.html"
    page_path.write_text('<html><body><img src="http://127.0.0.1:9/x.png">'
                         "<script>console.error('boom'); undefinedFunction();</script></body></html>")
    page = browser.load(page_path.as_uri())
    assert "http://127.0.0.1:9/x.png" in page.external_requests()
    assert any("boom" in e for e in page.console_errors)
    assert any("undefinedFunction" in e for e in page.exceptions)


def test_the_results_and_effects_tables_fit_a_1400_px_window(tmp_path: Path) -> None:
    """Noisy runs flag every CV cell and fill the warnings column: the tables
    must still fit the page, wrapping inside their box (issue 18)."""
    import sqlite3

    out = build_store(tmp_path / "out", clients=[1, 2, 4, 8], sync=["", "off"], repetitions=3, fail_runs=(4,),
                      client_bound_from=8, histograms=False)
    db = sqlite3.connect(out / "perflab.sqlite")
    with db:
        db.execute("UPDATE metric SET value = value * (1 + (run_id % 3) * 0.3) "
                   "WHERE name IN ('tps', 'latency_mean_ms')")
    db.close()
    report = write_report(out)
    with Chromium(CHROMIUM, width=1400, height=1000) as wide:
        assert wide.load(report.as_uri()).problems == []
        wide.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")  # the folded ones too
        overflow = wide.evaluate(
            "Array.from(document.querySelectorAll('#summary .scroll, #results .scroll, #effects .scroll'))"
            ".map(b => b.querySelector('table').scrollWidth - b.clientWidth)"
        )
        # the summary's table, results, its noise floor, effects
        assert len(overflow) == 4 and max(overflow) <= 0, overflow
        assert wide.evaluate("document.documentElement.scrollWidth <= window.innerWidth") is True
        wide.screenshot(ARTIFACTS / "report-1400px.png")
