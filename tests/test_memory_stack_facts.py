"""Memory terms set by how a stack runs the step, each against its source (issue 13, mechanism 5):
the head's loss peak against the recompute working set, autocast's weight copies, DDP's bucket
copy of the gradients, and the logits a training loop keeps through backward."""

from __future__ import annotations

import pytest

from solver.cost.analytic import loss_peak_bytes_per_logit
from solver.cost.memory import model_state_bytes
from solver.cost.profile import LayerKind, LayerProfile
from solver.cost.stage import extras_activation_bytes
from solver.spec.training import LossDtype, LossKernel, OptimizerKind, Recompute, ZeroStage


def _head(kept_bytes: int) -> LayerProfile:
    return LayerProfile("head", LayerKind.HEAD, 1e-3, 2e-3, 10, kept_bytes, kept_bytes, kept_bytes, 0)


@pytest.mark.parametrize(("head_bytes", "working_bytes"), [(100, 0), (100, 30), (100, 100), (30, 100)])
def test_loss_peak_and_recompute_working_set_are_never_alive_together(head_bytes, working_bytes):
    """Autograd frees the loss's saved tensors once its backward node has run, before the last
    layer's checkpoint is recomputed (torch/utils/checkpoint.py recomputes inside the layer's own
    backward): the stage holds the larger of the two, so the head adds its peak beyond the
    working set, which the activations already count."""
    extras = extras_activation_bytes(2.0, None, _head(head_bytes), Recompute.NONE, working_bytes)
    assert extras == max(0, head_bytes - working_bytes)
    assert extras + working_bytes == max(head_bytes, working_bytes)


def test_autocast_weights_are_an_fp32_master_and_a_16bit_copy():
    """torch.autocast over fp32 parameters: the parameters are the master weights (4) with fp32
    gradients (4) and Adam's two moments (8); autocast's cast cache (aten/src/ATen/autocast_mode.cpp
    ``cached_cast``: "cache fp16 casts of fp32 model weights (leaves)") adds the 16-bit copy (2).
    18 bytes per parameter against the 16 of a 16-bit model beside an fp32 master copy."""
    plain = model_state_bytes(1.0, ZeroStage.NONE, 4, OptimizerKind.ADAM)
    autocast = model_state_bytes(1.0, ZeroStage.NONE, 4, OptimizerKind.ADAM, autocast_weights=True)
    assert sum(plain.values()) == 16
    assert autocast == {"weights": 6, "gradients": 4, "optimizer_states": 8}
    sgd = model_state_bytes(1.0, ZeroStage.NONE, 4, OptimizerKind.SGD, autocast_weights=True)
    assert sum(sgd.values()) == 6 + 4 + 4  # momentum alone beside the fp32 parameters


def test_ddp_buckets_without_the_bucket_view_copy_the_gradients():
    """torch.nn.parallel.DistributedDataParallel's docstring for gradient_as_bucket_view (default
    False): with it, "the saved memory size will be equal to the total gradients size", so without
    it the buckets are a second copy. Only where DDP replicates gradients over more than one rank."""
    copied = model_state_bytes(1.0, ZeroStage.NONE, 4, OptimizerKind.ADAM, autocast_weights=True, grad_bucket_copy=True)
    assert copied["gradients"] == 2 * 4
    assert model_state_bytes(1.0, ZeroStage.NONE, 1, OptimizerKind.ADAM, grad_bucket_copy=True)["gradients"] == 2
    assert model_state_bytes(1.0, ZeroStage.OS_G, 4, OptimizerKind.ADAM, grad_bucket_copy=True)["gradients"] == 2 / 4


def test_logits_kept_through_backward():
    """torchtitan before e29b6b4d4 (#391, "del logits=(bs, seq_len, vocab_size) to save 3.9G
    memory") kept the 16-bit logits referenced through backward: 2 bytes per logit beside an eager
    loss's three tensors; a compiled loss saves the 16-bit logits anyway."""
    assert loss_peak_bytes_per_logit(LossDtype.HALF, LossKernel.EAGER, False, keeps_logits=True) == 2 + 3 * 2
    assert loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.EAGER, False, keeps_logits=True) == 2 + 3 * 4
    assert loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.FUSED, True, keeps_logits=True) == 2 + 2 + 4
    assert loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.COMPILED, True, keeps_logits=True) == 2 + 2
