"""NURand's constants C (TPC-C clause 2.1.6).

NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x,
with A = 255 for C_LAST, 1023 for C_ID and 8191 for OL_I_ID, and one C per A.
The load draws the customers' last names with C_LAST's load constant; a run
draws its own C_LAST constant, which clause 2.1.6.1 ties to the load's:
delta = |C_run - C_load| must lie in 65..119 and be neither 96 nor 112 (so
that the run's last names are neither the load's nor too far from them).
The run's C_ID and OL_I_ID constants are free: any value in their range.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

C_LAST_MAX = 255
C_ID_MAX = 1023
OL_I_ID_MAX = 8191
DELTA_MIN = 65
DELTA_MAX = 119
DELTA_EXCLUDED = (96, 112)


def delta_ok(c_run: int, c_load: int) -> bool:
    """Clause 2.1.6.1's rule for the run's C_LAST constant."""
    delta = abs(c_run - c_load)
    return DELTA_MIN <= delta <= DELTA_MAX and delta not in DELTA_EXCLUDED


def load_c_last(seed: int) -> int:
    return random.Random(f"tpcc-load-c-last-{seed}").randint(0, C_LAST_MAX)


@dataclass(frozen=True)
class RunConstants:
    c_last: int
    c_id: int
    ol_i_id: int

    def describe(self, c_load: int) -> str:
        return (f"C_LAST {self.c_last} (load {c_load}, delta {abs(self.c_last - c_load)}), "
                f"C_ID {self.c_id}, OL_I_ID {self.ol_i_id}")


def run_constants(c_load: int, seed: int) -> RunConstants:
    """The run's constants from its seed: C_LAST uniform over every value the
    delta rule allows for `c_load`, C_ID and OL_I_ID uniform over their range."""
    if not 0 <= c_load <= C_LAST_MAX:
        raise ValueError(f"C_LAST load constant {c_load} is outside 0..{C_LAST_MAX}")
    rng = random.Random(f"tpcc-run-constants-{seed}")
    allowed = [c for c in range(C_LAST_MAX + 1) if delta_ok(c, c_load)]
    return RunConstants(rng.choice(allowed), rng.randint(0, C_ID_MAX), rng.randint(0, OL_I_ID_MAX))
