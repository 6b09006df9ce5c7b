"""Compute-optimal sizing: how big a model and how many tokens a compute budget buys (Hoffmann et
al. 2022, "Training Compute-Optimal Large Language Models"), a concrete shape of a catalog
family at that size, and the budget in GPU time turned into compute by planning the model.

- ``chinchilla``: the parametric loss L(N, D), the ~20 tokens per parameter rule and the
  closed-form optimum of the parametric fit (approach 3);
- ``shape``: a model of a template's family (activation, vocabulary, GQA ratio, MLP ratio) with
  layers, hidden size and heads chosen for a parameter count;
- ``budget``: the fixed point between a GPU-time budget and the compute it buys on a cluster.
"""
