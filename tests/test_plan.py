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
    assert run_cli("check", f).stdout.splitlines()[0] == "ok: p: 18 runs (6 combinations x 3 repetitions)"


def test_blocks_are_the_default_each_repetition_every_combination_once() -> None:
    exp = spec.load_text(FILE.replace('order = "{order}"\n', "").format(seed="seed = 3"), Path("p.toml"))
    assert exp.meta.order == "blocks"
    runs = plan.expand(exp, 3)
    assert [r.repetition for r in runs] == [rep for rep in (1, 2, 3) for _ in range(6)]
    for rep in (1, 2, 3):
        assert sorted(r.combination for r in runs if r.repetition == rep) == [1, 2, 3, 4, 5, 6]
    # a fresh order per block, reproducible by the seed
    orders = [[r.combination for r in runs if r.repetition == rep] for rep in (1, 2, 3)]
    assert len({tuple(o) for o in orders}) > 1
    assert [r.combination for r in plan.expand(exp, 3)] == [r.combination for r in runs]
    assert [r.combination for r in plan.expand(exp, 4)] != [r.combination for r in runs]
    assert "block" in plan.design(exp) and "fresh random order" in plan.design(exp)
    # nothing compared (one repetition): the product's order, as before
    once = spec.load_text(FILE.replace('order = "{order}"\n', "").replace("repetitions = 3", "repetitions = 1")
                          .format(seed=""), Path("p.toml"))
    assert once.meta.order == "sequential"


def test_a_six_run_plan_of_two_levels_never_runs_grouped() -> None:
    """The issue's plan that ran 18, 18, 18, 15, 15, 15 under "random": in
    blocks, no seed gives three runs of one level in a row."""
    def two_levels(order: str) -> spec.Experiment:
        text = FILE.format(order=order, seed="").replace('"workload.iterations" = [1, 2, 4]\n', "")
        return spec.load_text(text, Path("v.toml"))

    exp, random_exp = two_levels("blocks"), two_levels("random")
    assert len(plan.expand(exp, 0)) == 6

    def longest_run(levels: list[str]) -> int:
        best = cur = 1
        for x, y in zip(levels, levels[1:], strict=False):
            cur = cur + 1 if x == y else 1
            best = max(best, cur)
        return best

    blocked = [longest_run([r.factors["target.settings.synchronous_commit"] for r in plan.expand(exp, s)])
               for s in range(500)]
    shuffled = [longest_run([r.factors["target.settings.synchronous_commit"] for r in plan.expand(random_exp, s)])
                for s in range(500)]
    assert max(blocked) == 2
    assert max(shuffled) == 3  # the whole-plan shuffle does run them grouped, for some seeds


def test_blocks_keep_a_server_start_together_when_restarts_dominate() -> None:
    """Short runs and settings that restart the server: the combinations
    that share a start stay adjacent inside each block, and the design says
    so; with long runs they are shuffled freely."""
    text = """
[experiment]
name = "g"
repetitions = 4
[target]
kind = "postgres"
[workload]
kind = "tpcb"
duration = "{duration}"
[factors]
"target.settings.synchronous_commit" = ["on", "off"]
"workload.clients" = [1, 2, 4]
"""
    short = spec.load_text(text.format(duration="2s"), Path("g.toml"))
    long = spec.load_text(text.format(duration="10min"), Path("g.toml"))
    assert plan.restarts_dominate(short)[0] and not plan.restarts_dominate(long)[0]
    assert "share a server start kept adjacent" in plan.design(short)
    assert "share a server start" not in plan.design(long)

    def starts(exp: spec.Experiment, seed: int) -> list[int]:
        """Per block, how often the server's settings change between neighbours."""
        runs = plan.expand(exp, seed)
        out = []
        for rep in range(1, 5):
            levels = [r.factors["target.settings.synchronous_commit"] for r in runs if r.repetition == rep]
            assert len(levels) == 6
            out.append(sum(1 for x, y in zip(levels, levels[1:], strict=False) if x != y))
        return out

    assert all(n == 1 for s in range(50) for n in starts(short, s))
    assert max(n for s in range(50) for n in starts(long, s)) > 1


def test_plan_command_shows_the_blocks(run_cli, tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text(FILE.format(order="blocks", seed="seed = 7"))
    out = run_cli("plan", f).stdout
    assert "18 runs, order blocks, seed 7" in out
    assert "# design: 3 block(s)" in out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("run"))
    assert header.split()[-1] == "block"


def test_a_store_planned_before_blocks_were_the_default_resumes(tmp_path: Path) -> None:
    """A file that names no order, stored by a perflab whose default was
    "sequential": resume finds its plan in sequence, not a mismatch."""
    from perflab import runner
    from perflab.host import host_facts
    from perflab.model import RunResult
    from perflab.store import Store

    text = FILE.replace('order = "{order}"\n', "").format(seed="seed = 3")
    f = tmp_path / "p.toml"
    f.write_text(text)
    exp = spec.load_text(text, f)
    assert exp.meta.order == "blocks" and plan.before_blocks(exp, 3) is not None
    old = plan.expand(spec.load_text(text.replace("seed = 3", 'seed = 3\norder = "sequential"'), f), 3)
    out = tmp_path / "out"
    store = Store.create(out, name="p", spec_text=text, spec_path=str(f), seed=3, factors=list(exp.factors),
                         host=host_facts())
    store.add_plan(old)
    store.start_run(1, 0)
    store.finish_run(1, RunResult(), status="done", seconds=1.0, target=None)
    store.close()
    session = runner.resume(out)
    try:
        assert [(r.combination, r.repetition) for r in session.plan] == [(r.combination, r.repetition) for r in old]
    finally:
        session.store.close()
    # a file that names its order gets no such reading
    assert plan.before_blocks(spec.load_text(FILE.format(order="blocks", seed=""), f), 3) is None
