"""Muon's optimizer step on the GPU: the Newton-Schulz orthogonalisation of each weight matrix's
update, and what Muon leaves to Adam.

Muon (K. Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks",
kellerjordan.github.io/posts/muon; at scale Liu et al. 2025, "Muon is Scalable for LLM
Training", arXiv 2502.16982, and Kimi K2, arXiv 2507.20534) keeps one momentum per parameter
and replaces each 2-D weight matrix's update by an approximately orthogonal matrix: a few
iterations of the quintic Newton-Schulz map on the momentum X (m x n, the wider side second):

    A = X X^T            (m x m: 2 m^2 n FLOPs)
    B = b A + c A A      (2 m^3)
    X = a X + B X        (2 m^2 n)

so 4 m^2 n + 2 m^3 FLOPs per iteration. How Megatron-core runs it (NVIDIA/Megatron-LM
d98e8a64dd, megatron/training/arguments.py and megatron/core/optimizer/emerging_optimizers.py,
layer_wise_optimizer.py), which is what this module costs:

- ``--muon-num-ns-steps`` 5 iterations, quintic coefficients (``--muon-coefficient-type``);
- ``--muon-fp32-matmul-prec medium``: the fp32 matmuls may run on 16-bit tensor cores, so the
  GEMMs are costed at the GPU's bf16 rate (fp16 where it has no bf16);
- ``--muon-split-qkv`` (default on): the fused QKV weight is orthogonalised as its Q, K and V
  parts; other weights as they are stored (a gated MLP's fused fc1 as one 2f x h matrix, each
  routed expert's fc1 and fc2 apart, the router's E x h gate);
- ``--muon-tp-mode`` (``TrainingSpec.muon_tp_mode``): ``duplicated`` (the default at d98e8a64dd)
  has each tensor-parallel rank all-gather the momentum of a split matrix and orthogonalise the
  whole matrix; ``blockwise`` (the default at 8f1c2f8, and Megatron-Bridge's Muon recipes) has it
  orthogonalise its own shard; ``distributed`` has each rank keep its shard and run the
  iterations on it, all-reducing every iteration's Gram matrix X X^T (NVIDIA-NeMo/
  Emerging-Optimizers fd77292, muon_utils.py ``newton_schulz_tp`` and ``newton_schulz_step``:
  the split dimension is the one summed over, so the side the iteration keeps whole, m, is the
  unsplit one, and A A runs whole on every rank). Column-parallel weights (Q, K, V, fc1, MLA's
  up projections) are split by rows, row-parallel ones (the output projection, fc2) by
  columns; MLA's down projections
  (``parallel_mode='duplicated'`` in multi_latent_attention.py) and the router are whole on every
  rank; routed experts split over the expert-tensor-parallel ranks;
- with the distributed optimizer (``--use-distributed-optimizer``, the former ``dist_muon``)
  ``LayerWiseDistributedOptimizer`` assigns whole matrices to the data-parallel ranks (experts'
  to the expert-data-parallel ranks); each orthogonalises its own and the updated parameters are
  all-gathered, so a rank's share is about 1 / dp of the stage's matrices. Without it every
  data-parallel rank orthogonalises all of them;
- embeddings, the output layer and 1-D parameters (norms, biases) are stepped by Adam
  (``--muon-scalar-optimizer adam``; ``is_managed_by_layer_wise_optimizer``), whose second
  moment they keep beside Muon's momentum.

Checked against NVIDIA's measured step of Muon over AdamW on the same runs (developer blog
"Advancing Emerging Optimizers for Accelerated LLM Training with NVIDIA Megatron", Table 1,
Megatron-Bridge 26.02 on GB300 NVL72): Kimi K2 at PP4 DP64 EP64 1.021, Qwen3-30B-A3B at DP8 EP8
1.039; predicted 1.021 and 1.039 (tests/test_muon.py).

Not costed: the granularity of assigning whole matrices (a rank may get more than 1 / dp of
the work), and the multi-token-prediction layers' matrices. The layer-partition problem charges
Muon's 8 bytes of state per parameter but not the embedding's and output layer's Adam moment,
which only the evaluator adds (``solver.cost.stage.stage_cost``, on the optimizer's shard): a split the partition solver
finds may then be judged over capacity by that much, never the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from solver.cost.comm import all_gather_s, all_reduce_s, tp_link
from solver.cost.compute import gemm_time_s
from solver.spec.hardware import ClusterSpec, GpuSpec
from solver.spec.model import ModelSpec
from solver.spec.training import MuonTpMode, Precision

NEWTON_SCHULZ_STEPS = 5  # Megatron-core's --muon-num-ns-steps default; Jordan et al. 2024
MOMENTUM_BYTES = 4  # the fp32 momentum a tensor-parallel rank gathers (duplicated mode)
GRAM_BYTES = 2  # the bf16 Gram matrix the ranks all-reduce each iteration (distributed mode)
NORM_BYTES = 4  # the fp32 squared Frobenius norm they all-reduce once per matrix (distributed mode)


ROWS, COLS = 0, 1  # the dimension a tensor-parallel rank holds a slice of


@dataclass(frozen=True)
class Matrix:
    """``count`` weight matrices of ``rows`` (outputs) x ``cols`` (inputs) that Muon orthogonalises
    one by one; ``split`` is the dimension tensor parallelism slices (ROWS: column-parallel, COLS:
    row-parallel, None: whole on every rank)."""

    rows: int
    cols: int
    count: int = 1
    split: int | None = ROWS

    @property
    def parameters(self) -> int:
        return self.rows * self.cols * self.count

    def shard(self, ranks: int) -> "Matrix":
        """One of ``ranks`` tensor-parallel ranks' slice of it."""
        if self.split is None or ranks == 1:
            return self
        if self.split == ROWS:
            return replace(self, rows=self.rows // ranks)
        return replace(self, cols=self.cols // ranks)


def newton_schulz_flops(rows: int, cols: int, steps: int = NEWTON_SCHULZ_STEPS) -> float:
    """FLOPs of ``steps`` quintic Newton-Schulz iterations on one rows x cols matrix (see the
    module docstring): 4 m^2 n + 2 m^3 each, m the shorter side."""
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4.0 * m * m * n + 2.0 * m**3)


def _iteration_gemms_s(gpu: GpuSpec, m: int, n: int) -> float:
    """One iteration's three GEMMs on an m x n operand (X X^T: m x m x n, A A: m^3, B X:
    m x n x m) at the GPU's 16-bit rate (shape-aware, ``compute.gemm_time_s``; fp16 where it has
    no bf16)."""
    precision = Precision.BF16 if Precision.BF16 in gpu.peak_flops_per_s else Precision.FP16
    return gemm_time_s(gpu, precision, m, m, n) + gemm_time_s(gpu, precision, m, m, m) + gemm_time_s(gpu, precision, m, n, m)


def _newton_schulz_s(gpu: GpuSpec, matrix: Matrix, steps: int = NEWTON_SCHULZ_STEPS) -> float:
    """Seconds of ``steps`` iterations on each of ``matrix.count`` matrices, one at a time, m the
    shorter side (``_iteration_gemms_s``)."""
    m, n = min(matrix.rows, matrix.cols), max(matrix.rows, matrix.cols)
    return matrix.count * steps * _iteration_gemms_s(gpu, m, n)


def _distributed_newton_schulz_s(cluster: ClusterSpec, matrix: Matrix, ranks: int, steps: int = NEWTON_SCHULZ_STEPS) -> float:
    """Seconds of ``steps`` iterations on each of ``matrix.count`` split matrices in distributed
    mode, on one of ``ranks`` tensor-parallel ranks. Per iteration the rank multiplies its shard
    X_i (m x n / ranks, m the unsplit side) into its part of the Gram matrix (m x m x n / ranks),
    all-reduces that m x m matrix over the group in bf16 (``--muon-fp32-matmul-prec medium`` casts
    X to bf16 before the loop), forms A A whole (m^3) and updates its shard (m x n / ranks x m);
    once per matrix it all-reduces the Frobenius norm's scalar (``distributed_normalize_p2``).
    With m the longer side (a row-split matrix taller than wide), A A costs more than the
    duplicated mode's whole-matrix iteration: the waste newton_schulz_tp's docstring warns of."""
    m, n = (matrix.cols, matrix.rows) if matrix.split == ROWS else (matrix.rows, matrix.cols)
    link = tp_link(cluster, ranks)
    one = _iteration_gemms_s(cluster.gpu, m, n // ranks) + all_reduce_s(GRAM_BYTES * m * m, ranks, link)
    return matrix.count * (steps * one + all_reduce_s(NORM_BYTES, ranks, link))


def _attention_matrices(model: ModelSpec) -> list[Matrix]:
    """The attention block's matrices: Q, K, V apart (split QKV) and the output; with latent
    attention (DeepSeek-V2 Sec 2.1) its down, up and output projections, the shapes of
    ``flops.attention_weight_count``."""
    h = model.hidden_size
    if not model.is_mla:
        return [Matrix(model.q_width, h), Matrix(model.kv_hidden_size, h, 2), Matrix(h, model.q_width, split=COLS)]
    heads = model.num_attention_heads
    query_width = heads * (model.qk_head_dim + model.qk_rope_head_dim)
    query = (
        [Matrix(model.q_lora_rank, h, split=None), Matrix(query_width, model.q_lora_rank)] if model.q_lora_rank
        else [Matrix(query_width, h)]
    )
    key_value = [
        Matrix(model.kv_lora_rank + model.qk_rope_head_dim, h, split=None),
        Matrix(heads * (model.qk_head_dim + model.v_head_dim), model.kv_lora_rank),
    ]
    return [*query, *key_value, Matrix(h, heads * model.v_head_dim, split=COLS)]


def _mlp_matrices(model: ModelSpec, inner: int, count: int = 1) -> list[Matrix]:
    """An MLP of inner width ``inner`` as Megatron stores it: fc1 (the gate and up projections
    fused, 2 x inner, for a gated MLP) and fc2."""
    gated = model.mlp_gemm_count == 3
    return [Matrix((2 if gated else 1) * inner, model.hidden_size, count), Matrix(model.hidden_size, inner, count, split=COLS)]


def layer_matrices(model: ModelSpec, moe: bool) -> tuple[list[Matrix], list[Matrix]]:
    """(replicated matrices, routed experts' matrices) of one transformer layer (an MoE layer
    when ``moe``): attention, then the dense MLP, or the router, the shared experts (one MLP of
    their summed width, Megatron-core's SharedExpertMLP) and every routed expert."""
    dense = _attention_matrices(model)
    if not moe:
        return dense + _mlp_matrices(model, model.ffn_hidden_size), []
    dense.append(Matrix(model.num_experts, model.hidden_size, split=None))
    if model.num_shared_experts:
        dense += _mlp_matrices(model, model.num_shared_experts * model.moe_ffn_hidden_size)
    return dense, _mlp_matrices(model, model.moe_ffn_hidden_size, model.num_experts)


def muon_step_s(
    model: ModelSpec, cluster: ClusterSpec, layer_indices: list[int], tp_size: int, dp_size: int, ep_size: int,
    expert_dp_size: int, distributed: bool, tp_mode: MuonTpMode = MuonTpMode.DUPLICATED, expert_tp_size: int = 1,
) -> float:
    """Seconds one GPU of a stage holding ``layer_indices`` spends orthogonalising updates in
    Muon's step (see the module docstring): its share of the stage's matrices' Newton-Schulz
    GEMMs, 1 / ``dp_size`` of the replicated ones and 1 / ``expert_dp_size`` of its
    num_experts / ``ep_size`` local experts' when ``distributed`` (all of them otherwise). Split
    matrices (over ``tp_size`` ranks, experts over ``expert_tp_size``) are orthogonalised whole
    after gathering their momentum (``tp_mode`` DUPLICATED), as the rank's shard (BLOCKWISE), or
    whole from the shards with a Gram all-reduce per iteration (DISTRIBUTED)."""
    dense_share, expert_share = (1 / dp_size, 1 / expert_dp_size) if distributed else (1.0, 1.0)
    expert_share /= ep_size  # the routed experts' matrices are all num_experts of them
    compute_s = gather_s = 0.0
    for moe in (False, True):
        n = sum(1 for i in layer_indices if model.is_moe_layer(i) == moe)
        if not n:
            continue
        dense, experts = layer_matrices(model, moe)
        for matrices, share, ranks in ((dense, dense_share, tp_size), (experts, expert_share, expert_tp_size)):
            for matrix in matrices:
                split = matrix.split is not None and ranks > 1
                if split and tp_mode is MuonTpMode.DISTRIBUTED:
                    compute_s += n * share * _distributed_newton_schulz_s(cluster, matrix, ranks)
                    continue
                whole = tp_mode is MuonTpMode.DUPLICATED or not split
                compute_s += n * share * _newton_schulz_s(cluster.gpu, matrix if whole else matrix.shard(ranks))
                if split and tp_mode is MuonTpMode.DUPLICATED:
                    # One gather of its fp32 momentum per matrix this GPU orthogonalises.
                    gathers = n * share * matrix.count
                    gather_s += all_gather_s(MOMENTUM_BYTES * gathers * matrix.rows * matrix.cols, ranks, tp_link(cluster, ranks), gathers)
    return compute_s + gather_s

