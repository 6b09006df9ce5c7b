"""Memory mechanisms of issue 13 (part 5), each checked against its source.

The cross entropy's peak (``solver.cost.analytic.loss_peak_bytes_per_logit``) is read off
PyTorch itself: what autograd saves for backward in eager mode, and what AOTAutograd's min-cut
partition with Inductor's decompositions (what ``torch.compile`` runs) saves. Runs on the CPU
build of torch in the dev lock; skipped where torch is not installed.
"""

from __future__ import annotations

import pytest

from solver.cost.analytic import loss_peak_bytes_per_logit
from solver.spec.training import LossDtype, LossKernel

torch = pytest.importorskip("torch")

ROWS, VOCAB = 128, 1000


def _loss(pred, labels):
    # torchtitan/components/loss.py cross_entropy_loss
    return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def _inputs():
    pred = torch.randn(2, ROWS // 2, VOCAB, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, VOCAB, (2, ROWS // 2))
    return pred, labels


def _full_size_bytes(tensors) -> int:
    """Bytes of the distinct saved tensors with one element per logit (rows x vocabulary); a
    tensor saved by two nodes (log_softmax's output, saved by nll_loss too) counts once."""
    storages = {t.untyped_storage().data_ptr(): t.numel() * t.element_size() for t in tensors if t.numel() == ROWS * VOCAB}
    return sum(storages.values())


def test_eager_cross_entropy_keeps_fp32_log_softmax_and_writes_two_fp32_gradients():
    """Eager: log_softmax saves its fp32 output (4 bytes per logit) and nothing else full-size;
    nll_loss_backward then writes a dense fp32 gradient and _log_softmax_backward_data another
    beside it: 4 + 4 + 4 = 12 at the start of backward (the fp32 copy of the logits is not
    saved, and torchtitan drops the 16-bit logits before backward)."""
    pred, labels = _inputs()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        loss = _loss(pred, labels)
    assert _full_size_bytes(saved) == 4 * ROWS * VOCAB
    gradients = []
    node = loss.grad_fn  # nll_loss's backward: its output is the dense gradient of log_softmax
    node.register_hook(lambda grad_inputs, grad_outputs: gradients.extend(g for g in grad_inputs if g is not None))
    loss.backward()
    assert [(tuple(g.shape), g.dtype) for g in gradients] == [((ROWS, VOCAB), torch.float32)]
    assert loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.EAGER, fused_kernels=True) == 4 + 4 + 4


def test_compiled_cross_entropy_keeps_the_16_bit_logits_only():
    """torch.compile: the min-cut partition saves the 16-bit logits (2 bytes per logit) and two
    fp32 numbers per row, and backward returns the 16-bit gradient: 2 + 2."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_function
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    saved_values = []

    def forward_compiler(graph, _inputs):
        output = next(node for node in graph.graph.nodes if node.op == "output")
        saved_values.extend(node.meta["val"] for node in output.args[0][1:] if hasattr(node, "meta") and "val" in node.meta)
        return make_boxed_func(graph)

    compiled = aot_function(
        _loss, fw_compiler=forward_compiler, bw_compiler=lambda graph, _inputs: make_boxed_func(graph),
        partition_fn=min_cut_rematerialization_partition, decompositions=select_decomp_table(),
    )
    pred, labels = _inputs()
    compiled(pred, labels).backward()
    full_size = [v for v in saved_values if v.numel() == ROWS * VOCAB]
    assert [v.dtype for v in full_size] == [torch.bfloat16]
    per_row = [v.dtype for v in saved_values if v.numel() == ROWS and v.is_floating_point()]
    assert per_row == [torch.float32, torch.float32]  # the row max and log-sum-exp (beside the labels)
    assert pred.grad.dtype == torch.bfloat16
    assert loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.COMPILED, fused_kernels=True) == 2 + 2
