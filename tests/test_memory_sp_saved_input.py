"""What a column-parallel GEMM keeps for backward under sequence parallelism, per stack
(``TrainingSpec.sp_saved_input``, solver.spec.training.SpSavedInput): Megatron keeps the sharded
input and gathers it again in backward (Korthikanti et al. 2022, b*s*h/t per input); torchtitan's
DTensor plan keeps the all-gathered input (b*s*h), in FP8 where torchao casts before the gather."""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from solver.cost.analytic import analytic_profile
from solver.cost.profile import ProfileShape
from solver.spec.training import Precision, Recompute, SpSavedInput, TrainingSpec

LLAMA_70B = catalog.get_model("llama3-70b")
TOKENS_PER_SEQUENCE = 8192


def _cluster():
    node = catalog.get_entry("nodes", "dgx-h100")
    return catalog.cluster_spec_from_dict({**node, "num_nodes": 1})


def _layer(stack: str, precision: Precision, shape: ProfileShape, **facts):
    training = TrainingSpec(
        global_batch_size=64, seq_length=TOKENS_PER_SEQUENCE, precision=precision,
        **{**catalog.get_stack_facts(stack), **facts},
    )
    return analytic_profile(LLAMA_70B, _cluster(), training, shape).transformer_layers[0]


def test_stacks_state_what_they_keep():
    assert catalog.get_stack_facts("torchtitan-2025")["sp_saved_input"] == "gathered"
    for stack in ("megatron-core-2024", "megatron-lm-2024", "megatron-lm-2021", "megatron-deepspeed-2022"):
        assert catalog.get_stack_facts(stack)["sp_saved_input"] == "sharded", stack
    assert TrainingSpec(global_batch_size=1, seq_length=1).sp_saved_input is SpSavedInput.SHARDED


@pytest.mark.parametrize(("precision", "gathered_bytes"), [(Precision.BF16, 2), (Precision.FP8, 1)])
def test_gathered_inputs_are_kept_at_full_width(precision, gathered_bytes):
    """Two inputs (QKV's and the MLP-up's, the norms' outputs) of b*s*h: sharded, 2 bytes at
    1/t of the tokens each; gathered, the whole b*s*h each in the dtype of the all-gather (FP8:
    torchao's PrepareFloat8ModuleInput casts before gathering). Full recomputation keeps only the
    block's input either way, but recomputing the layer materialises the gathered inputs again."""
    tp, micro_batch = 8, 2
    shape = ProfileShape(tp, micro_batch, True)
    tokens_by_hidden = micro_batch * TOKENS_PER_SEQUENCE * LLAMA_70B.hidden_size
    sharded = _layer("torchtitan-2025", precision, shape, sp_saved_input="sharded")
    gathered = _layer("torchtitan-2025", precision, shape)
    extra = 2 * gathered_bytes * tokens_by_hidden - 2 * 2 * tokens_by_hidden / tp
    assert gathered.activation_bytes - sharded.activation_bytes == pytest.approx(extra, abs=1)
    assert gathered.checkpoint_bytes == sharded.checkpoint_bytes == 2 * tokens_by_hidden / tp
    assert gathered.kept_bytes(Recompute.FULL) == sharded.kept_bytes(Recompute.FULL)
    # torchtitan's per-op policy recomputes the all-gather (not on its save list): not kept.
    assert gathered.selective_activation_bytes == sharded.selective_activation_bytes


@pytest.mark.parametrize("shape", [ProfileShape(8, 2, False), ProfileShape(1, 2, True)])
def test_nothing_moves_without_a_sequence_parallel_gather(shape):
    """Without sequence parallelism the GEMM inputs are replicated anyway (Korthikanti et al.'s
    2*s*b*h each): the fact is not read; nor with one TP rank."""
    a = _layer("torchtitan-2025", Precision.BF16, shape)
    b = _layer("torchtitan-2025", Precision.BF16, shape, sp_saved_input="sharded")
    assert dataclasses.astuple(a) == dataclasses.astuple(b)


def test_megatron_stacks_keep_the_sharded_input():
    """Megatron's stacks keep the sharded input (Korthikanti et al. 2022: with sequence
    parallelism every replicated term over t); stating the other value is what moves them."""
    shape = ProfileShape(8, 1, True)
    megatron = _layer("megatron-core-2024", Precision.BF16, shape)
    explicit = _layer("megatron-core-2024", Precision.BF16, shape, sp_saved_input="sharded")
    assert megatron.activation_bytes == explicit.activation_bytes
    gathered = _layer("megatron-core-2024", Precision.BF16, shape, sp_saved_input="gathered")
    assert gathered.activation_bytes > megatron.activation_bytes
