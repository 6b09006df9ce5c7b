"""Parameter counts and FLOPs of a transformer, per layer and per iteration.

Sources: Narayanan et al. 2021 (arXiv 2104.04473) eq. 2 (parameters) and eq. 3 (FLOPs with full
recomputation); Korthikanti et al. 2022 (arXiv 2205.05198) Appendix A eq. 7 (model FLOPs) and
eq. 8 (hardware FLOPs with selective recomputation). A multiply-add is 2 FLOPs. Attention score
FLOPs are counted in full even for causal masks, as both papers do.
"""

from __future__ import annotations

from solver.spec.model import Architecture, MlpActivation, ModelSpec, PositionEmbedding
from solver.spec.training import Recompute


def _has_biases(model: ModelSpec) -> bool:
    """GPT/BERT-style layers carry biases and two-parameter LayerNorms; SwiGLU (Llama-style) layers
    use bias-free projections and RMSNorm (Touvron et al. 2023)."""
    return model.mlp_activation is MlpActivation.GELU


def attention_weight_count(model: ModelSpec) -> int:
    """Q and output projections h x h, K and V projections h x kv_hidden (GQA shrinks them)."""
    return 2 * model.hidden_size * model.hidden_size + 2 * model.hidden_size * model.kv_hidden_size


def mlp_weight_count(model: ModelSpec) -> int:
    return model.mlp_gemm_count * model.hidden_size * model.ffn_hidden_size


def layer_weight_count(model: ModelSpec) -> int:
    """GEMM weights of one transformer layer (12h^2 for a GPT layer, eq. 2)."""
    return attention_weight_count(model) + mlp_weight_count(model)


def layer_parameter_count(model: ModelSpec) -> int:
    """All parameters of one transformer layer.

    GPT-style: 12h^2 + 13h (Narayanan et al. 2021 eq. 2: QKV and output biases 4h, MLP biases
    4h + h, two LayerNorms 4h). SwiGLU/RMSNorm style: GEMM weights + 2h norm scales.
    """
    h = model.hidden_size
    if _has_biases(model):
        biases = (h + 2 * model.kv_hidden_size + h) + (model.ffn_hidden_size + h)
        norms = 4 * h
    else:
        biases = 0
        norms = 2 * h
    return layer_weight_count(model) + biases + norms


def layer_parameter_tensor_count(model: ModelSpec) -> int:
    """Parameter tensors of one transformer layer as Megatron-style code holds them: fused QKV
    and output projections, one tensor per MLP weight matrix, plus (GPT/BERT-style) four biases
    and two LayerNorms of weight and bias, or (Llama-style) two RMSNorm scales. A GPT layer has
    12 (the 13h of ``layer_parameter_count`` spread over 8 tensors, beside 4 weight matrices)."""
    weights = 2 + model.mlp_gemm_count
    if _has_biases(model):
        return weights + 4 + 4
    return weights + 2


def embedding_parameter_count(model: ModelSpec) -> int:
    """Token embedding V x h, plus an s x h position table when positions are learned."""
    count = model.vocab_size * model.hidden_size
    if model.position_embedding is PositionEmbedding.LEARNED:
        count += model.seq_length * model.hidden_size
    return count


def head_parameter_count(model: ModelSpec) -> int:
    """Final norm, the untied output projection (V x h) and, for encoders, BERT's MLM transform
    (dense h x h + bias, LayerNorm, output bias over V; Devlin et al. 2018)."""
    h = model.hidden_size
    count = 2 * h if _has_biases(model) else h
    if not model.tied_embeddings:
        count += model.vocab_size * h
    if model.architecture is Architecture.ENCODER:
        count += h * h + h + 2 * h + model.vocab_size
    return count


def embedding_parameter_tensor_count(model: ModelSpec) -> int:
    """The token table, and the position table when positions are learned."""
    return 2 if model.position_embedding is PositionEmbedding.LEARNED else 1


