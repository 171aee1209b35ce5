"""The report's effects, by the plan's design: a plan in blocks pairs the
levels within each block (perflab.analysis.blocks), its noise floor is the
spread inside a block, and the report says how much of the run-to-run
variance lay between blocks (what the pairing removed)."""

from __future__ import annotations

import math

from perflab.analysis.blocks import BlockVariance, block_variance
from perflab.analysis.stats import NoiseFloor
from perflab.errors import UserError
from perflab.report.data import ReportData


def pairs(data: ReportData, a_ids: list[int], b_ids: list[int], metric: str) -> tuple[list[float], list[float]] | None:
    """The two sides' values of `metric` aligned by block, when the plan ran
    in blocks and every block that ran either side holds one run of each;
    None otherwise (the comparison is then unpaired)."""
    blocks = data.blocks()
    if blocks is None:
        return None
    sides = []
    for ids in (a_ids, b_ids):
        by_block = {blocks[r]: data.values[r][metric] for r in ids if r in blocks and metric in data.values.get(r, {})}
        if len(by_block) != len(ids):  # a run without its figure, or two in one block
            return None
        sides.append(by_block)
    if set(sides[0]) != set(sides[1]):  # a block with one side only (a failed run): incomplete
        return None
    order = sorted(sides[0])
    return [sides[0][k] for k in order], [sides[1][k] for k in order]


def variance(data: ReportData, metric: str) -> BlockVariance | None:
    """The metric's two-way layout (block x combination) over the complete blocks of done runs."""
    blocks = data.blocks()
    if blocks is None:
        return None
    table: dict[int, dict[int, float]] = {}
    for combo in data.combinations:
        for r in combo.run_ids:
            if r in blocks and metric in data.values.get(r, {}):
                table.setdefault(blocks[r], {})[combo.index] = data.values[r][metric]
    return block_variance(table)


def within_block_floor(data: ReportData, metric: str, blocks: int) -> NoiseFloor | None:
    """The noise floor of a comparison paired in `blocks` blocks: what two
    identical set-ups give as the mean of that many blocks' log ratios, from
    the spread of a run inside a block (the residual of the two-way layout):
    s_r / sqrt(blocks), so that its repeatability limit exp(2.8 s) holds the
    mean log ratio of two identical set-ups 95% of the time (ISO 5725-6's
    limit of two single runs, for the mean of `blocks` pairs). More blocks,
    a lower floor: what the blocks a 5% change needs are counted against."""
    found = variance(data, metric)
    if found is None or found.residual_df < 1 or blocks < 1:
        return None
    return NoiseFloor(found.residual_sd / math.sqrt(blocks), found.residual_df, found.combinations, math.nan)


def design_words(data: ReportData) -> str:
    """The design the runs were in, as their stored order shows it (a store
    older than blocks, or a file that says "random", ran no blocks)."""
    blocks = data.blocks()
    if blocks is None:
        order = data.spec.get("experiment", {}).get("order", "sequential") if isinstance(
            data.spec.get("experiment"), dict) else "sequential"
        return f"{order} order" if order in ("random", "sequential") else "sequential order"
    from perflab import plan, spec

    try:
        return plan.design(spec.load_text(data.experiment["spec_text"], stored=True))
    except (UserError, ValueError, TypeError):
        return f"{len(set(blocks.values()))} blocks: every combination once per block, in a fresh random order"


def blocking_note(data: ReportData, metrics: list[str]) -> str:
    """What the blocks removed, per metric: the between-block share of the
    run-to-run variance. Empty when the plan ran no blocks."""
    said = []
    for metric in metrics:
        found = variance(data, metric)
        if found is not None:
            said.append(f"{metric} {found.between_share:.0%} (within a block: {math.expm1(found.residual_sd):.1%} "
                        "a run)")
    if not said:
        return ""
    return ("The runs ran in blocks and each comparison is paired within them. Share of the run-to-run variance that "
            "lay between blocks, which pairing removes: " + "; ".join(said) + " (two-way analysis of variance of the "
            "logs over the complete blocks, the block a random effect: Montgomery, Design and Analysis of "
            "Experiments, ch. 4). A paired comparison's noise floor is that of the mean of its blocks' ratios, from the "
            "spread within a block.")
