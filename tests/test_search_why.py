"""The one-line reason each plan carries (``Candidate.why``): it must agree with the numbers it
sits beside. Two plans with equal predicted step times tie, and the line says so and what each
trades, instead of calling the first one faster on the part it happens to spend less on."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import catalog
from conftest import node_cluster
from solver.search.loop import TIE_FRACTION, _Held, _why, search
from solver.search.request import SearchRequest
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Recompute, TrainingSpec, ZeroStage


def held(
    step_s: float, breakdown: dict[str, float], num_gpus: int = 64, value: float | None = None, recompute: Recompute = Recompute.FULL
) -> _Held:
    """A held plan with what ``_why`` reads: tp 8, pp 1, dp num_gpus / 8, ZeRO-3, micro-batch 1."""
    prediction = SimpleNamespace(step_time_s=step_s, mfu=0.36, breakdown_s=breakdown)
    parallel = ParallelConfig(dp_size=num_gpus // 8, tp_size=8, pp_size=1, zero_stage=ZeroStage.OS_G_P, micro_batch_size=1, recompute=recompute)
    return _Held((value if value is not None else step_s,), parallel, SimpleNamespace(prediction=prediction), num_gpus, value if value is not None else step_s)  # type: ignore[arg-type]


def test_equal_step_times_tie_and_name_what_each_plan_trades():
    # The shape of Llama 3 405B at 128K tokens on 16,384 H100 under ZeRO-3: the step waits on the
    # gathers, so full recompute costs nothing over selective; the two plans tie.
    first = held(16.3034, {"compute_s": 10.003, "recompute_s": 1.509, "tp_comm_s": 0.796, "dp_comm_exposed_s": 3.9954})
    second = held(16.3034, {"compute_s": 10.003, "recompute_s": 0.456, "tp_comm_s": 0.796, "dp_comm_exposed_s": 5.0484}, recompute=Recompute.SELECTIVE)
    text = _why(first, second)
    assert text.startswith("tp 8, pp 1, dp 8: 16.303 s per step, 36.0% MFU; ties with the next plan on step time")
    assert "less exposed data-parallel communication (3.995 s vs 5.048 s per step)" in text
    assert "for more recomputation (1.509 s vs 0.456 s per step); they differ in recompute (plans that tie" in text
    assert "faster" not in text


def test_a_difference_below_the_tie_fraction_is_a_tie_and_one_above_it_is_not():
    parts = {"compute_s": 10.0}
    assert "ties with the next plan" in _why(held(10.0, parts), held(10.0 * (1 + TIE_FRACTION / 2), parts))
    same = _why(held(10.0, parts), held(10.0, parts, recompute=Recompute.SELECTIVE))
    assert same.endswith("; ties with the next plan on step time; they differ in recompute (plans that tie are listed in a fixed order)")
    faster = _why(held(10.0, {"compute_s": 8.0, "bubble_s": 2.0}), held(10.5, {"compute_s": 8.0, "bubble_s": 2.5}))
    assert faster.endswith("; 0.5 s per step faster than the next plan, mainly on pipeline bubble (2.000 s vs 2.500 s per step)")


def test_a_tie_lists_the_expert_tp_size_only_where_it_does_not_follow_tp():
    parts = {"compute_s": 10.0}
    wide, narrow = held(10.0, parts), held(10.0, parts)
    narrow = _Held(narrow.key, ParallelConfig(dp_size=16, tp_size=4, zero_stage=ZeroStage.OS_G_P, recompute=Recompute.FULL), narrow.evaluation, 64, 10.0)
    assert _why(wide, narrow).endswith("; they differ in dp_size, tp_size (plans that tie are listed in a fixed order)")
    pinned_parallel = ParallelConfig(dp_size=16, tp_size=4, zero_stage=ZeroStage.OS_G_P, recompute=Recompute.FULL, expert_tp_size=1)
    pinned = _Held(narrow.key, pinned_parallel, narrow.evaluation, 64, 10.0)
    assert _why(wide, pinned).endswith("; they differ in dp_size, tp_size, expert_tp_size (plans that tie are listed in a fixed order)")


def test_the_faster_plan_is_credited_with_its_largest_saving_even_where_it_spends_more_elsewhere():
    first = held(12.0, {"compute_s": 9.0, "recompute_s": 2.0, "tp_comm_s": 1.0})
    second = held(13.0, {"compute_s": 9.0, "recompute_s": 0.5, "tp_comm_s": 3.5})
    assert _why(first, second).endswith("; 1 s per step faster than the next plan, mainly on in-layer communication (TP, CP, EP) (1.000 s vs 3.500 s per step)")


def test_the_last_plan_and_plans_on_other_gpu_counts_keep_their_lines():
    assert _why(held(10.0, {"compute_s": 10.0}), None).endswith("; the last plan returned")
    fewer = held(20.0, {"compute_s": 20.0}, num_gpus=32, value=32.0)
    more = held(10.0, {"compute_s": 10.0}, num_gpus=64, value=64.0)
    assert _why(fewer, more).endswith("; uses 32 GPUs against 64 for the next plan")


@pytest.mark.parametrize(
    ("model", "node", "num_gpus", "batch", "seq"),
    [("llama3-405b", "dgx-h100", 16384, 128, 131072), ("mixtral-8x7b", "gb200-nvl72", 144, 1024, 4096),
     ("llama3-70b", "dgx-h100", 64, 512, 8192)],
)
def test_every_line_of_a_real_search_agrees_with_its_step_times(model, node, num_gpus, batch, seq):
    """Every "faster" line must sit on a step time shorter than the next plan's by more than the
    tie fraction, and every "ties" line on one that is not (Mixtral 8x7B on 144 GB200: its top
    plans differ only in their layer split and tie)."""
    request = SearchRequest(catalog.get_model(model), node_cluster(node, num_gpus), TrainingSpec(global_batch_size=batch, seq_length=seq), top_k=3)
    candidates = search(request).candidates
    assert len(candidates) == 3
    for this, following in zip(candidates, candidates[1:]):
        mine, theirs = this.evaluation.prediction.step_time_s, following.evaluation.prediction.step_time_s
        assert this.why.startswith(f"{this.parallel.layout_text()}: {mine:.3f} s per step")
        assert _named_sizes(this.why) == _sizes(this.parallel)
        if this.parallel.num_gpus != following.parallel.num_gpus:
            continue
        if theirs - mine > TIE_FRACTION * mine:
            assert f"{theirs - mine:.3g} s per step faster than the next plan" in this.why
        else:
            assert "ties with the next plan on step time" in this.why and "faster" not in this.why
            assert "; they differ in " in this.why
    assert candidates[-1].why.endswith("; the last plan returned")


def _named_sizes(why: str) -> dict[str, int]:
    """The sizes a line's head names ("tp 2, cp 2, pp 4, dp 4: ..."), by dimension."""
    head = why.split(":", 1)[0]
    return {name: int(size) for name, size in (word.rsplit(" ", 1) for word in head.split(", "))}


