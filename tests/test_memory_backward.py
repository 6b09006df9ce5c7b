"""The backward working set (``solver.cost.analytic.backward_working_bytes``) read off PyTorch.

An MLP block as torchtitan writes it (``w2(silu(w1(x)) * w3(x))``, or ``w2(gelu(w1(x)))``) is run
forward and backward in bf16 on the CPU build of torch; the profiler's allocation events give the
live bytes over the backward. Their peak above the start of backward is what autograd writes
beside the saved activations before it frees them (engine.cpp ``evaluate_function`` releases a
node's saved tensors after it has run): the activation function's input gradients, with the
second GEMM's input gradient in place of its freed input, plus the weight gradients the GEMMs
write (not in the activation working set: they go to the gradient buffers). The residual
stream's gradient (the block output's gradient, allocated before backward starts) completes the
model's figure. Skipped where torch is not installed.
"""

from __future__ import annotations

import pytest
from torch_allocations import peak_live_bytes, profiled

from solver.cost.analytic import backward_working_bytes
from solver.cost.profile import ProfileShape
from solver.spec.model import MlpActivation, ModelSpec

torch = pytest.importorskip("torch")

TOKENS, HIDDEN = 2048, 128
BF16 = 2


def _backward_peak_bytes(mlp, x) -> int:
    """Peak of the live CPU bytes the backward of ``mlp(x)`` allocates, above its start. The
    forward runs under the profiler too: it reports the frees of blocks it saw allocated only."""
    _, output = profiled(lambda: mlp(x))
    gradient = torch.randn_like(output)
    return peak_live_bytes(profiled(lambda: output.backward(gradient))[0])


def _mlp(activation: MlpActivation, ffn: int):
    torch.manual_seed(0)
    w1 = torch.nn.Linear(HIDDEN, ffn, bias=False, dtype=torch.bfloat16)
    w2 = torch.nn.Linear(ffn, HIDDEN, bias=False, dtype=torch.bfloat16)
    w3 = torch.nn.Linear(HIDDEN, ffn, bias=False, dtype=torch.bfloat16)
    if activation is MlpActivation.SWIGLU:
        return (lambda x: w2(torch.nn.functional.silu(w1(x)) * w3(x))), (w1, w2, w3)
    return (lambda x: w2(torch.nn.functional.gelu(w1(x)))), (w1, w2)


@pytest.mark.parametrize("activation, ffn", [(MlpActivation.SWIGLU, 4 * HIDDEN), (MlpActivation.GELU, 8 * HIDDEN)])
def test_mlp_backward_peak_matches_pytorch(activation, ffn):
    """SwiGLU: the product's two input gradients (2 x b*s*f), GELU: one (b*s*f), beside the
    saved tensors, the second GEMM's input gradient standing in for its input; the first
    weight gradient (w2's) is written before them. The model adds the residual gradient
    (b*s*h). The ffn widths make the MLP the layer's largest phase (attention's is 6 b*s*h)."""
    mlp, linears = _mlp(activation, ffn)
    x = torch.randn(1, TOKENS, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    peak = _backward_peak_bytes(mlp, x)
    second_weight_grad = BF16 * HIDDEN * ffn  # w2's wgrad, written first
    activation_grads = 2 if activation is MlpActivation.SWIGLU else 1
    assert peak == activation_grads * BF16 * TOKENS * ffn + second_weight_grad
    assert len(linears) == (3 if activation is MlpActivation.SWIGLU else 2)
    model = ModelSpec(
        name="probe", num_layers=1, hidden_size=HIDDEN, num_attention_heads=2, vocab_size=256,
        seq_length=TOKENS, ffn_hidden_size=ffn, mlp_activation=activation,
    )
    residual = BF16 * TOKENS * HIDDEN
    assert backward_working_bytes(model, ProfileShape(), TOKENS, flash=True) == residual + peak - second_weight_grad


def test_flash_attention_phase_counts_dq_accum_in_fp32():
    """FlashAttention-2's backward (flash_api.cpp ``mha_bwd``): dctx, dQ, dK, dV at the query
    heads' width in 16 bit and ``dq_accum`` in fp32, beside the residual gradient: 1 + 1 + 1 + 2
    + 2 b*s*h in 16-bit units (an MLP narrow enough not to be the peak)."""
    model = ModelSpec(
        name="probe", num_layers=1, hidden_size=HIDDEN, num_attention_heads=2, vocab_size=256,
        seq_length=TOKENS, ffn_hidden_size=HIDDEN, mlp_activation=MlpActivation.SWIGLU,
    )
    unit = BF16 * TOKENS * HIDDEN
    assert backward_working_bytes(model, ProfileShape(), TOKENS, flash=True) == 7 * unit
    # Tensor parallelism splits every term; sequence parallelism the residual gradient too.
    assert backward_working_bytes(model, ProfileShape(tp_size=2), TOKENS, flash=True) == unit + 6 * unit // 2
    assert backward_working_bytes(model, ProfileShape(tp_size=2, sequence_parallel=True), TOKENS, flash=True) == 7 * unit // 2
