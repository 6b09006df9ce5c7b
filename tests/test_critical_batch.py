"""The critical-batch physics (solver.batch.noise) at the papers' own points, and the choice of
the global batch (solver.batch.choose)."""

from __future__ import annotations

import math

import pytest

import catalog
from solver.batch.choose import MAX_BATCH_CANDIDATES, BatchRequest, at_batch, candidate_batches, choose_batch
from solver.batch.noise import (
    KAPLAN_ALPHA_B,
    KAPLAN_B_STAR_TOKENS,
    NoiseScale,
    NoiseSource,
    batch_cost,
    kaplan_critical_batch_tokens,
    steps_needed,
    tokens_needed,
)
from solver.search.request import Objective, SearchRequest
from solver.spec.errors import SpecError
from solver.spec.training import TrainingSpec

# --------------------------------------------------------------------------- McCandlish et al. 2018


@pytest.mark.parametrize("noise_scale_tokens", [1e3, 4e6, 3.3e8])
def test_at_the_noise_scale_steps_and_examples_are_twice_their_minimum(noise_scale_tokens: float) -> None:
    """McCandlish et al. 2018 at B = B_noise: S = 2 S_min and E = 2 E_min."""
    assert steps_needed(noise_scale_tokens, noise_scale_tokens, 1000.0) == pytest.approx(2000.0, rel=1e-12)
    assert tokens_needed(noise_scale_tokens, noise_scale_tokens, 5e9) == pytest.approx(1e10, rel=1e-12)


def test_small_and_large_batch_limits() -> None:
    """B << B_noise: E -> E_min (perfect scaling, S ~ S_min B_noise / B); B >> B_noise: S -> S_min."""
    noise = NoiseScale.given(1e10, noise_scale_tokens=1e6)
    tiny, huge = batch_cost(noise, 1e2), batch_cost(noise, 1e10)
    assert tiny.tokens == pytest.approx(noise.min_tokens, rel=1e-3)
    assert tiny.steps * tiny.batch_tokens == pytest.approx(noise.min_tokens, rel=1e-3)
    assert huge.steps == pytest.approx(noise.min_steps, rel=1e-3)


def test_steps_times_batch_is_tokens_and_the_tradeoff_is_a_hyperbola() -> None:
    """S B = E at every batch, and (S/S_min - 1)(E/E_min - 1) = 1 (McCandlish et al. 2018's steps/examples trade-off)."""
    noise = NoiseScale.given(3e11, noise_scale_tokens=2e6)
    for batch_tokens in (1e4, 5e5, 2e6, 8e6, 1e9):
        cost = batch_cost(noise, batch_tokens)
        assert cost.steps * batch_tokens == pytest.approx(cost.tokens, rel=1e-12)
        assert (cost.steps / cost.min_steps - 1) * (cost.tokens / noise.min_tokens - 1) == pytest.approx(1.0, rel=1e-12)
        assert cost.extra_tokens == pytest.approx(cost.tokens - noise.min_tokens)


# --------------------------------------------------------------------------- Kaplan et al. 2020


def test_kaplan_constants_are_the_published_ones() -> None:
    """Kaplan et al. 2020, Section 5.1: B* ~ 2e8 tokens, alpha_B ~ 0.21."""
    assert KAPLAN_B_STAR_TOKENS == 2e8
    assert KAPLAN_ALPHA_B == 0.21


def test_kaplan_critical_batch_doubles_for_every_13_percent_decrease_in_loss() -> None:
    """Section 5.1: B_crit 'roughly doubles for every 13% decrease in loss'."""
    for loss in (2.0, 3.0, 4.0):
        ratio = kaplan_critical_batch_tokens(0.87 * loss) / kaplan_critical_batch_tokens(loss)
        assert ratio == pytest.approx(2.0, abs=0.07)
    # The exact decrease that doubles it: 1 - 2^(-alpha_B) = 13.5%.
    assert 1 - 2 ** -KAPLAN_ALPHA_B == pytest.approx(0.135, abs=0.001)


@pytest.mark.parametrize(
    ("loss", "expected_tokens"),
    # B* / L^(1/0.21) written out.
    [(3.0, 2e8 / 3.0 ** (1 / 0.21)), (2.0, 2e8 / 2.0 ** (1 / 0.21))],
)
def test_kaplan_critical_batch_at_published_losses(loss: float, expected_tokens: float) -> None:
    assert kaplan_critical_batch_tokens(loss) == pytest.approx(expected_tokens, rel=1e-12)
    # About a million tokens (1.07e6) at 3 nats/token.
    if loss == 3.0:
        assert 0.9e6 < kaplan_critical_batch_tokens(loss) < 1.2e6


