"""Compute-optimal sizing (solver/sizing): Chinchilla's own points, the parametric optimum, the
family shapes, and a budget met by planning."""

from __future__ import annotations

import math

import pytest

import catalog
from solver.cost.flops import total_parameter_count
from solver.search.request import SearchRequest
from solver.sizing.budget import BUDGET_TOLERANCE, size_model, size_to_budget
from solver.sizing.chinchilla import (
    LOSS_A,
    LOSS_ALPHA,
    LOSS_B,
    LOSS_BETA,
    LOSS_E,
    SizingRule,
    loss,
    optimum,
    tokens_for,
    training_flops,
)
from solver.sizing.shape import shape_for
from solver.spec.training import TrainingSpec

# Gopher's training compute, Hoffmann et al. 2022 (Sec 1 and Table 3): 5.76e23 FLOPs.
GOPHER_FLOPS = 5.76e23


def test_gophers_budget_buys_chinchilla_70b_on_1_4t_tokens():
    chinchilla = optimum(GOPHER_FLOPS)
    # The paper rounds to 70B parameters and 1.4T tokens.
    assert round(chinchilla.parameters / 1e9, -1) == 70
    assert round(chinchilla.tokens / 1e12, 1) == 1.4
    assert chinchilla.tokens / chinchilla.parameters == pytest.approx(20.0)
    assert training_flops(chinchilla.parameters, chinchilla.tokens) == pytest.approx(GOPHER_FLOPS)


def test_the_paper_table_a3_rows_at_20_tokens_per_parameter():
    # Table A3 (approach 1 projections): 1B parameters -> 20.2B tokens, 10B -> 205.1B, 67B -> 1.5T.
    for parameters, tokens in ((1e9, 20.2e9), (10e9, 205.1e9), (67e9, 1.5e12)):
        assert tokens_for(parameters).tokens == pytest.approx(tokens, rel=0.11)


def test_chinchilla_beats_gopher_on_the_parametric_loss():
    # Hand-computed from Eq. (10) with the published constants.
    chinchilla = LOSS_E + LOSS_A / 70e9**LOSS_ALPHA + LOSS_B / 1.4e12**LOSS_BETA
    gopher = LOSS_E + LOSS_A / 280e9**LOSS_ALPHA + LOSS_B / 300e9**LOSS_BETA
    assert loss(70e9, 1.4e12) == pytest.approx(chinchilla, rel=1e-12) == pytest.approx(1.9366, abs=1e-4)
    assert loss(280e9, 300e9) == pytest.approx(gopher, rel=1e-12) == pytest.approx(1.9933, abs=1e-4)
    assert loss(70e9, 1.4e12) < loss(280e9, 300e9)


def test_the_parametric_optimum_has_the_papers_exponents_and_is_the_loss_minimum():
    small, large = optimum(1e21, SizingRule.PARAMETRIC), optimum(1e24, SizingRule.PARAMETRIC)
    # N_opt ~ C^a, D_opt ~ C^b with a = beta / (alpha + beta) = 0.45, b = 0.55 (the paper reports 0.46 and 0.54
    # from the unrounded fit: Table 3, approach 3).
    a = math.log(large.parameters / small.parameters) / math.log(1e3)
    b = math.log(large.tokens / small.tokens) / math.log(1e3)
    assert (round(a, 2), round(b, 2)) == (0.45, 0.55)
    for opt in (small, large):
        assert training_flops(opt.parameters, opt.tokens) == pytest.approx(opt.compute_flops)
        for factor in (0.9, 1.1):  # along 6 N D = C, the loss rises either side
            assert loss(opt.parameters * factor, opt.tokens / factor) > opt.loss
    # For Gopher's budget the rounded constants give 32B parameters (the paper's Figure 1 shows about 40B
    # from its unrounded fit); the inverse gives the same tokens back.
    gopher = optimum(GOPHER_FLOPS, SizingRule.PARAMETRIC)
    assert round(gopher.parameters / 1e9) == 32
    assert tokens_for(gopher.parameters, SizingRule.PARAMETRIC).tokens == pytest.approx(gopher.tokens, rel=1e-9)


def test_a_family_shape_keeps_the_template_and_lands_on_the_count():
    gpt3 = catalog.get_model("gpt3-175b")
    again = shape_for(gpt3, total_parameter_count(gpt3), 2048, "again")
    assert (again.num_layers, again.hidden_size, again.num_attention_heads, again.ffn_hidden_size) == (96, 12288, 96, 49152)
    llama3 = catalog.get_model("llama3-70b")
    sized = shape_for(llama3, 20e9, 4096, "llama3-20b")
    assert abs(total_parameter_count(sized) / 20e9 - 1) <= 0.05
    assert sized.head_width == 128 and sized.num_attention_heads % 4 == 0
    assert sized.num_attention_heads // sized.num_kv_heads == 8  # the template's GQA groups
    assert sized.mlp_activation == llama3.mlp_activation and sized.vocab_size == llama3.vocab_size
    assert sized.ffn_hidden_size % 256 == 0
    assert sized.ffn_hidden_size / sized.hidden_size == pytest.approx(28672 / 8192, rel=0.05)


def _request(num_gpus: int) -> SearchRequest:
    entry = catalog.get_entry("nodes", "dgx-a100-80gb")
    cluster = catalog.cluster_spec_from_dict({**entry, "num_nodes": num_gpus // 8})
    return SearchRequest(catalog.get_model("gpt3-1.3b"), cluster, TrainingSpec(256, 2048), num_gpus=num_gpus)


def test_a_budget_is_spent_within_tolerance_and_never_exceeded():
    budget_gpu_s = 8 * 24 * 3600.0  # a day on 8 GPUs
    sized = size_to_budget(_request(8), budget_gpu_s, SizingRule.TOKENS_PER_PARAMETER, 20.0, "sized")
    assert sized.fits and sized.gpu_seconds is not None and sized.time_to_train_s is not None
    assert sized.gpu_seconds == pytest.approx(budget_gpu_s, rel=1e-6) and sized.gpu_seconds <= budget_gpu_s
    # The shape is a whole number of layers: the tokens fill the budget, near 20 per parameter.
    assert sized.tokens / sized.parameters == pytest.approx(20.0, rel=2 * BUDGET_TOLERANCE)
    assert abs(sized.parameters / sized.optimum.parameters - 1) <= 0.05
    assert sized.parameters == total_parameter_count(sized.model)
    assert sized.predicted_loss == pytest.approx(loss(sized.parameters, sized.tokens))
    assert sized.gpu_seconds == pytest.approx(8 * sized.time_to_train_s)


def test_a_model_gets_its_compute_optimal_tokens():
    sized = size_model(_request(8), SizingRule.TOKENS_PER_PARAMETER, 20.0)
    parameters = total_parameter_count(catalog.get_model("gpt3-1.3b"))
    assert sized.parameters == parameters and sized.tokens == 20.0 * parameters
    held_time_s = size_model(_request(8), SizingRule.TOKENS_PER_PARAMETER, 40.0).time_to_train_s
    assert sized.fits and held_time_s == pytest.approx(2 * sized.time_to_train_s)  # time is linear in tokens
