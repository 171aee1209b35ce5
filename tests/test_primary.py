"""[experiment] primary: the metrics an experiment asks about. Their
comparisons are one false discovery rate family, the others another; the
answers and the precision rule are about them; check refuses a name the
runs will not store."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from perflab import plan, spec
from perflab.errors import SpecError

SPEC = """\
[experiment]
name = "primary"
repetitions = {blocks}
order = "blocks"
seed = 7
{primary}
[target]
kind = "postgres"

[workload]
kind = "tpcb"
script = "select-only"

[factors]
"target.resources.cpu_quota" = [1.0, 0.95, 0.999]
"""


def _store(out: Path, primary: str, n_blocks: int = 10) -> Path:
    """A store in blocks: tps 5% lower at quota 0.95 and unchanged at 0.999
    (its 2% block noise); latency_p99_ms, the workload's other headline
    metric, with no effect and a noise of 40% (throttling's spikes)."""
    from perflab.model import RunResult
    from perflab.plan import PlannedRun
    from synthetic_store import quota_store

    rng = np.random.default_rng(43)

    def measure(r: PlannedRun) -> RunResult:
        speed = {1.0: 1.0, 0.95: 0.95, 0.999: 1.0}[r.factors["target.resources.cpu_quota"]]
        machine = 1.0 + 0.05 * math.sin(r.repetition)
        result = RunResult(headline=["tps", "latency_p99_ms"])
        result.add_metric("tps", 1e5 * speed * machine * rng.lognormal(0, 0.02), "tx/s", "tps", True)
        result.add_metric("latency_p99_ms", 0.5 * rng.lognormal(0, 0.4), "ms", "p99", False)
        return result

    return quota_store(out, SPEC.format(blocks=n_blocks, primary=primary), "primary", measure)


def _rows(out: Path, tmp_path: Path) -> list[tuple]:
    from perflab.report.data import load
    from perflab.report.sections.base import ReportContext
    from perflab.report.sections.effects import effect_rows
    from perflab.store import Store

    store = Store.open(out)
    try:
        return effect_rows(ReportContext(store, load(store), tmp_path / "figures"))
    finally:
        store.close()


def test_the_primary_metrics_are_their_own_family(tmp_path: Path) -> None:
    """With primary = ["tps"], the tps comparisons' q-values are
    Benjamini-Hochberg over their own p-values alone (scipy's), and the
    latency's over theirs; without it, one family over all four."""
    asked = _rows(_store(tmp_path / "asked", 'primary = ["tps"]'), tmp_path)
    plain = _rows(_store(tmp_path / "plain", ""), tmp_path)
    for rows, families in ((asked, [["tps"], ["latency_p99_ms"]]), (plain, [["tps", "latency_p99_ms"]])):
        for names in families:
            found = [r[5] for r in rows if r[4] in names]
            assert len(found) == 2 * len(names)
            expected = stats.false_discovery_control([e.p_value for e in found], method="bh")
            assert [e.q_value for e in found] == pytest.approx(list(expected))
    # the same runs, the same p-values: only the family differs
    assert [r[5].p_value for r in asked] == pytest.approx([r[5].p_value for r in plain])
    tps_q = {r[1]: r[5].q_value for r in asked if r[4] == "tps"}
    assert tps_q[0.95] <= min(r[5].q_value for r in plain if r[4] == "tps" and r[1] == 0.95)


def test_the_report_answers_for_the_primary_metrics_and_names_the_families(tmp_path: Path) -> None:
    import html as html_mod
    import re

    from perflab.report import write_report

    page = write_report(_store(tmp_path / "out", 'primary = ["latency_p99_ms"]')).read_text()
    effects = page[page.index('id="effects"'):page.index('id="results"')]
    answers = [html_mod.unescape(a) for a in effects.split("<li>")[1:] if a.startswith("cpu_quota = ")]
    assert len(answers) == 2 and all(": latency_p99_ms x" in a for a in answers)  # the question asked, not tps
    text = html_mod.unescape(re.sub("<[^>]+>", " ", effects))
    assert "[experiment] primary = latency_p99_ms" in text
    assert ", primary)" in text and ", secondary)" in text


@pytest.mark.parametrize(("primary", "fragment"), [
    ('primary = ["tpmC"]', "experiment.primary[0]"),  # not a metric this workload stores
    ('primary = ["tps", "tps"]', "experiment.primary[1]"),
    ('primary = "tps"', "experiment.primary"),  # a list
    ('primary = ["energy.joules"]', "experiment.primary[0]"),  # energy is not on
])
def test_a_primary_the_runs_will_not_store_is_refused(tmp_path: Path, primary: str, fragment: str) -> None:
    path = tmp_path / "e.toml"
    path.write_text(SPEC.format(blocks=3, primary=primary))
    with pytest.raises(SpecError) as err:
        spec.load(path)
    assert fragment in str(err.value)


def test_a_headline_or_a_collectors_metric_may_be_primary(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text(SPEC.format(blocks=3, primary='primary = ["latency_p99_ms", "tps"]'))
    assert spec.load(path).meta.primary == ["latency_p99_ms", "tps"]
    path.write_text(SPEC.format(blocks=3, primary='primary = ["vmstat.us_pct"]') + '\n[collect]\nvmstat = {}\n')
    assert spec.load(path).meta.primary == ["vmstat.us_pct"]


def test_precision_aims_at_the_primary_comparisons(tmp_path: Path) -> None:
    """Stein's rule after the pilot sizes the blocks for the primary metric's
    comparisons: a wildly noisy secondary metric does not drive them."""
    from test_precision import _pilot_store

    text = SPEC.format(blocks=3, primary='precision = "3%"\nbudget = "2h"\nprimary = ["tps"]')
    decided = {}
    for name, t in (("primary", text), ("all", text.replace('primary = ["tps"]', ""))):
        e = spec.load_text(t, tmp_path / "e.toml")
        store = _pilot_store(tmp_path, e, 0.0, noise={"tps": 0.01, "latency_p99_ms": 0.5}, out=name)
        found = plan.precision_blocks(e, store)
        store.close()
        assert found is not None
        decided[name] = found
    assert "tps" in decided["primary"][1] and "latency_p99_ms" not in decided["primary"][1]
    assert "latency_p99_ms" in decided["all"][1]
    assert decided["primary"][0] < decided["all"][0]
