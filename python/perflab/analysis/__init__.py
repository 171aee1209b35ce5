"""Statistics over stored results: pure functions, no I/O.

stats: means with confidence intervals, CV, outliers, Mann-Whitney U, ratio CIs.
degradation: change from the first run, trend and change points (durability).
effects: B against a baseline A: ratio, CI, named test, verdict.
scaling: a metric against a numeric factor, one curve per other-factor values.
"""
