"""Parameter counts and FLOPs of a transformer, per layer and per iteration.

Sources: Narayanan et al. 2021 (arXiv 2104.04473) eq. 2 (parameters) and eq. 3 (FLOPs with full
recomputation); Korthikanti et al. 2022 (arXiv 2205.05198) Appendix A eq. 7 (model FLOPs) and
eq. 8 (hardware FLOPs with selective recomputation). A multiply-add is 2 FLOPs. Attention score
FLOPs are counted in full even for causal masks, as both papers do.
"""

from __future__ import annotations

from solver.spec.model import Architecture, MlpActivation, ModelSpec, PositionEmbedding
from solver.spec.training import Recompute


def attention_weight_count(model: ModelSpec) -> int:
    """Q and output projections h x h, K and V projections h x kv_hidden (GQA shrinks them).

    Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Sec 2.1.2-2.1.3 eqs. 9-14, and
    Appendix C's rope split): Q down h x q_lora then up q_lora x H(d_qk + d_rope) (or h x that
    without a Q latent), the joint K/V down h x (kv_lora + d_rope) (the rope key is shared by
    all heads), K/V up kv_lora x H(d_qk + d_v), output H d_v x h."""
    h = model.hidden_size
    if not model.is_mla:
        return 2 * h * model.q_width + 2 * h * model.kv_hidden_size
    heads = model.num_attention_heads
    query_width = heads * (model.qk_head_dim + model.qk_rope_head_dim)
    query = (h * model.q_lora_rank + model.q_lora_rank * query_width) if model.q_lora_rank else h * query_width
    key_value = h * (model.kv_lora_rank + model.qk_rope_head_dim) + model.kv_lora_rank * heads * (model.qk_head_dim + model.v_head_dim)
    return query + key_value + heads * model.v_head_dim * h


def mlp_weight_count(model: ModelSpec) -> int:
    """The dense MLP's weights (every layer of a dense model; the first, dense layers of an MoE one)."""
    return model.mlp_gemm_count * model.hidden_size * model.ffn_hidden_size


def expert_weight_count(model: ModelSpec) -> int:
    """One expert's weights: an MLP of inner width ``moe_ffn_hidden_size`` (0 for a dense model)."""
    if not model.is_moe:
        return 0
    return model.mlp_gemm_count * model.hidden_size * model.moe_ffn_hidden_size


def router_weight_count(model: ModelSpec) -> int:
    """The router's h x num_experts gate (Switch Transformer, Fedus et al. 2021 Sec 2.1;
    DeepSeek-V3 Sec 2.1.2's expert centroids), one per MoE layer."""
    return model.hidden_size * model.num_experts if model.is_moe else 0


def routed_expert_weight_count(model: ModelSpec) -> int:
    """The routed experts' weights of one MoE layer, all of them: what expert parallelism
    shards (each of ep ranks holds num_experts / ep experts)."""
    return model.num_experts * expert_weight_count(model)


def moe_mlp_weight_count(model: ModelSpec, active: bool = False) -> int:
    """The MLP of one MoE layer: routed experts (all, or the top-k a token uses when
    ``active``), shared experts and the router (DeepSeekMoE, Dai et al. 2024 Sec 3)."""
    routed = model.experts_per_token if active else model.num_experts
    return (routed + model.num_shared_experts) * expert_weight_count(model) + router_weight_count(model)


def layer_weight_count(model: ModelSpec, moe: bool = False, active: bool = False) -> int:
    """GEMM weights of one transformer layer (12h^2 for a GPT layer, eq. 2); of an MoE layer
    when ``moe``, counting only the experts a token uses when ``active``."""
    mlp = moe_mlp_weight_count(model, active) if moe else mlp_weight_count(model)
    return attention_weight_count(model) + mlp


