"""The plan: factor product x repetitions, in a recorded, reproducible order."""

from __future__ import annotations

from pathlib import Path

from perflab import plan, spec

FILE = """
[experiment]
name = "p"
repetitions = 3
order = "{order}"
{seed}
[target]
kind = "postgres"
[workload]
kind = "sql"
statements = ["SELECT 1"]
[factors]
"workload.iterations" = [1, 2, 4]
"target.settings.synchronous_commit" = ["on", "off"]
"""


def load(order: str, seed: str = "") -> spec.Experiment:
    return spec.load_text(FILE.format(order=order, seed=seed), Path("p.toml"))


def test_sequential_is_the_product_times_repetitions() -> None:
    exp = load("sequential")
    runs = plan.expand(exp, seed=0)
    assert len(runs) == 3 * 2 * 3
    assert [r.number for r in runs] == list(range(1, 19))
    # repetitions of one combination are back to back, combinations in file order
    assert [(r.combination, r.repetition) for r in runs[:4]] == [(1, 1), (1, 2), (1, 3), (2, 1)]
    assert runs[0].factors == {"workload.iterations": 1, "target.settings.synchronous_commit": "on"}
    assert runs[3].factors == {"workload.iterations": 1, "target.settings.synchronous_commit": "off"}
    assert len({tuple(sorted(r.factors.items())) for r in runs}) == 6


def test_random_order_is_a_seeded_permutation() -> None:
    exp = load("random", "seed = 42")
    a = plan.expand(exp, plan.choose_seed(exp))
    b = plan.expand(exp, 42)
    c = plan.expand(exp, 43)
    key = [(r.combination, r.repetition) for r in a]
    assert key == [(r.combination, r.repetition) for r in b]
    assert key != [(r.combination, r.repetition) for r in c]
    assert sorted(key) == sorted((r.combination, r.repetition) for r in plan.expand(load("sequential"), 0))
    assert key != sorted(key)


def test_random_without_seed_picks_one_to_record() -> None:
    exp = load("random")
    seeds = {plan.choose_seed(exp) for _ in range(5)}
    assert len(seeds) > 1


def test_plan_command_prints_every_run(run_cli, tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text(FILE.format(order="random", seed="seed = 7"))
    out = run_cli("plan", f).stdout
    assert "18 runs, order random, seed 7" in out
    assert len([line for line in out.splitlines() if line.strip()[:1].isdigit()]) == 18
    assert run_cli("check", f).stdout.strip() == "ok: p: 18 runs (6 combinations x 3 repetitions)"
