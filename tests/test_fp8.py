"""FP8 cast-transpose overheads (issue 13, mechanism 7): Transformer Engine casts each linear
layer's input forward and its output gradient backward, 4 bytes of HBM traffic per element; the
cost scales with (m + n) k, so it weighs most at small hidden sizes."""

from __future__ import annotations

import pytest

import catalog
from solver.cost.analytic import FP8_CAST_TRANSPOSE_BYTES, _fp8_cast_s, analytic_profile
from solver.cost.compute import elementwise_time_s
from solver.cost.profile import ProfileShape
from solver.spec.model import ModelSpec
from solver.spec.training import Precision, TrainingSpec


def _cluster():
    return catalog.cluster_spec_from_dict(catalog.node_cluster_entry("dgx-h100", 8))


def test_cast_bytes_follow_the_linear_layers():
    """A GPT layer (ffn 4h) at tp 1: inputs h + h + h + 4h = 7h per token forward, output
    gradients 3h + h + 4h + h = 9h per token backward, four kernels each way."""
    gpu = _cluster().gpu
    model = ModelSpec("gpt", 24, 4096, 32, 50257, 2048)
    tokens = 4 * 2048
    forward_s, backward_s = _fp8_cast_s(model, gpu, Precision.FP8, tokens, 1)
    assert forward_s == pytest.approx(elementwise_time_s(gpu, FP8_CAST_TRANSPOSE_BYTES * 7 * 4096 * tokens, kernels=4))
    assert backward_s == pytest.approx(elementwise_time_s(gpu, FP8_CAST_TRANSPOSE_BYTES * 9 * 4096 * tokens, kernels=4))
    assert _fp8_cast_s(model, gpu, Precision.BF16, tokens, 1) == (0.0, 0.0)


def test_fp8_layers_carry_the_casts_and_they_weigh_most_at_small_hidden_sizes():
    cluster = _cluster()
    shape = ProfileShape(1, 4, False)
    shares = []
    for hidden in (1024, 4096, 12288):
        model = ModelSpec(f"gpt-{hidden}", 4, hidden, hidden // 128, 50257, 2048)
        fp8 = TrainingSpec(256, 2048, Precision.FP8)
        layer = analytic_profile(model, cluster, fp8, shape).transformer_layers[0]
        cast_forward_s, cast_backward_s = _fp8_cast_s(model, cluster.gpu, Precision.FP8, 4 * 2048, 1)
        assert cast_forward_s > 0 and cast_backward_s > 0
        # The casts are part of the layer's forward and backward time.
        assert layer.forward_s > cast_forward_s and layer.backward_s > cast_backward_s
        shares.append((cast_forward_s + cast_backward_s) / (layer.forward_s + layer.backward_s))
    assert shares[0] > shares[1] > shares[2]
