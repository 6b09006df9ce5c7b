"""The cross entropy of vocabulary-sharded logits in eager PyTorch (DTensor's loss parallel,
torch/distributed/tensor/parallel/loss.py, as torchtitan runs it under tensor parallelism) read
off PyTorch's allocator: ``loss_peak_bytes_per_logit(..., vocab_parallel=True)``.

Runs on a one-rank gloo mesh on the CPU build of torch (loss parallel's all-reduces are then
no-ops; its decompositions allocate as on a GPU). The profiler's allocation events give the live
bytes over the loss's forward and over its backward; the logits (allocated before the forward)
and the saved log-softmax output (before the backward) are added to each. Skipped where torch
or torch.distributed is not available.
"""

from __future__ import annotations

import pytest
from torch_allocations import peak_live_bytes, profiled

from solver.cost.analytic import loss_peak_bytes_per_logit
from solver.spec.training import LossDtype, LossKernel

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

ROWS, VOCAB = 1024, 512
LOGITS = ROWS * VOCAB


def _peak_bytes(fn) -> int:
    """Peak of the live CPU bytes ``fn`` allocates, above its start."""
    return peak_live_bytes(profiled(fn)[0])


@pytest.fixture(scope="module")
def mesh():
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield init_device_mesh("cpu", (1,))
    dist.destroy_process_group()


@pytest.mark.parametrize("loss_dtype", [LossDtype.FP32, LossDtype.HALF])
def test_loss_parallel_peak_matches_pytorch(mesh, loss_dtype):
    """fp32 (torchtitan 9dec370: ``cross_entropy(pred.float(), ...)``): the backward's saved output,
    zeros, exp and their sum, 16 bytes per logit, above the forward's 2 + 4 + 4 + 4. 16-bit
    (torchtitan 83c879f: ``cross_entropy(pred, ...)``): the forward's fp32 upcast, 2 + 4 + 4 + 4
    + 2, above the backward's 4 x 2. The single-kernel eager loss holds 12 and 6."""
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel

    torch.manual_seed(0)
    labels = torch.randint(0, VOCAB, (ROWS,))
    weights = torch.randn(ROWS, VOCAB, dtype=torch.bfloat16, requires_grad=True)
    logits = distribute_tensor(weights, mesh, [Shard(1)]) * 1  # the 16-bit logits, a graph node
    result_bytes = 4 if loss_dtype is LossDtype.FP32 else 2
    losses = []

    def forward():
        pred = logits.float() if loss_dtype is LossDtype.FP32 else logits
        with loss_parallel():
            losses.append(torch.nn.functional.cross_entropy(pred, labels))

    def backward():
        with loss_parallel():
            losses[0].backward()

    forward_peak = 2 * LOGITS + _peak_bytes(forward)  # the logits are alive through the forward
    backward_peak = result_bytes * LOGITS + _peak_bytes(backward)  # the saved log-softmax output
    peak_per_logit = max(forward_peak, backward_peak) / LOGITS
    # A few bytes per row (max, log-sum-exp, targets) ride on top of the per-logit tensors.
    expected = loss_peak_bytes_per_logit(loss_dtype, LossKernel.EAGER, False, vocab_parallel=True)
    assert expected == pytest.approx(peak_per_logit, abs=0.1)
    assert expected == 16  # fp32: backward 4 + 4 + 4 + 4; 16-bit: forward 2 + 4 + 4 + 4 + 2
    assert loss_peak_bytes_per_logit(loss_dtype, LossKernel.EAGER, False) == 3 * result_bytes


def test_loss_parallel_keeps_logits_adds_to_the_fp32_backward_only():
    """The loop's 16-bit logits (``keeps_logits``) add to the backward's peak; a 16-bit loss's
    peak is in its forward, where the logits are counted already."""
    assert loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.EAGER, False, True, vocab_parallel=True) == 18
    assert loss_peak_bytes_per_logit(LossDtype.HALF, LossKernel.EAGER, False, True, vocab_parallel=True) == 16
    # The fused and compiled kernels are not DTensor decompositions: unchanged.
    assert loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.FUSED, True, vocab_parallel=True) == 6
    assert loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.COMPILED, True, vocab_parallel=True) == 4
