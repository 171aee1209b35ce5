"""perflab compare: runs matched by factor values, ratio with CI, named tests."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perflab.errors import UserError
from perflab.report.compare import compare
from synthetic_store import build_store

scipy_stats = pytest.importorskip("scipy.stats")


def _rows(text: str, metric: str) -> list[str]:
    return [line for line in text.splitlines() if f" {metric} (" in line]


def _cols(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_a_faster_b_is_significant_with_welch_on_logs(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[1, 4], sync=["on"], repetitions=5, seed=1, histograms=False)
    b = build_store(tmp_path / "b", clients=[1, 4], sync=["on"], repetitions=5, seed=2, tps_scale=1.10,
                    histograms=False)
    text = compare([a, b])
    tps = _rows(text, "tps")
    assert len(tps) == 2
    da, db = load_values(a), load_values(b)
    for line, clients in zip(tps, (1, 4), strict=True):
        cols = _cols(line)
        assert cols[6] == "Welch t on logs" and cols[-1] == "B better"
        # the p-value is Welch's on the logarithms, as scipy computes it
        expected = scipy_stats.ttest_ind(np.log(db[clients]), np.log(da[clients]), equal_var=False).pvalue
        assert float(cols[7]) == pytest.approx(expected, rel=5e-3)  # printed to 3 digits
        ratio = float(cols[4].split()[0])
        assert ratio == pytest.approx(scipy_stats.gmean(db[clients]) / scipy_stats.gmean(da[clients]), abs=1e-3)
    # latency is lower-is-better: lower latency in B is also "B better"
    assert all(_cols(line)[-1] == "B better" for line in _rows(text, "latency_mean_ms"))
    # built one after the other: compare says so, and shows each side's noise
    assert "A and B did not run interleaved" in text
    assert "A's noise: 10 runs" in text and "B's noise: 10 runs" in text
    assert "tps repetitions spread" in text and "noise floor x0.9" in text
    # synthetic stores have no host-noise measurement: said, not taken for a quiet host
    assert "host noise not measured (its runs predate the measurement)" in text


def load_values(path: Path, metric: str = "tps") -> dict[int, list[float]]:
    from perflab.report.data import load
    from perflab.store import Store

    store = Store.open(path)
    try:
        data = load(store)
    finally:
        store.close()
    out: dict[int, list[float]] = {}
    for run in data.runs:
        out.setdefault(run["factors"]["workload.clients"], []).append(data.values[run["id"]][metric])
    return out


def test_a_difference_within_both_experiments_noise_is_inconclusive(tmp_path: Path) -> None:
    """Two sequential experiments that differ by 4%, each with a run-to-run
    spread of 3%: the noise floor (2.8 x the spread, ISO 5725-6) is larger
    than the difference, so no verdict, whatever the test's p-value."""
    a = build_store(tmp_path / "a", clients=[2], sync=["on"], repetitions=6, seed=21, tps_noise=0.03,
                    histograms=False)
    b = build_store(tmp_path / "b", clients=[2], sync=["on"], repetitions=6, seed=22, tps_noise=0.03,
                    tps_scale=1.04, histograms=False)
    text = compare([a, b])
    line = _rows(text, "tps")[0]
    cols = _cols(line)
    ratio, floor = float(cols[4].split()[0]), float(cols[9].split("-x")[1])
    assert 1.0 < ratio < floor  # a real difference, within the floor
    assert cols[-1].startswith("inconclusive") and "better" not in line and "worse" not in line
    assert 'order = "random"' in text and "as a factor" in text


def test_sequential_experiments_beside_host_noise_are_inconclusive(tmp_path: Path) -> None:
    """A 25% difference with quiet repetitions, but B ran after A and its host
    was flagged noisy: the difference may be the host's, so no verdict."""
    a = build_store(tmp_path / "a", clients=[2], sync=["on"], repetitions=4, seed=1, histograms=False)
    b = build_store(tmp_path / "b", clients=[2], sync=["on"], repetitions=4, seed=2, tps_scale=0.75,
                    histograms=False, flag_runs={1: ["noisy-host"], 3: ["noisy-host", "cpu-saturated"]})
    text = compare([a, b])
    line = _rows(text, "tps")[0]
    assert _cols(line)[-1] == "inconclusive (ran one after the other on a host flagged noisy)"
    assert "B's noise: 4 runs" in text and "host: 2 noisy-host, 1 cpu-saturated of 4 runs" in text
    # the same difference without the flags is a verdict
    c = build_store(tmp_path / "c", clients=[2], sync=["on"], repetitions=4, seed=2, tps_scale=0.75,
                    histograms=False)
    assert _cols(_rows(compare([a, c]), "tps")[0])[-1] == "B worse"


