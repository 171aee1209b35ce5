"""A durability study's report (issue 48, item 5): the run-by-run degradation
table is the first table, OSDL's memory, I/O and CPU panels are drawn for
every run on one axis, and a run of two hours or more shows its hours."""

from __future__ import annotations

import re
from pathlib import Path

from perflab.report import write_report
from synthetic_store import build_store


def _first_section(html: str) -> tuple[str, str]:
    found = re.search(r'<section id="([^"]+)"><h2>[^<]*</h2>(.*?)</section>', html, re.S)
    assert found is not None
    return found.group(1), found.group(2)


def test_the_degradation_table_opens_a_durability_study_with_osdls_panels(tmp_path: Path) -> None:
    # one set-up (one client count, one synchronous_commit), five runs back to back, 3% slower each
    out = build_store(tmp_path / "out", clients=[4], sync=["on"], repetitions=5, degrade_pct_per_run=3.0,
                      tps_noise=0.002, osdl_series=True, histograms=False)
    html = write_report(out).read_text()
    anchor, body = _first_section(html)
    assert anchor == "durability"
    # the first table of the page is the run-by-run one: every run, tps, its change from run 1
    first_table = html.index("<table")
    assert html.index('<section id="durability">') < first_table < html.index('<section id="summary">')
    table = body[body.index("<table"):body.index("</table>")]
    assert "change from run 1" in table and "tps (tx/s)" in table
    assert all(f"#{n}" in table for n in range(1, 6))
    assert "+0.00%" in table  # run 1 against itself
    assert "degrad" in body.lower()  # the trend verdict: 3% a run over five runs is a real trend
    # OSDL's panels, one figure for all the runs, with each of its series named
    assert 'id="fig-durability-osdl-panels"' in html
    svg = (out / "figures" / "durability-osdl-panels.svg").read_text()
    for label in ("free", "buff", "cache", "bi (in)", "bo (out)", "us", "sy", "id", "wa"):
        assert f">{label}<" in svg
    for n in range(1, 6):  # each run marked where it starts
        assert f">#{n}<" in svg


def test_a_varied_experiment_has_no_durability_section(tmp_path: Path) -> None:
    out = build_store(tmp_path / "out", clients=[1, 4], sync=["on"], repetitions=5, histograms=False,
                      osdl_series=True)
    html = write_report(out).read_text()
    assert _first_section(html)[0] == "summary"
    assert 'id="fig-durability-osdl-panels"' not in html


def test_a_run_of_two_hours_or_more_shows_its_hours(tmp_path: Path) -> None:
    # three-hour runs, a sample a minute: three whole hours each
    out = build_store(tmp_path / "out", clients=[4], sync=["on"], repetitions=5, histograms=False,
                      run_seconds=3 * 3600.0, series_points=180)
    html = write_report(out).read_text()
    _, body = _first_section(html)
    assert "Within each run, hour by hour" in body
    hours = body[body.index("Within each run"):]
    assert all(f"#{n}" in hours for n in range(1, 6))
    assert "sql.tps" in hours


def test_sqlite_aggregates_give_the_numbers_of_every_sample(tmp_path: Path) -> None:
    """The report aggregates a long series in SQLite; its envelopes and hourly
    windows are those serve.views.decimate and within_run give from every sample."""
    import numpy as np

    from perflab.analysis.degradation import within_run
    from perflab.report.durability import bucket_stats, envelope
    from perflab.serve.views import decimate
    from perflab.store import Store

    out = build_store(tmp_path / "out", clients=[4], sync=["on"], repetitions=1, histograms=False,
                      run_seconds=4.5 * 3600.0, series_points=1000)
    store = Store.open(out)
    try:
        # a missing value and a one-sample spike among them
        store.conn.execute("UPDATE series SET value=NULL WHERE run_id=1 AND name='tps' AND t=(SELECT t FROM "
                           "series WHERE run_id=1 AND name='tps' ORDER BY t LIMIT 1 OFFSET 10)")
        store.conn.execute("UPDATE series SET value=value*9 WHERE run_id=1 AND name='tps' AND t=(SELECT t FROM "
                           "series WHERE run_id=1 AND name='tps' ORDER BY t LIMIT 1 OFFSET 500)")
        rows = np.asarray([(p["t"], np.nan if p["value"] is None else p["value"])
                           for p in store.series(1) if p["name"] == "tps"], dtype=float)
        want = np.asarray(decimate(rows, 70), dtype=float)
        got = envelope(store, 1, "sql", "tps", 70)
        assert np.allclose(got, want, equal_nan=True)
        assert got[:, 2].max() == np.nanmax(rows[:, 1])  # the spike kept
        cut = rows[rows[:, 0] >= rows[300, 0]]  # from the end of a warm-up
        assert np.allclose(envelope(store, 1, "sql", "tps", 70, t_from=rows[300, 0]),
                           np.asarray(decimate(cut, 70), dtype=float), equal_nan=True)
        whole = within_run(rows[:, 0], rows[:, 1], True)
        hours = bucket_stats(store, 1, "sql", "tps", width_s=3600.0)
        assert len(hours) == len(whole.means) == 4  # the last half hour is no hour
        assert np.allclose(hours[:, 3] / hours[:, 4], whole.means)
    finally:
        store.close()
