"""Chinchilla scaling (Hoffmann et al. 2022, arXiv 2203.15556).

N is the model's parameter count (all of them: Chinchilla counts embeddings too), D the training
tokens, C = 6 N D the training FLOPs (Kaplan et al. 2020, Sec 2.1: 6 FLOPs per parameter per
token, forward and backward).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

# The parametric loss fit L(N, D) = E + A / N^alpha + B / D^beta, Hoffmann et al. 2022 Sec 3.3,
# Eq. (10) and the fitted values below it (E = 1.69, A = 406.4, B = 410.7, alpha = 0.34,
# beta = 0.28), as published (rounded).
LOSS_E = 1.69
LOSS_A = 406.4
LOSS_B = 410.7
LOSS_ALPHA = 0.34
LOSS_BETA = 0.28
# Training FLOPs per parameter per token: forward 2, backward 4 (Kaplan et al. 2020 Sec 2.1).
FLOPS_PER_PARAMETER_TOKEN = 6.0
# Chinchilla's rule of thumb: about 20 training tokens per parameter (Hoffmann et al. 2022,
# Table 3 and A3: 70B parameters on 1.4T tokens for Gopher's budget; 1B on 20.2B).
TOKENS_PER_PARAMETER = 20.0


class SizingRule(str, Enum):
    TOKENS_PER_PARAMETER = "tokens_per_parameter"  # D = r N, C = 6 N D
    PARAMETRIC = "parametric"  # minimise L(N, D) subject to 6 N D = C (approach 3)


def loss(parameters: float, tokens: float) -> float:
    """The predicted final pre-training loss (nats per token on MassiveText) of a model of
    ``parameters`` trained on ``tokens`` tokens: Hoffmann et al. 2022, Eq. (10)."""
    return LOSS_E + LOSS_A / parameters**LOSS_ALPHA + LOSS_B / tokens**LOSS_BETA


def training_flops(parameters: float, tokens: float) -> float:
    return FLOPS_PER_PARAMETER_TOKEN * parameters * tokens


def _parametric_g() -> float:
    """G = (alpha A / (beta B))^(1 / (alpha + beta)), Hoffmann et al. 2022, Eq. (4)."""
    return (LOSS_ALPHA * LOSS_A / (LOSS_BETA * LOSS_B)) ** (1 / (LOSS_ALPHA + LOSS_BETA))


@dataclass(frozen=True)
class Optimum:
    parameters: float
    tokens: float
    compute_flops: float

    @property
    def loss(self) -> float:
        return loss(self.parameters, self.tokens)


def optimum(compute_flops: float, rule: SizingRule = SizingRule.TOKENS_PER_PARAMETER,
            tokens_per_parameter: float = TOKENS_PER_PARAMETER) -> Optimum:
    """The compute-optimal (N, D) for ``compute_flops``.

    Tokens per parameter: N = sqrt(C / (6 r)), D = r N. Parametric: N = G (C/6)^a,
    D = (C/6)^b / G with a = beta / (alpha + beta), b = alpha / (alpha + beta) (Eq. 4)."""
    if compute_flops <= 0:
        raise ValueError("compute_flops must be positive")
    if SizingRule(rule) is SizingRule.TOKENS_PER_PARAMETER:
        parameters = math.sqrt(compute_flops / (FLOPS_PER_PARAMETER_TOKEN * tokens_per_parameter))
        return Optimum(parameters, tokens_per_parameter * parameters, compute_flops)
    total = LOSS_ALPHA + LOSS_BETA
    per_six = compute_flops / FLOPS_PER_PARAMETER_TOKEN
    g = _parametric_g()
    return Optimum(g * per_six ** (LOSS_BETA / total), per_six ** (LOSS_ALPHA / total) / g, compute_flops)


def tokens_for(parameters: float, rule: SizingRule = SizingRule.TOKENS_PER_PARAMETER,
               tokens_per_parameter: float = TOKENS_PER_PARAMETER) -> Optimum:
    """The inverse: the tokens a model of ``parameters`` should see to be compute-optimal (the
    budget for which it is the optimum)."""
    if parameters <= 0:
        raise ValueError("parameters must be positive")
    if SizingRule(rule) is SizingRule.TOKENS_PER_PARAMETER:
        tokens = tokens_per_parameter * parameters
    else:
        total = LOSS_ALPHA + LOSS_BETA
        per_six = (parameters / _parametric_g()) ** (total / LOSS_BETA)  # C/6 for which N is optimal
        tokens = per_six ** (LOSS_ALPHA / total) / _parametric_g()
    return Optimum(parameters, tokens, training_flops(parameters, tokens))
