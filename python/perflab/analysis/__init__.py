"""Statistics over stored results: pure functions, no I/O.

stats: intervals by sample size (geometric mean from 3 runs), CV, outliers, Welch,
exact permutation and Mann-Whitney tests, Benjamini-Hochberg, the noise floor.
degradation: change from the first run, trend and change points (durability).
effects: B against a baseline A: ratio, CI, test chosen by n, verdict (settle: FDR, noise floor).
scaling: a metric against a numeric factor, one curve per other-factor values.
"""
