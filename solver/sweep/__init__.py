"""Sweeps and scaling curves: many plan requests that differ in GPU count, cluster (GPU type) and
global batch size, and what they say together.

- ``grid``: the axes of a sweep (a value, a list, or an arithmetic or geometric range) and their
  expansion into points, bounded by ``MAX_SWEEP_POINTS``;
- ``run``: the best plan of each point through ``solver.search`` (in this process or a few);
- ``analysis``: scaling efficiency against a series' smallest point, the power law
  ``time = a * p^-b`` fitted by least squares in log space with its R^2, the knee where the
  efficiency falls below a threshold, and the Pareto front of time to train against cost;
- ``chart``: the scaling and Pareto charts as standalone SVG (no script).
"""