def head_parameter_tensor_count(model: ModelSpec) -> int:
    """The final norm (weight and bias, or a scale), the untied output projection, and for
    encoders BERT's MLM transform (dense weight and bias, LayerNorm weight and bias, output bias)."""
    count = 2 if _has_biases(model) else 1
    if not model.tied_embeddings:
        count += 1
    if model.architecture is Architecture.ENCODER:
        count += 5
    return count


def total_parameter_count(model: ModelSpec) -> int:
    return (
        embedding_parameter_count(model)
        + model.num_layers * layer_parameter_count(model)
        + head_parameter_count(model)
    )


def layer_forward_gemm_flops(model: ModelSpec, tokens: int) -> float:
    """Dense-GEMM FLOPs of one layer's forward pass over ``tokens`` tokens (24*B*s*h^2 for GPT)."""
    return 2.0 * tokens * layer_weight_count(model)


def attention_score_flops(model: ModelSpec, batch: int, seq_length: int) -> float:
    """Forward FLOPs of Q K^T and softmax(.) V over the whole sequence: 4*B*s^2*h (eq. 3)."""
    return 4.0 * batch * seq_length * seq_length * model.hidden_size


# BERT's masked-LM loss covers the 15% of tokens that are masked (Devlin et al. 2018 Sec 3.1);
# implementations gather those positions before the output projection.
MLM_PREDICTED_FRACTION = 0.15


def predicted_tokens(model: ModelSpec, tokens: float) -> float:
    """Tokens that go through the output projection: all for decoders, the masked 15% for encoders."""
    return tokens * (MLM_PREDICTED_FRACTION if model.architecture is Architecture.ENCODER else 1.0)


def logits_forward_flops(model: ModelSpec, tokens: float) -> float:
    """Output projection onto the vocabulary, forward: 2*B*s*h*V (eq. 3's 6BshV is fwd+bwd)."""
    return 2.0 * tokens * model.hidden_size * model.vocab_size


def model_flops_per_iteration(model: ModelSpec, batch: int, seq_length: int) -> float:
    """Model FLOPs of one training iteration (forward + backward = 3x forward, no recompute).

    For a GPT model this is Korthikanti et al. 2022 eq. 7:
    72*B*L*s*h^2 * (1 + s/(6h) + V/(12*h*L)).
    """
    tokens = batch * seq_length
    per_layer = layer_forward_gemm_flops(model, tokens) + attention_score_flops(model, batch, seq_length)
    forward = model.num_layers * per_layer + logits_forward_flops(model, predicted_tokens(model, tokens))
    return 3.0 * forward


def hardware_flops_per_iteration(
    model: ModelSpec, batch: int, seq_length: int, recompute: Recompute, full_recompute_fraction: float | None = None
) -> float:
    """FLOPs the hardware executes, recomputation included.

    Full recompute repeats every layer's forward: 96*B*L*s*h^2*(1 + s/(6h) + V/(16hL)) for GPT
    (Narayanan et al. 2021 eq. 3). Selective recompute follows Korthikanti et al. 2022 eq. 8:
    72*B*L*s*h^2*(1 + s/(3h) + V/(12hL)), i.e. 12*B*L*s^2*h more than eq. 7.
    ``full_recompute_fraction`` (0..1) gives the share of layers fully recomputed when only some
    are; the rest follow ``recompute``.
    """
    tokens = batch * seq_length
    per_layer_forward = layer_forward_gemm_flops(model, tokens) + attention_score_flops(model, batch, seq_length)
    base = model_flops_per_iteration(model, batch, seq_length)
    if full_recompute_fraction is None:
        full_recompute_fraction = 1.0 if recompute is Recompute.FULL else 0.0
    full_layers = full_recompute_fraction * model.num_layers
    other_layers = model.num_layers - full_layers
    extra = full_layers * per_layer_forward
    if recompute is Recompute.SELECTIVE:
        extra += other_layers * 3.0 * attention_score_flops(model, batch, seq_length)
    return base + extra
