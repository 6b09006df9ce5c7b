"""What the search's speed-ups rely on: a profile does not depend on the cluster's size, so the
search costs its profiles on a one-node copy of the cluster (solver.search.space.Profiles) and
the analytic profiles' cache serves every GPU count of a sweep; a search plans the same whether
or not that cache is warm, and whether or not it shares another point's caches."""

from __future__ import annotations

import pytest

import catalog
from solver.cost import analytic
from solver.cost.analytic import analytic_profile
from solver.cost.profile import ProfileShape
from solver.search.loop import find_plans
from solver.search.request import Objective, SearchRequest
from solver.spec.training import TrainingSpec
from solver.sweep.grid import GridPoint
from solver.sweep.run import _plan_chunk, plan_point


def _cluster(node: str, num_nodes: int):
    return catalog.cluster_spec_from_dict({**catalog.get_entry("nodes", node), "num_nodes": num_nodes})


@pytest.mark.parametrize(
    "model, node, shapes",
    [
        ("gpt3-175b", "dgx-a100-80gb", [ProfileShape(8, 1, True), ProfileShape(4, 2, False), ProfileShape(1, 4, False)]),
        ("gpt3-175b", "dgx-h100", [ProfileShape(8, 2, True), ProfileShape(2, 1, True)]),
        ("llama2-70b", "dgx-h100", [ProfileShape(8, 1, True, 2), ProfileShape(4, 1, True, 4)]),
        ("gpt3-175b", "gb200-nvl72", [ProfileShape(8, 1, True), ProfileShape(16, 1, True)]),
        ("deepseek-v3", "hgx-h800", [ProfileShape(1, 1, False, 1, 8), ProfileShape(1, 1, False, 1, 64), ProfileShape(2, 1, True, 1, 16)]),
    ],
)
def test_a_profile_is_the_same_on_every_size_of_a_cluster(model, node, shapes):
    spec = catalog.get_model(model)
    training = TrainingSpec(1024, 4096)
    one_node = _cluster(node, 1)
    for shape in shapes:
        expected = analytic_profile(spec, one_node, training, shape)
        for num_nodes in (2, 16, 512):
            assert analytic_profile(spec, _cluster(node, num_nodes), training, shape) == expected


def test_a_sweep_point_plans_the_same_with_the_profile_cache_warm_or_cold():
    model = catalog.get_model("gpt3-175b")
    training = TrainingSpec(1536, 2048, train_tokens=300e9)

    def best(num_gpus: int):
        request = SearchRequest(model, _cluster("dgx-a100-80gb", num_gpus // 8), training, num_gpus=num_gpus,
                                objective=Objective.MIN_TIME_TO_TRAIN, top_k=1)
        held, _run = find_plans(request)
        return held[0].parallel, held[0].evaluation.prediction

    analytic.clear_caches()
    cold = best(256)
    best(128)  # warms the cache with the profiles of another size
    assert best(256) == cold


def test_points_that_share_caches_plan_as_points_that_do_not():
    """A chunk of points shares its search caches from point to point (the same model and GPU
    type at other counts; a new GPU type starts afresh): every point's plan is the one it gets
    alone."""
    model = catalog.get_model("gpt3-175b")
    training = TrainingSpec(1536, 2048, train_tokens=300e9)
    chunk = [
        (GridPoint(node, num_gpus, 1536), SearchRequest(model, _cluster(node, num_gpus // 8), training, num_gpus=num_gpus,
                                                         objective=Objective.MIN_TIME_TO_TRAIN, top_k=1))
        for node, num_gpus in (("dgx-a100-80gb", 512), ("dgx-a100-80gb", 1024), ("dgx-h100", 1024), ("dgx-h100", 256))
    ]
    alone = [plan_point(point, request) for point, request in chunk]
    analytic.clear_caches()
    assert _plan_chunk(chunk) == alone