def largest_layer_tensor_count(model: ModelSpec, moe: bool = False) -> int:
    """Elements of a transformer layer's largest weight tensor as Megatron-style code holds it,
    before tensor parallelism splits it: the fused QKV projection h x (q + 2 kv), the output
    projection q x h, the first MLP matrix h x ffn (h x 2 ffn where SwiGLU fuses gate and up, as
    Megatron's ``linear_fc1`` does) or the second ffn x h; an MoE layer's experts at their own
    width (one tensor per expert), beside the dense attention. Multi-head latent attention's
    projections are each smaller than its experts' in the models that use it, and are left out."""
    h = model.hidden_size
    gated = 2 if model.mlp_activation is MlpActivation.SWIGLU else 1
    attention = max(h * (model.q_width + 2 * model.kv_hidden_size), model.q_width * h)
    ffn = model.moe_ffn_hidden_size if moe else model.ffn_hidden_size
    return max(attention, gated * h * ffn)


def layer_parameter_count(model: ModelSpec, moe: bool = False, active: bool = False) -> int:
    """All parameters of one transformer layer (an MoE layer when ``moe``; its top-k and shared
    experts only when ``active``).

    GPT-style: 12h^2 + 13h (Narayanan et al. 2021 eq. 2: QKV and output biases 4h, MLP biases
    4h + h, two LayerNorms 4h). SwiGLU/RMSNorm style: GEMM weights + 2h norm scales. Squared-ReLU
    (Nemotron) style: GEMM weights + two LayerNorms 4h, no biases. A GELU expert carries its
    MLP's two biases.
    """
    h = model.hidden_size
    if model.linear_biases:
        if moe:
            experts = (model.experts_per_token if active else model.num_experts) + model.num_shared_experts
            mlp_biases = experts * (model.moe_ffn_hidden_size + h)
        else:
            mlp_biases = model.ffn_hidden_size + h
        biases = (model.q_width + 2 * model.kv_hidden_size + h) + mlp_biases
        norms = 4 * h
    else:
        biases = 0
        # Two norms of weight and bias (LayerNorm) or of a scale (RMSNorm); MLA normalises its
        # latents (RMSNorm).
        norms = (4 if model.norm_biases else 2) * h + model.q_lora_rank + model.kv_lora_rank
    return layer_weight_count(model, moe, active) + biases + norms


def layer_expert_parameter_count(model: ModelSpec) -> int:
    """Parameters of one MoE layer that expert parallelism shards: the routed experts (with
    their biases for GELU experts). Shared experts, the router, attention and norms are
    replicated over the expert-parallel ranks like any dense parameter (Megatron-core's
    ``SharedExpertMLP`` and ``TopKRouter`` sit outside the ``experts`` module)."""
    if not model.is_moe:
        return 0
    biases = model.num_experts * (model.moe_ffn_hidden_size + model.hidden_size) if model.linear_biases else 0
    return routed_expert_weight_count(model) + biases


def layer_parameter_tensor_count(model: ModelSpec) -> int:
    """Parameter tensors of one transformer layer as Megatron-style code holds them: fused QKV
    and output projections, one tensor per MLP weight matrix, plus (GPT/BERT-style) four biases,
    and two LayerNorms of weight and bias (GPT/BERT and Nemotron style) or two RMSNorm scales
    (Llama style). A GPT layer has 12 (the 13h of ``layer_parameter_count`` spread over 8
    tensors, beside 4 weight matrices)."""
    weights = 2 + model.mlp_gemm_count
    biases = 4 if model.linear_biases else 0
    norms = 4 if model.norm_biases else 2
    return weights + biases + norms


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
    count = 2 * h if model.norm_biases else h
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
    count = 2 if model.norm_biases else 1
    if not model.tied_embeddings:
        count += 1
    if model.architecture is Architecture.ENCODER:
        count += 5
    return count


def total_parameter_count(model: ModelSpec) -> int:
    """Every parameter, all experts included (Mixtral 8x7B: 46.7B; DeepSeek-V3: 671B)."""
    moe_layers = model.num_moe_layers
    return (
        embedding_parameter_count(model)
        + (model.num_layers - moe_layers) * layer_parameter_count(model)
        + (moe_layers * layer_parameter_count(model, moe=True) if moe_layers else 0)  # a dense model has no expert widths
        + head_parameter_count(model)
    )


def mtp_layer_is_moe(model: ModelSpec) -> bool:
    """Whether a multi-token-prediction module's transformer layer has experts: it is built as
    the layer after the last one would be (Megatron-core's MTP block takes the decoder's layer
    spec; DeepSeek-V3's released weights hold it as ``model.layers.61``, an MoE layer)."""
    return model.is_moe_layer(model.num_layers)