def test_no_difference_is_inconclusive_never_a_bare_percentage(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[2], sync=["on", "off"], repetitions=4, seed=3, histograms=False)
    b = build_store(tmp_path / "b", clients=[2], sync=["on", "off"], repetitions=4, seed=4, histograms=False)
    text = compare([a, b])
    rows = _rows(text, "tps") + _rows(text, "latency_mean_ms")
    assert len(rows) == 4 and all(_cols(line)[-1].startswith("inconclusive") for line in rows)
    assert "better" not in "".join(rows) and "worse" not in "".join(rows)


def test_fewer_than_three_runs_a_side_get_no_test_and_no_verdict(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[1], sync=["on"], repetitions=2, seed=1, histograms=False)
    b = build_store(tmp_path / "b", clients=[1], sync=["on"], repetitions=2, seed=2, tps_scale=1.5,
                    histograms=False)
    cols = _cols(_rows(compare([a, b]), "tps")[0])
    assert cols[4].count("[") == 0  # the ratio, no interval
    assert cols[6] == "none: fewer than 3 runs a side" and cols[7] == "–" and cols[-1] == "too few runs"


def test_a_zero_over_zero_ratio_is_undefined(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[1], sync=["on"], repetitions=3, seed=1, histograms=False,
                    zero_failures=True)
    b = build_store(tmp_path / "b", clients=[1], sync=["on"], repetitions=3, seed=2, histograms=False,
                    zero_failures=True)
    cols = _cols(_rows(compare([a, b]), "queries_failed")[0])
    assert cols[4] == "undefined" and cols[-1] == "undefined" and cols[7] == "–"


def test_differences_in_the_files_and_unmatched_combinations_are_said(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[1, 2], sync=["on"], repetitions=2, histograms=False)
    b = build_store(tmp_path / "b", clients=[2, 4], sync=["on"], repetitions=2, histograms=False)
    text = compare([a, b])
    assert "experiment files differ in: factors.workload.clients: [1, 2] -> [2, 4]" in text
    assert "2 combination(s) not matched: clients=1, synchronous_commit=on (only in A); " \
           "clients=4, synchronous_commit=on (only in B)" in text
    assert len(_rows(text, "tps")) == 1


def test_runs_whose_other_factors_differ_are_never_pooled(tmp_path: Path) -> None:
    """A varies synchronous_commit; B does not. Where B's file fixes it, A's
    runs at that level are matched; where it does not, nothing is pooled."""
    a = build_store(tmp_path / "a", clients=[1, 2], sync=["on", "off"], repetitions=3, seed=1, histograms=False)
    b = build_store(tmp_path / "b", clients=[1, 2], repetitions=3, seed=2, histograms=False, sync_fixed="off")
    text = compare([a, b])
    tps = _rows(text, "tps")
    assert len(tps) == 2 and "runs that differ in the other factors are never pooled" in text
    # matched against A's synchronous_commit=off runs only (B/A near 1; "on" is 40% slower in the model)
    for line in tps:
        assert 0.95 < float(_cols(line)[4].split()[0]) < 1.05
    # reversed: B (now A) fixes it, so the same matching holds
    assert len(_rows(compare([b, a]), "tps")) == 2
    # B whose file says nothing about synchronous_commit: A's two levels are not pooled, and it says so
    c = build_store(tmp_path / "c", clients=[1, 2], repetitions=3, seed=2, histograms=False, sync_fixed="off",
                    state_sync=False)
    with pytest.raises(UserError, match=r"clients=1 \(A holds 2 combinations differing in "
                                        r"target.settings.synchronous_commit: not pooled\)"):
        compare([a, c])


def test_nothing_in_common_is_a_user_error(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[1], sync=["on"], repetitions=1, histograms=False)
    b = build_store(tmp_path / "b", clients=[8], sync=["on"], repetitions=1, histograms=False)
    with pytest.raises(UserError, match="no factor combination"):
        compare([a, b])


def test_html_comparison_is_self_contained(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[1, 2], sync=["on"], repetitions=4, seed=1, histograms=False)
    b = build_store(tmp_path / "b", clients=[1, 2], sync=["on"], repetitions=4, seed=2, tps_scale=0.8,
                    histograms=False)
    out = tmp_path / "cmp" / "compare.html"
    compare([a, b], out)
    html = out.read_text()
    assert "B worse" in html and "did not run interleaved" in html and "default-src 'none'" in html
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:|//)""", html)
    assert (tmp_path / "cmp" / "compare-figures" / "compare-1.svg").is_file()
    # the caption names where the figure is, beside the page
    assert "compare-figures/compare-1.svg" in html and "figures/compare-1.svg" not in html.replace(
        "compare-figures/compare-1.svg", "")


