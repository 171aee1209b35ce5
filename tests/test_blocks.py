"""The blocked design's analysis (issue 43, items 2 and 5): levels paired
within blocks, the paired t on log ratios across blocks, what a "no change"
could have detected; statistics checked against scipy, coverage and the A/A
call rate by simulation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from perflab.analysis import blocks, effects, stats

# ------------------------------------------------------------------ against scipy


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_paired_test_is_scipys_ttest_rel_on_logs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.lognormal(5.0, 0.05, 8)
    b = a * rng.lognormal(-0.04, 0.03, 8)
    found = blocks.paired_log_ratio(a, b)
    ref = sps.ttest_rel(np.log(b), np.log(a))
    assert found.statistic == pytest.approx(ref.statistic, rel=1e-9)
    assert found.p_value == pytest.approx(ref.pvalue, rel=1e-6)
    d = np.log(b) - np.log(a)
    half = sps.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    assert found.low == pytest.approx(d.mean() - half, rel=1e-9)
    assert found.high == pytest.approx(d.mean() + half, rel=1e-9)


@pytest.mark.parametrize("df", [1, 2, 4, 9, 29])
@pytest.mark.parametrize("lam", [0.0, 1.0, 2.8, 4.5])
def test_power_is_the_noncentral_t(df: int, lam: float) -> None:
    crit = sps.t.ppf(0.975, df)
    ref = sps.nct.sf(crit, df, lam) + sps.nct.cdf(-crit, df, lam)
    assert blocks.t_power(lam, df) == pytest.approx(ref, abs=2e-5)


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_smallest_detectable_change_has_80_percent_power(n: int) -> None:
    sd = 0.03
    se = sd / math.sqrt(n)
    delta = blocks.detectable(se, n - 1)
    crit = sps.t.ppf(0.975, n - 1)
    power = sps.nct.sf(crit, n - 1, delta / se) + sps.nct.cdf(-crit, n - 1, delta / se)
    assert power == pytest.approx(0.80, abs=1e-4)


@pytest.mark.parametrize("sd", [0.01, 0.03, 0.06])
def test_the_blocks_a_five_percent_change_needs_are_the_fewest(sd: float) -> None:
    def power(n: int) -> float:
        lam = math.log(1.05) / (sd / math.sqrt(n))
        crit = sps.t.ppf(0.975, n - 1)
        # scipy's lower tail is nan far from the noncentrality: it is 0 there
        return float(sps.nct.sf(crit, n - 1, lam) + np.nan_to_num(sps.nct.cdf(-crit, n - 1, lam)))

    n = blocks.blocks_needed(sd)
    assert n is not None and power(n) >= 0.80 and (n == 2 or power(n - 1) < 0.80)
    m = blocks.runs_needed(sd, sd)
    crit = sps.t.ppf(0.975, 2 * m - 2)
    lam = math.log(1.05) / math.sqrt(2 * sd * sd / m)
    assert sps.nct.sf(crit, 2 * m - 2, lam) + sps.nct.cdf(-crit, 2 * m - 2, lam) >= 0.80
    assert blocks.blocks_needed(0.5) is None  # beyond 100: said as "more than 100"


def test_block_variance_components() -> None:
    # no residual: all of the run-to-run variance is between blocks
    table = {k: {c: math.exp(0.1 * k + 0.05 * c) for c in (1, 2, 3)} for k in range(1, 6)}
    found = blocks.block_variance(table)
    assert found is not None and found.residual_var == pytest.approx(0.0, abs=1e-20)
    assert found.between_share == pytest.approx(1.0)
    # a large layout: the method of moments finds the components it was made with
    rng = np.random.default_rng(4)
    b, c = 400, 4
    y = rng.normal(0, 0.04, (b, 1)) + np.array([0.0, 0.1, 0.2, 0.3]) + rng.normal(0, 0.02, (b, c))
    found = blocks.block_variance({k: {j: math.exp(y[k, j]) for j in range(c)} for k in range(b)})
    assert found is not None and found.residual_df == (b - 1) * (c - 1)
    assert math.sqrt(found.block_var) == pytest.approx(0.04, rel=0.1)
    assert found.residual_sd == pytest.approx(0.02, rel=0.05)
    assert found.between_share == pytest.approx(0.8, abs=0.05)
    # an incomplete block is left out; one complete block is too few
    assert blocks.block_variance({1: {1: 1.0, 2: 2.0}, 2: {1: 1.0}}) is None


def test_blocks_are_read_from_the_stored_plan_order() -> None:
    def runs(order: list[tuple[int, int]]) -> list[dict[str, int]]:
        return [{"id": i, "combination": c, "repetition": r} for i, (c, r) in enumerate(order, start=1)]

    blocked = runs([(2, 1), (1, 1), (1, 2), (2, 2), (2, 3), (1, 3)])
    assert blocks.blocks_of(blocked) == {1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}
    assert blocks.blocks_of(runs([(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)])) is None  # sequential
    assert blocks.blocks_of(runs([(1, 1), (2, 2), (2, 1), (1, 2)])) is None  # random
    assert blocks.blocks_of(runs([(1, 1), (1, 2), (1, 3)])) is None  # one combination


def test_effect_pairs_by_block_and_falls_back_to_welch() -> None:
    rng = np.random.default_rng(7)
    drift = np.linspace(0.0, 0.3, 6)
    a = np.exp(5 + drift + rng.normal(0, 0.01, 6))
    b = np.exp(5 + drift + math.log(0.95) + rng.normal(0, 0.01, 6))
    paired = effects.effect(list(a), list(b), True, pairs=(list(a), list(b)))
    unpaired = effects.effect(list(a), list(b), True)
    assert paired.paired == 6 and blocks.METHOD in paired.method and "Abedi & Brecht" in paired.method
    assert paired.verdict == "worse" and paired.ratio.high < 1.0 and paired.ratio.low < 0.95 < paired.ratio.high
    assert unpaired.paired == 0 and unpaired.method == "Welch t on logs" and unpaired.verdict == effects.NO_DIFFERENCE
    # a "no change" says what it could have detected, and how many a 5% change needs
    assert unpaired.detectable is not None and unpaired.detectable > 0.05
    assert "could have detected" in unpaired.power_note() and "runs a side" in unpaired.power_note()
    assert "blocks" in paired.power_note()


# ------------------------------------------------------------------ by simulation

EXPERIMENTS = 1000
BLOCKS = 10
NOISE = 0.02  # a run's own spread (log scale)
DRIFT = 0.06  # a slow wave of the machine's speed over the experiment
STEP = 0.12  # and a step in the middle (another tenant arrives)


def simulate(ratio: float, rng: np.random.Generator, grouped: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """EXPERIMENTS experiments of BLOCKS blocks of two levels, log-normal runs
    on a drifting machine with a step in the middle: per experiment, the A
    and B runs aligned by block. grouped: A's runs all first, then B's (the
    plan the issue saw)."""
    n = 2 * BLOCKS
    t = np.arange(n)
    phase = rng.uniform(0, 2 * math.pi, (EXPERIMENTS, 1))
    machine = DRIFT * np.sin(2 * math.pi * t / (1.5 * n) + phase) + STEP * (t >= n // 2)
    if grouped:
        pos_a = np.broadcast_to(np.arange(BLOCKS), (EXPERIMENTS, BLOCKS))
        pos_b = pos_a + BLOCKS
    else:  # each block's two runs in a fresh random order
        first = rng.integers(0, 2, (EXPERIMENTS, BLOCKS))
        pos_a = 2 * np.arange(BLOCKS) + first
        pos_b = 2 * np.arange(BLOCKS) + 1 - first
    rows = np.arange(EXPERIMENTS)[:, None]
    log_a = 5.0 + machine[rows, pos_a] + rng.normal(0, NOISE, (EXPERIMENTS, BLOCKS))
    log_b = 5.0 + math.log(ratio) + machine[rows, pos_b] + rng.normal(0, NOISE, (EXPERIMENTS, BLOCKS))
    return np.exp(log_a), np.exp(log_b)


def coverage(a: np.ndarray, b: np.ndarray, ratio: float, paired: bool) -> tuple[float, float]:
    """The share of experiments whose 95% interval holds the true ratio, and
    the share that call a change (p < 0.05), by perflab's own tests."""
    covered = called = 0
    for xa, xb in zip(a, b, strict=True):
        if paired:
            p = blocks.paired_log_ratio(xa, xb)
            low, high, p_value = p.low, p.high, p.p_value
        else:
            w = stats.welch(np.log(xa), np.log(xb))
            low, high, p_value = w.low, w.high, w.p_value
        covered += low <= math.log(ratio) <= high
        called += p_value < stats.SIGNIFICANCE
    return covered / len(a), called / len(a)


