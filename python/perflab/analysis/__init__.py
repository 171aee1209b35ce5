"""Statistics over stored results: pure functions, no I/O.

stats: means with confidence intervals, CV, outliers, Mann-Whitney U, ratio CIs.
degradation: change from the first run, trend and change points (durability).
scaling: a metric against a numeric factor, one curve per other-factor values.
"""
