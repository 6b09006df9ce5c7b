"""What a bigger global batch costs: the gradient noise scale's step/token trade-off and the
choice of the batch that trains fastest or cheapest.

- ``noise``: McCandlish et al. 2018's S = S_min (1 + B_noise / B), E = E_min (1 + B / B_noise)
  and Kaplan et al. 2020's critical batch B_crit(L) = B* / L^(1 / alpha_B) (pure formulas);
- ``choose``: the plan search at a handful of global batch sizes, each costed for the tokens
  its batch needs, and the batch that wins.
"""
