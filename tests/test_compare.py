"""perflab compare: runs matched by factor values, ratio with CI, named tests."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from perflab.errors import UserError
from perflab.report.compare import compare
from synthetic_store import build_store


def _rows(text: str, metric: str) -> list[str]:
    return [line for line in text.splitlines() if f" {metric} (" in line]


def test_a_faster_b_is_significant_with_mann_whitney(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[1, 4], sync=["on"], repetitions=5, seed=1, histograms=False)
    b = build_store(tmp_path / "b", clients=[1, 4], sync=["on"], repetitions=5, seed=2, tps_scale=1.10,
                    histograms=False)
    text = compare([a, b])
    tps = _rows(text, "tps")
    assert len(tps) == 2
    for line in tps:
        # 5 runs each, fully separated: exact two-sided p = 2 / C(10, 5) = 0.00794
        assert "Mann-Whitney U, exact" in line and "0.00794" in line and line.rstrip().endswith("B better")
        ratio = float(re.search(r"\s(1\.\d{3}) \[", line).group(1))
        assert 1.05 < ratio < 1.15
    # latency is lower-is-better: lower latency in B is also "B better"
    assert all(line.rstrip().endswith("B better") for line in _rows(text, "latency_mean_ms"))


def test_no_difference_is_shown_as_tilde(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[2], sync=["on", "off"], repetitions=4, seed=3, histograms=False)
    b = build_store(tmp_path / "b", clients=[2], sync=["on", "off"], repetitions=4, seed=3, histograms=False)
    text = compare([a, b])
    rows = _rows(text, "tps") + _rows(text, "latency_mean_ms")
    assert len(rows) == 4 and all(line.rstrip().endswith("~") for line in rows)
    assert "%" not in "".join(rows)  # never a bare percentage


def test_small_samples_name_the_bootstrap_and_single_runs_are_not_tested(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[1], sync=["on"], repetitions=3, seed=1, histograms=False)
    b = build_store(tmp_path / "b", clients=[1], sync=["on"], repetitions=3, seed=2, tps_scale=1.5,
                    histograms=False)
    assert "bootstrap 95% CI of the ratio excludes 1" in _rows(compare([a, b]), "tps")[0]
    c = build_store(tmp_path / "c", clients=[1], sync=["on"], repetitions=1, seed=4, histograms=False)
    line = _rows(compare([a, c]), "tps")[0]
    assert "none (n=1)" in line and line.rstrip().endswith("n=1")


def test_a_tilde_row_never_says_its_ci_excludes_1_and_the_legend_explains_the_dash(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[1], sync=["on"], repetitions=3, seed=5, histograms=False)
    b = build_store(tmp_path / "b", clients=[1], sync=["on"], repetitions=3, seed=5, histograms=False)
    text = compare([a, b])
    line = _rows(text, "tps")[0]
    assert line.rstrip().endswith("~")
    assert "bootstrap 95% CI of the ratio includes 1" in line and "excludes" not in line
    # p is a dash for the bootstrap rows, and the legend says why rather than speak of p alone
    assert " – " in line
    assert "a percentile interval gives no p-value: p is shown as –" in text


def test_differences_in_the_files_and_unmatched_combinations_are_said(tmp_path: Path) -> None:
    a = build_store(tmp_path / "a", clients=[1, 2], sync=["on"], repetitions=2, histograms=False)
    b = build_store(tmp_path / "b", clients=[2, 4], sync=["on"], repetitions=2, histograms=False)
    text = compare([a, b])
    assert "experiment files differ in: factors.workload.clients: [1, 2] -> [2, 4]" in text
    assert "2 combination(s) ran in only one of the two" in text
    assert len(_rows(text, "tps")) == 1


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
    assert "B worse" in html and "default-src 'none'" in html
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
    assert "B/A [95% CI]" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "perflab.cli", "compare", str(a), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert "no perflab store" in bad.stderr and "Traceback" not in bad.stderr