def test_cli_compare_prints_the_table_and_bad_dirs_exit_2(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[1], sync=["on"], repetitions=2, histograms=False)
    b = build_store(tmp_path / "b", clients=[1], sync=["on"], repetitions=2, seed=9, histograms=False)
    ok = subprocess.run([sys.executable, "-m", "perflab.cli", "compare", str(a), str(b)],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "B/A [95% CI]" in ok.stdout and "too few runs" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "perflab.cli", "compare", str(a), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert "no perflab store" in bad.stderr and "Traceback" not in bad.stderr


def test_a_no_change_says_the_smallest_change_it_could_have_seen(tmp_path: Path) -> None:
    """Issue 43, item 5: an inconclusive comparison states the change it could
    have detected at 80% power from the noise it measured, and the runs a
    side a 5% change would need; the figures are scipy's noncentral t."""
    a = build_store(tmp_path / "a", clients=[2], sync=["on"], repetitions=4, seed=3, histograms=False)
    b = build_store(tmp_path / "b", clients=[2], sync=["on"], repetitions=4, seed=4, histograms=False)
    text = compare([a, b])
    (row,) = _rows(text, "tps")
    said = re.search(r"could have detected (\d+\.\d)% \(80% power\); a 5% change needs (\d+) runs a side", row)
    assert said, row
    va, vb = np.log(load_values(a)[2]), np.log(load_values(b)[2])
    se = np.sqrt(va.var(ddof=1) / 4 + vb.var(ddof=1) / 4)
    crit = scipy_stats.t.ppf(0.975, 6)
    from scipy.optimize import brentq

    # the noncentrality whose two-sided power is 80%, solved with scipy (its lower tail is nan where it is 0)
    nct = scipy_stats.nct
    lam = brentq(lambda x: nct.sf(crit, 6, x) + np.nan_to_num(nct.cdf(-crit, 6, x)) - 0.8, 0.1, 20)
    assert float(said.group(1)) == pytest.approx(100 * np.expm1(lam * se), abs=0.051)
    def power(m: int) -> float:  # m runs a side, at the two sides' measured spreads
        x = np.log(1.05) / np.sqrt((va.var(ddof=1) + vb.var(ddof=1)) / m)
        c = scipy_stats.t.ppf(0.975, 2 * m - 2)
        return float(nct.sf(c, 2 * m - 2, x) + np.nan_to_num(nct.cdf(-c, 2 * m - 2, x)))

    m = int(said.group(2))
    assert power(m) >= 0.8 and (m == 2 or power(m - 1) < 0.8)


def test_the_primary_metrics_are_their_own_false_discovery_family(tmp_path: Path) -> None:
    """Issue 43: where an experiment names its question ([experiment]
    primary), compare adjusts the p-values as the report does: over the
    primary metric's comparisons as one family and the others' as another;
    where neither names one, over all of them. The q-values are scipy's
    Benjamini-Hochberg over the Welch p-values scipy computes."""
    kw: dict = dict(clients=[1, 2, 4, 8], sync=["on"], repetitions=4, histograms=False, tps_noise=0.04,
                   latency_noise=0.04)
    a = build_store(tmp_path / "a", seed=5, primary=["latency_mean_ms"], **kw)
    b = build_store(tmp_path / "b", seed=6, tps_scale=1.04, **kw)
    plain_a = build_store(tmp_path / "plain", seed=5, **kw)

    def logs(path: Path, metric: str) -> dict[int, np.ndarray]:
        return {c: np.log(v) for c, v in load_values(path, metric).items()}

    p = {m: [scipy_stats.ttest_ind(logs(b, m)[c], logs(a, m)[c], equal_var=False).pvalue for c in (1, 2, 4, 8)]
         for m in ("tps", "latency_mean_ms")}
    text = compare([a, b])
    for metric, family in (("latency_mean_ms", "primary"), ("tps", "secondary")):
        expected = scipy_stats.false_discovery_control(p[metric], method="bh")
        rows = _rows(text, metric)
        assert len(rows) == 4
        for line, q in zip(rows, expected, strict=True):
            said = _cols(line)[8]
            assert said.endswith(f"({family})") and float(said.split()[0]) == pytest.approx(q, rel=5e-3, abs=5e-4)
    assert "A's [experiment] primary = latency_mean_ms" in text
    # neither names one: one family over all eight comparisons, as before
    text = compare([plain_a, b])
    expected = scipy_stats.false_discovery_control(p["tps"] + p["latency_mean_ms"], method="bh")
    said = [float(_cols(line)[8]) for line in _rows(text, "tps") + _rows(text, "latency_mean_ms")]
    assert said == pytest.approx(list(expected), rel=5e-3, abs=5e-4)
    assert "'s [experiment] primary =" not in text