def mtp_parameter_count(model: ModelSpec) -> int:
    """Parameters of the multi-token-prediction modules, beyond the main model's (0 without).

    Each (DeepSeek-V3 Sec 2.2, Figure 3; Megatron-core ``MultiTokenPredictionLayer``): two
    RMSNorms of h (the embedding's, ``enorm``, and the hidden state's, ``hnorm``), the 2h -> h
    projection ``eh_proj``, one transformer layer and its final RMSNorm; the embedding and the
    output head are the main model's (shared). DeepSeek-V3's README_WEIGHTS.md: '11.5B unique
    parameters (excluding the shared 0.9B Embedding and 0.9B output Head)'."""
    h = model.hidden_size
    per_module = layer_parameter_count(model, moe=mtp_layer_is_moe(model)) + 2 * h * h + 3 * h
    return model.mtp_num_layers * per_module


def active_parameter_count(model: ModelSpec) -> int:
    """Parameters one token uses: the top-k and shared experts of each MoE layer instead of all
    of them, embedding and output layer included (Mixtral 8x7B: 12.9B, Jiang et al. 2024 Sec 2;
    DeepSeek-V3: 37B). The total for a dense model."""
    moe_layers = model.num_moe_layers
    return (
        embedding_parameter_count(model)
        + (model.num_layers - moe_layers) * layer_parameter_count(model)
        + (moe_layers * layer_parameter_count(model, moe=True, active=True) if moe_layers else 0)  # a dense model has no expert widths
        + head_parameter_count(model)
    )


def layer_forward_gemm_flops(model: ModelSpec, tokens: int, moe: bool = False) -> float:
    """GEMM FLOPs of one layer's forward pass over ``tokens`` tokens (24*B*s*h^2 for GPT); for
    an MoE layer those of the experts each token uses (top-k and shared) and the router, the
    active-parameter FLOPs the field reports MoE MFU in (DeepSeek-V3 Sec 3; Megatron-core's
    ``num_floating_point_operations`` for MoE)."""
    return 2.0 * tokens * layer_weight_count(model, moe, active=True)


def mean_layer_forward_gemm_flops(model: ModelSpec, tokens: int) -> float:
    """``layer_forward_gemm_flops`` averaged over the model's dense and MoE layers."""
    if not model.is_moe:
        return layer_forward_gemm_flops(model, tokens)
    moe_layers = model.num_moe_layers
    dense = (model.num_layers - moe_layers) * layer_forward_gemm_flops(model, tokens)
    return (dense + moe_layers * layer_forward_gemm_flops(model, tokens, moe=True)) / model.num_layers


def attention_score_flops(model: ModelSpec, batch: int, seq_length: int) -> float:
    """Forward FLOPs of Q K^T and softmax(.) V over the whole sequence: 4*B*s^2*h (eq. 3); with
    multi-head latent attention 2*B*s^2*H*(d_qk + d_rope) for the scores and 2*B*s^2*H*d_v for
    the values (its heads are wider than h / H: DeepSeek-V3 192 and 128 against 56)."""
    if model.is_mla:
        width = model.num_attention_heads * (model.qk_head_dim + model.qk_rope_head_dim + model.v_head_dim)
        return 2.0 * batch * seq_length * seq_length * width
    return 4.0 * batch * seq_length * seq_length * model.q_width


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
    72*B*L*s*h^2 * (1 + s/(6h) + V/(12*h*L)). MoE layers count their active experts only.
    """
    tokens = batch * seq_length
    per_layer = mean_layer_forward_gemm_flops(model, tokens) + attention_score_flops(model, batch, seq_length)
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
    per_layer_forward = mean_layer_forward_gemm_flops(model, tokens) + attention_score_flops(model, batch, seq_length)
    base = model_flops_per_iteration(model, batch, seq_length)
    if full_recompute_fraction is None:
        full_recompute_fraction = 1.0 if recompute is Recompute.FULL else 0.0
    full_layers = full_recompute_fraction * model.num_layers
    other_layers = model.num_layers - full_layers
    extra = full_layers * per_layer_forward
    if recompute is Recompute.SELECTIVE:
        extra += other_layers * 3.0 * attention_score_flops(model, batch, seq_length)
    return base + extra