def test_noise_scale_from_a_target_loss_or_given() -> None:
    kaplan = NoiseScale.given(1e11, target_loss=2.5)
    assert kaplan.source is NoiseSource.KAPLAN_2020
    assert kaplan.noise_scale_tokens == pytest.approx(2e8 / 2.5 ** (1 / 0.21))
    assert kaplan.min_steps == pytest.approx(1e11 / kaplan.noise_scale_tokens)
    given = NoiseScale.given(1e11, noise_scale_tokens=4e6)
    assert given.source is NoiseSource.REQUEST and given.noise_scale_tokens == 4e6


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_tokens": 1e11}, "critical_batch"),
        ({"min_tokens": 1e11, "noise_scale_tokens": 1e6, "target_loss": 2.0}, "critical_batch"),
        ({"min_tokens": 0.0, "noise_scale_tokens": 1e6}, "critical_batch.min_tokens"),
        ({"min_tokens": 1e11, "noise_scale_tokens": 0.5}, "critical_batch.noise_scale_tokens"),
        ({"min_tokens": 1e11, "target_loss": 0.1}, "critical_batch.target_loss"),
        ({"min_tokens": 1e11, "target_loss": math.nan}, "critical_batch.target_loss"),
    ],
)
def test_noise_scale_rejects_what_it_cannot_use(kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError) as error:
        NoiseScale.given(**kwargs)
    assert error.value.field == field


# --------------------------------------------------------------------------- candidates


def test_candidate_batches_default_and_bounds() -> None:
    assert candidate_batches(512) == (64, 128, 256, 512, 1024, 2048, 4096)
    assert candidate_batches(512, 100, 1000) == (100, 200, 400, 512, 800, 1000)
    assert candidate_batches(3, 1) == (1, 2, 3, 4, 8, 16, 24)
    with pytest.raises(SpecError) as error:
        candidate_batches(512, 1, 1 << 20)
    assert error.value.field == "critical_batch.global_batch_size"
    assert len(candidate_batches(512, 1, 1 << (MAX_BATCH_CANDIDATES - 1))) == MAX_BATCH_CANDIDATES
    with pytest.raises(SpecError):
        candidate_batches(512, 64, 32)
    with pytest.raises(SpecError) as error:
        candidate_batches(512, 1 << 25, 1 << 25)
    assert error.value.field == "critical_batch.global_batch_size.max"
    assert candidate_batches(1 << 24) == ((1 << 21), (1 << 22), (1 << 23), (1 << 24))


# --------------------------------------------------------------------------- choosing the batch


def _request(cluster: str = "dgx-a100-80gb-x128", objective: Objective = Objective.MIN_TIME_TO_TRAIN) -> SearchRequest:
    model = catalog.model_spec_from_dict(catalog.get_entry("models", "gpt3-1.3b"))
    spec = catalog.cluster_spec_from_dict(catalog.get_entry("clusters", cluster))
    return SearchRequest(model, spec, TrainingSpec(global_batch_size=512, seq_length=2048), objective=objective, top_k=2)


def test_choose_batch_picks_the_fastest_and_accounts_for_every_second() -> None:
    """1,024 A100s, GPT-3 1.3B, Kaplan's B_crit at 2.5 nats/token (2.55e6 tokens = 1,244 sequences
    of 2,048): small batches waste GPUs, large ones tokens; the fastest batch lies between."""
    request = _request()
    noise = NoiseScale.given(2.6e10, target_loss=2.5)
    result, choice = choose_batch(request, BatchRequest(noise, candidate_batches(512)))
    times = {p.global_batch_size: p.time_to_train_s or math.inf for p in choice.points}
    assert all(math.isfinite(t) for t in times.values())
    chosen = choice.chosen_global_batch_size
    assert chosen == min(times, key=lambda b: times[b])
    assert min(times) < chosen < max(times)  # an interior optimum: the trade-off is real
    for p in choice.points:
        assert p.time_to_train_s is not None and p.step_time_s is not None and p.num_gpus is not None
        assert p.time_for_min_tokens_s is not None and p.time_for_extra_tokens_s is not None
        assert p.time_to_train_s == pytest.approx(p.cost.steps * p.step_time_s, rel=1e-9)
        assert p.time_to_train_s == pytest.approx(p.time_for_min_tokens_s + p.time_for_extra_tokens_s, rel=1e-12)
        assert p.cost_usd == pytest.approx(p.time_to_train_s * p.num_gpus * 5.12 / 3600)
    # The full search at the chosen batch is the plan: its time to train is the point's.
    best = result.best
    assert best is not None
    assert best.evaluation.prediction.time_to_train_s == pytest.approx(times[chosen], rel=1e-9)
    assert len(result.candidates) == 2
    assert f"batch {chosen} has the least time to train" in choice.summary


def test_choose_batch_min_cost_and_misuse() -> None:
    noise = NoiseScale.given(2.6e10, noise_scale_tokens=2e6)
    _, choice = choose_batch(_request(objective=Objective.MIN_COST), BatchRequest(noise, (256, 512, 1024)))
    costs = {p.global_batch_size: p.cost_usd for p in choice.points}
    assert choice.chosen_global_batch_size == min(costs, key=lambda b: costs[b] or math.inf)
    with pytest.raises(SpecError) as error:
        choose_batch(_request(objective=Objective.MAX_THROUGHPUT), BatchRequest(noise, (512,)))
    assert error.value.field == "objective"
    request = _request()
    with_tokens = at_batch(request, noise, 512)  # carries train_tokens: both at once is refused
    with pytest.raises(SpecError) as error:
        choose_batch(with_tokens, BatchRequest(noise, (512,)))
    assert error.value.field == "training.train_tokens"
    # More tokens than a plan may train is a SpecError naming min_tokens, not train_tokens.
    with pytest.raises(SpecError) as error:
        at_batch(request, NoiseScale.given(1e16, noise_scale_tokens=1.0), 512)
    assert error.value.field == "critical_batch.min_tokens"
