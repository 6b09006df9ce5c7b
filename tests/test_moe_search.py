"""The search with expert parallelism (issue 16): DeepSeek-V3 on DeepSeek's 2048 H800 comes back
with ep > 1, and the planner's best plan is at least as fast, in its own cost model, as the best
plan of the layout DeepSeek published (PP 16, EP 64, ZeRO-1 data parallelism, no TP; arXiv
2412.19437 Sec 3.2), evaluated by the same evaluator; dense models are never given ep."""

from __future__ import annotations

import pytest

import catalog
from solver.cost.evaluate import evaluate
from solver.search.loop import search
from solver.search.request import Constraints, SearchRequest
from solver.search.space import ep_sizes
from solver.spec.training import TrainingSpec

DEEPSEEK = catalog.get_model("deepseek-v3")
H800 = catalog.get_cluster("hgx-h800-x256")
TRAINING = TrainingSpec(global_batch_size=15360, seq_length=4096)  # Sec 4.2: 15360 sequences of 4K tokens
PUBLISHED = {"tp_size": 1, "pp_size": 16, "ep_size": 64, "zero_stage": 1}


@pytest.fixture(scope="module")
def best():
    return search(SearchRequest(DEEPSEEK, H800, TRAINING)).best


def test_deepseek_v3_on_2048_h800_is_planned_with_expert_parallelism(best):
    assert best is not None and best.evaluation.feasible
    assert best.parallel.ep_size > 1
    assert best.parallel.num_gpus == 2048


def test_the_best_plan_is_at_least_as_fast_as_deepseeks_published_layout(best):
    published = search(SearchRequest(DEEPSEEK, H800, TRAINING, constraints=Constraints.parse(PUBLISHED))).best
    assert published is not None
    p = published.parallel
    assert (p.tp_size, p.pp_size, p.ep_size, int(p.zero_stage), p.dp_size) == (1, 16, 64, 1, 128)
    again = evaluate(DEEPSEEK, H800, TRAINING, p)  # the same evaluator, afresh
    assert again.feasible and again.prediction.step_time_s == published.evaluation.prediction.step_time_s
    assert best.evaluation.prediction.step_time_s <= again.prediction.step_time_s


def test_the_default_search_takes_whole_experts_where_they_are_faster(best):
    """Etp 1 beside etp = tp at tp > 1: DeepSeek-V3's best plan is tp 2 with whole experts over
    ep 8 and pp 16 (33.8 s per step in the model), faster than the best plan that splits experts
    over tp, which is at tp 1 (ep 8, pp 16: 34.5 s), what the search returned before it tried etp 1."""
    p = best.parallel
    assert (p.tp_size, p.etp_size, p.ep_size, p.pp_size) == (2, 1, 8, 16)
    at_tp_1 = search(SearchRequest(DEEPSEEK, H800, TRAINING, constraints=Constraints.parse({"tp_size": 1}))).best
    assert best.evaluation.prediction.step_time_s < at_tp_1.evaluation.prediction.step_time_s


def test_dense_models_are_searched_without_expert_parallelism():
    request = SearchRequest(catalog.get_model("llama2-7b"), H800, TrainingSpec(256, 4096), num_gpus=64)
    assert ep_sizes(request, 64) == [1]
    assert ep_sizes(SearchRequest(DEEPSEEK, H800, TRAINING), 64) == [1, 2, 4, 8, 16, 32, 64]