def _sizes(parallel: ParallelConfig) -> dict[str, int]:
    """What the head must name: tp, pp and dp always, cp where it splits the sequence, ep and the
    experts' own tp where the plan has them."""
    sizes = {"tp": parallel.tp_size, "pp": parallel.pp_size, "dp": parallel.dp_size}
    if parallel.cp_size > 1:
        sizes["cp"] = parallel.cp_size
    if parallel.ep_size > 1:
        sizes["ep"] = parallel.ep_size
    if parallel.expert_tp_size is not None:
        sizes["expert tp"] = parallel.expert_tp_size
    return sizes


def test_the_line_names_context_parallelism_where_the_plan_splits_the_sequence():
    """Llama 3 70B at 8K tokens on 64 H100: the best plan splits the sequence over 2 ranks, and
    its line says so; the GPU count is the product of the sizes it names (ep aside)."""
    request = SearchRequest(catalog.get_model("llama3-70b"), node_cluster("dgx-h100", 64), TrainingSpec(global_batch_size=512, seq_length=8192), top_k=3)
    best = search(request).candidates[0]
    assert best.parallel.cp_size == 2
    sizes = _named_sizes(best.why)
    assert sizes["cp"] == 2
    assert sizes["tp"] * sizes["cp"] * sizes["pp"] * sizes["dp"] == 64


def test_layout_text_names_expert_parallelism_apart_from_the_factors_of_the_gpu_count():
    moe = ParallelConfig(dp_size=8, tp_size=2, pp_size=4, ep_size=8, expert_tp_size=1)
    assert moe.layout_text() == "tp 2, pp 4, dp 8, ep 8, expert tp 1"
    assert ParallelConfig(dp_size=4, tp_size=2, pp_size=4, cp_size=2).layout_text(" x ") == "tp 2 x cp 2 x pp 4 x dp 4"
    assert ParallelConfig(dp_size=4, tp_size=2, expert_tp_size=2).layout_text() == "tp 2, pp 1, dp 4"  # experts follow tp


def test_an_expert_parallel_plan_is_not_credited_with_tensor_parallel_communication():
    """At tp 1 the in-layer collectives a plan saves on are its MoE all-to-alls (and any CP ring):
    the line names them all, never tensor parallelism alone."""
    first = held(10.0, {"compute_s": 8.0, "tp_comm_s": 0.3})
    second = held(10.5, {"compute_s": 8.0, "tp_comm_s": 0.8})
    line = _why(first, second)
    assert "in-layer communication (TP, CP, EP)" in line and "tensor-parallel" not in line