def test_blocked_paired_analysis_keeps_its_coverage_where_unpaired_does_not(capsys) -> None:
    rng = np.random.default_rng(43)
    a, b = simulate(0.95, rng)
    paired, paired_called = coverage(a, b, 0.95, paired=True)
    unpaired, unpaired_called = coverage(a, b, 0.95, paired=False)
    ga, gb = simulate(0.95, rng, grouped=True)
    grouped, _ = coverage(ga, gb, 0.95, paired=False)
    with capsys.disabled():
        print(f"\ncoverage of the true ratio x0.95 over {EXPERIMENTS} simulated experiments of {BLOCKS} blocks: "
              f"blocked, paired t on log ratios {paired:.1%} (5% effect called in {paired_called:.1%}); "
              f"blocked, unpaired Welch on logs {unpaired:.1%} (called in {unpaired_called:.1%}); "
              f"grouped plan, unpaired Welch {grouped:.1%}")
    assert 0.93 <= paired <= 0.97
    assert unpaired > 0.97  # the drift counted as noise: intervals too wide, the effect missed
    assert grouped < 0.93  # the step read as an effect
    assert paired_called > 0.9 and unpaired_called < paired_called


def test_a_over_a_calls_a_change_in_at_most_5_percent(capsys) -> None:
    rng = np.random.default_rng(4343)
    a, b = simulate(1.0, rng)
    _, called = coverage(a, b, 1.0, paired=True)
    with capsys.disabled():
        print(f"\nA/A: a change called in {called:.1%} of {EXPERIMENTS} simulated blocked experiments")
    # the test's 5%, within the sampling error of 1,000 experiments (its binomial 95% bound)
    assert called <= 0.05 + 1.96 * math.sqrt(0.05 * 0.95 / EXPERIMENTS)


# ------------------------------------------------------------------ in the report

SPEC = """\
[experiment]
name = "blocked"
repetitions = {blocks}
order = "blocks"
seed = 7

[target]
kind = "postgres"

[workload]
kind = "sql"
statements = ["SELECT 1"]

[factors]
"target.resources.cpu_quota" = [1.0, 0.95, 0.999]
"""


def blocked_store(out: Path, n_blocks: int = 8, fail: tuple[int, ...] = (), queries: bool = False) -> Path:
    """A store of a plan in blocks on a drifting machine: cpu_quota 0.95 is 5%
    slower, 0.999 no slower (an A/A of sorts), each run's tps log-normal.
    queries: each run also times q1 (slower with the quota, as tps) and q2
    (a disk-bound query the quota does not touch), two executions each."""
    from perflab.model import QueryTime, RunResult
    from perflab.plan import PlannedRun
    from synthetic_store import quota_store

    text = SPEC.format(blocks=n_blocks)
    runs = 3 * n_blocks  # the plan's: three levels a block
    rng = np.random.default_rng(11)

    def measure(r: PlannedRun) -> RunResult:
        speed = {1.0: 1.0, 0.95: 0.95, 0.999: 1.0}[r.factors["target.resources.cpu_quota"]]
        machine = 1.0 + 0.08 * math.sin(r.number / 4.0) + (0.1 if r.number > runs // 2 else 0.0)
        result = RunResult(headline=["tps"])
        result.add_metric("tps", 30000.0 * speed * machine * rng.lognormal(0, 0.006), "tx/s", "tps", True)
        for stream in range(2 if queries else 0):
            result.queries.append(QueryTime(stream, 1, "q1", 2.0 / speed / machine * rng.lognormal(0, 0.006), "ok"))
            result.queries.append(QueryTime(stream, 2, "q2", 3.0 / machine * rng.lognormal(0, 0.006), "ok"))
        return result

    return quota_store(out, text, "blocked", measure, fail)


def test_the_report_pairs_within_blocks_and_says_what_they_removed(tmp_path: Path) -> None:
    from perflab.report import write_report

    html = write_report(blocked_store(tmp_path / "out")).read_text()
    effects_html = html[html.index('id="effects"'):html.index('id="results"')]
    assert "paired t on log ratios across blocks" in effects_html and "Kalibera &amp; Jones" in effects_html
    assert "between blocks" in effects_html
    # the 5% effect is called; the A/A says no change and what it could have detected
    assert "cpu_quota = 0.95 against 1.0: tps x0.9" in effects_html
    answer = next(line for line in effects_html.split("<li>") if line.startswith("cpu_quota = 0.999"))
    assert "no significant change" in answer and "could have detected" in answer and "blocks" in answer
    worse = next(line for line in effects_html.split("<li>") if line.startswith("cpu_quota = 0.95"))
    assert worse.split(":")[-1].strip().startswith("worse")
    assert "8 block(s)" in html  # the design, named


def test_an_incomplete_block_falls_back_to_welch(tmp_path: Path) -> None:
    from perflab.report.data import load
    from perflab.report.sections.base import ReportContext
    from perflab.report.sections.effects import effect_rows
    from perflab.store import Store

    out = blocked_store(tmp_path / "out", fail=(5,))
    store = Store.open(out)
    try:
        data = load(store)
        rows = effect_rows(ReportContext(store, data, tmp_path / "figures"))
    finally:
        store.close()
    failed = next(r for r in data.runs if r["id"] == 5)
    level = failed["factors"]["target.resources.cpu_quota"]
    methods = {r[1]: r[5].method for r in rows}
    assert level != 1.0 or all(m.startswith("Welch") for m in methods.values())
    for lv, method in methods.items():
        assert method.startswith("Welch") == (level == 1.0 or lv == level)


def test_each_query_gets_its_own_ratio_and_verdict(tmp_path: Path) -> None:
    """Issue 43, item 7: a query set's comparison is per query, paired by block:
    q1 is 5% slower under the quota, q2 (which the quota does not touch) is not."""
    import html as html_mod
    import re

    from perflab.report import write_report

    page = write_report(blocked_store(tmp_path / "out", queries=True)).read_text()
    effects_html = page[page.index('id="effects"'):page.index('id="results"')]
    assert "per query: 4 comparisons of each query&#x27;s time (1 changed)" in effects_html
    rows = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", effects_html, re.S):
        cells = [html_mod.unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        if len(cells) == 9 and cells[4] in ("q1", "q2"):
            rows[cells[1], cells[4]] = cells
    assert set(rows) == {("0.95", "q1"), ("0.95", "q2"), ("0.999", "q1"), ("0.999", "q2")}
    slower = rows["0.95", "q1"]
    assert slower[6] == "worse" and float(slower[5].split()[0]) == pytest.approx(1 / 0.95, abs=0.02)
    assert blocks.METHOD in slower[8]
    assert rows["0.95", "q2"][6].startswith("~") and "could have detected" in rows["0.95", "q2"][6]


def test_levels_of_one_set_up_are_no_effect_per_query_either(tmp_path: Path) -> None:
    import re

    from perflab.report import write_report
    from synthetic_store import build_store

    out = build_store(tmp_path / "out", clients=[2], sync=["on", "true"], repetitions=3, histograms=False,
                      sync_described={"true": "on"}, queries=2)
    page = write_report(out).read_text()
    effects_html = page[page.index('id="effects"'):page.index('id="results"')]
    rows = [r for r in re.findall(r"<tr[^>]*>(.*?)</tr>", effects_html, re.S) if ">q1<" in r or ">q2<" in r]
    assert len(rows) == 2 and all(">same set-up<" in r for r in rows)
