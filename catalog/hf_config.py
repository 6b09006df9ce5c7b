"""A model entry from a Hugging Face ``config.json``, so that a model a team trains from the Hub
plans without its shape being typed in by hand.

``from_hf_config`` reads the fields that Hugging Face Transformers' configuration class of the
config's ``model_type`` defines (src/transformers/models/<type>/configuration_<type>.py) and returns
the catalog's model fields (the names of catalog/data/models.json, which ``POST
/v1/catalog/models`` and an inline ``model`` take), with what of the model the planner does not
cost. What the planner cannot represent is an error naming the config's field ("config.moe_layers":
sparse layers at positions the catalog's interval cannot state), never a spec that costs another
model.

What each model type reads (Transformers' field names; "x | y" is a default):
- llama, mistral, phi3, qwen2, qwen3: num_hidden_layers, hidden_size, num_attention_heads,
  num_key_value_heads | num_attention_heads, intermediate_size, vocab_size,
  max_position_embeddings, tie_word_embeddings | false; a gated MLP (SwiGLU's three GEMMs),
  rotary positions (no parameters).
- mixtral: as llama, with num_local_experts routed experts of intermediate_size, top
  num_experts_per_tok, softmax router.
- qwen2_moe, qwen3_moe: as llama, num_experts of moe_intermediate_size, top num_experts_per_tok,
  every decoder_sparse_step-th layer (Transformers: layer i is sparse when (i + 1) % step == 0,
  the catalog's ``moe_layer_interval``); qwen2_moe's shared expert of shared_expert_intermediate_size
  as that many experts' worth (Qwen1.5-MoE-A2.7B: 5632 = 4 x 1408).
- deepseek_v2, deepseek_v3: as llama, n_routed_experts of moe_intermediate_size, n_shared_experts,
  first_k_dense_replace dense layers, scoring_func 'sigmoid' (V3) or 'softmax'; multi-head latent
  attention from kv_lora_rank, q_lora_rank | 0, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
  num_nextn_predict_layers multi-token-prediction modules.
- glm4_moe (GLM-4.5 / 4.6 / 4.7): as llama with head_dim, n_routed_experts of
  moe_intermediate_size, top num_experts_per_tok, n_shared_experts, first_k_dense_replace dense
  layers of intermediate_size, a sigmoid router, num_nextn_predict_layers multi-token-prediction
  modules; its Q/K norms (use_qk_norm) are named, not costed.
- olmo2: as llama; its Q/K norms and post-sublayer norms are named, not costed.
- olmoe: as llama, num_experts of intermediate_size in every layer, top num_experts_per_tok,
  softmax router; its Q/K norms are named, not costed.
- llama4 (its text_config) and llama4_text: num_local_experts of intermediate_size, top
  num_experts_per_tok, one shared expert, sigmoid router, dense layers of intermediate_size_mlp,
  every interleave_moe_layer_step-th layer sparse (its moe_layers list must follow that pattern).
- nemotron: as llama with hidden_act relu2, an ungated squared-ReLU MLP.
- starcoder2: as llama with an ungated GELU MLP (hidden_act gelu*), its sliding_window in every
  layer, tie_word_embeddings | true; its biases (use_bias) are named, not costed.
- gemma, gemma2, gemma3_text (and gemma3's text_config): as llama with a gated GELU MLP
  (hidden_activation), tied embeddings by default and head_dim (256); the local window
  (sliding_window) in the share of layers layer_types or sliding_window_pattern gives (Gemma 2:
  every other layer); logit soft-capping is named, not costed.
- gpt_oss: as mixtral (num_local_experts of intermediate_size, top num_experts_per_tok) with
  head_dim 64 and its window on every other layer (layer_types); its biases and attention sinks
  are named, not costed.
- Every Llama-style type: sliding_window without use_sliding_window (Mistral 7B v0.1) is a window
  in every layer; Qwen2's use_sliding_window (windows from max_window_layers on) is named, not
  costed.
- gpt_neox: num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size,
  max_position_embeddings, tie_word_embeddings | false, GELU, rotary.
- gptj: n_layer, n_embd, n_head, n_inner | 4 x n_embd, vocab_size, n_positions,
  tie_word_embeddings | false, GELU, rotary.
- gpt2: n_layer, n_embd, n_head, n_inner | 4 x n_embd, vocab_size, n_positions, learned positions,
  tie_word_embeddings | true, GELU.
- bert: num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size,
  max_position_embeddings, learned positions, an encoder with a tied masked-LM head.
- mpt: n_layers, d_model, n_heads, expansion_ratio x d_model, vocab_size, max_seq_len; ALiBi
  (attn_config.alibi) has no position parameters, else learned; embeddings always tied.

``seq_length`` defaults to the config's longest position (max_position_embeddings or its type's
name for it): it sizes a learned position table, and a plan's sequence comes from its training
spec, not from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from catalog.conversion import model_spec_from_dict
from solver.spec.errors import SpecError
from solver.spec.model import is_probability

_ABSENT = object()
SHOWN_MAX_CHARS = 80  # a value quoted back in an error, cut to this many characters


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_MAX_CHARS else text[: SHOWN_MAX_CHARS - 3] + "..."


@dataclass(frozen=True)
class Converted:
    """The catalog's model fields read from a config, and what of the model they leave out."""

    model_type: str
    fields: dict[str, Any]
    not_modelled: tuple[str, ...]
    keys: dict[str, str]  # each field's config key, as errors name it ("config.num_hidden_layers")


class _Reader:
    """Reads one config (or its ``text_config``) and remembers which config key set which field,
    so that a shape the planner rejects is reported under the config's own name."""

    def __init__(self, config: Mapping[str, Any], path: str) -> None:
        self.config = config
        self.path = path
        self.fields: dict[str, Any] = {}
        self.keys: dict[str, str] = {}
        self.notes: list[str] = []

    def where(self, key: str) -> str:
        return f"{self.path}.{key}"

    def raw(self, key: str, default: Any = _ABSENT) -> Any:
        value = self.config.get(key, _ABSENT)
        if value is _ABSENT or value is None:
            if default is _ABSENT:
                raise SpecError(self.where(key), "is required for this model type")
            return default
        return value

    def integer(self, key: str, default: Any = _ABSENT, minimum: int = 1) -> int:
        value = self.raw(key, default)
        if isinstance(value, float) and value.is_integer():  # "4.0" from a config written by a float-happy tool
            value = int(value)
        if type(value) is not int or value < minimum:
            raise SpecError(self.where(key), f"must be an integer >= {minimum}, got {_shown(value)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw(key, default)
        if type(value) is not bool:
            raise SpecError(self.where(key), f"must be true or false, got {_shown(value)}")
        return value

    def text(self, key: str, default: Any = _ABSENT) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str):
            raise SpecError(self.where(key), f"must be a string, got {_shown(value)}")
        return value

    def set(self, field: str, key: str, value: Any) -> None:
        self.fields[field] = value
        self.keys[field] = key

    def probability(self, key: str, default: float) -> float:
        return _probability(self.where(key), self.raw(key, default))

    def dropout(self, hidden_key: str | None, attention_key: str) -> None:
        """Dropout probabilities; a model type without a residual dropout (``hidden_key`` None:
        Transformers' Llama-style decoders apply none) trains with 0."""
        self.set("hidden_dropout", hidden_key or attention_key, self.probability(hidden_key, 0.0) if hidden_key else 0.0)
        self.set("attention_dropout", attention_key, self.probability(attention_key, 0.0))

    def sizes(self, names: tuple[tuple[str, str], ...]) -> None:
        """Required sizes: each (field, config key) pair read as an integer >= 1."""
        for field, key in names:
            self.set(field, key, self.integer(key))


# The shape as LlamaConfig, GPTNeoXConfig and BertConfig name it (catalog field, config key).
SHAPE_KEYS = (("num_layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
              ("num_attention_heads", "num_attention_heads"), ("ffn_hidden_size", "intermediate_size"),
              ("vocab_size", "vocab_size"), ("seq_length", "max_position_embeddings"))


def _probability(where: str, value: Any) -> float:
    """``value`` as a dropout probability in [0, 1); SpecError naming ``where`` otherwise."""
    if not is_probability(value):
        raise SpecError(where, f"must be a probability in [0, 1), got {_shown(value)}")
    return float(value)


def _decoder(r: _Reader, *, gated: bool = True, tied_default: bool = False, act_key: str = "hidden_act",
             alternating_window: bool = False) -> None:
    """The fields every Llama-style decoder config shares (LlamaConfig's names). Where
    ``alternating_window``, the config's sliding_window applies to every other layer (Gemma 2/3,
    gpt-oss) rather than to all of them (Mistral 7B v0.1)."""
    r.sizes(SHAPE_KEYS)
    heads = r.fields["num_attention_heads"]
    r.set("num_kv_heads", "num_key_value_heads", r.integer("num_key_value_heads", heads))
    _head_dim(r)
    r.set("tied_embeddings", "tie_word_embeddings", r.flag("tie_word_embeddings", tied_default))
    r.fields.update(architecture="decoder", position_embedding="none")
    r.dropout(None, "attention_dropout")
    if gated:
        act = r.text(act_key, "silu")
        r.fields["mlp_activation"] = "swiglu"
        if act not in ("silu", "swish"):
            r.notes.append(f"a gated MLP with {act} costs as SwiGLU (the same three GEMMs)")
    if r.raw("attention_bias", False) is True:
        r.notes.append("the attention projections' biases")
    if r.raw("use_sliding_window", False) is True:  # Qwen2's windows start at max_window_layers
        r.notes.append("sliding-window attention from max_window_layers on (costed as full causal attention)")
    elif r.raw("sliding_window", None) is not None and "use_sliding_window" not in r.config:
        r.set("sliding_window", "sliding_window", r.integer("sliding_window"))
        if alternating_window:
            r.set("sliding_window_fraction", "sliding_window", _window_fraction(r))


def _window_fraction(r: _Reader) -> float:
    """Share of the layers with the local window: the config's layer_types where it lists them
    (gpt-oss, Gemma 3: 'sliding_attention' / 'full_attention'), else Gemma 3's
    sliding_window_pattern p (p - 1 local layers to one global), else every other layer (Gemma 2)."""
    types = r.raw("layer_types", None)
    if types is not None:
        if not isinstance(types, list) or not types or not all(t in ("sliding_attention", "full_attention") for t in types):
            raise SpecError(r.where("layer_types"), "must list 'sliding_attention' or 'full_attention' per layer")
        local = sum(t == "sliding_attention" for t in types)
        if not local:
            raise SpecError(r.where("layer_types"), "names no sliding_attention layer beside a sliding_window")
        return local / len(types)
    pattern = r.raw("sliding_window_pattern", None)
    if pattern is not None:
        p = r.integer("sliding_window_pattern", minimum=2)
        return (p - 1) / p
    return 0.5


def _head_dim(r: _Reader) -> None:
    """head_dim where the config states one (Qwen3-30B-A3B: 32 heads of 128 on hidden 2048); the
    spec holds it only where it is not hidden_size / num_attention_heads."""
    head_dim = r.raw("head_dim", None)
    if head_dim is not None:
        r.set("head_dim", "head_dim", r.integer("head_dim"))
        if r.fields["head_dim"] * r.fields["num_attention_heads"] == r.fields["hidden_size"]:
            del r.fields["head_dim"]


def _llama(r: _Reader) -> None:
    _decoder(r)


def _qwen2(r: _Reader) -> None:
    _decoder(r)
    r.notes.append("the Q, K and V projections' biases")


def _qwen3(r: _Reader) -> None:
    _decoder(r)
    r.notes.append("the per-head Q and K norms")


def _local_experts(r: _Reader, count_key: str = "num_local_experts") -> None:
    """Mixtral-style experts (MixtralConfig, GptOssConfig; OlmoeConfig counts them in
    ``num_experts``): that many experts of intermediate_size each, top num_experts_per_tok,
    softmax router."""
    r.set("num_experts", count_key, r.integer(count_key))
    r.set("experts_per_token", "num_experts_per_tok", r.integer("num_experts_per_tok"))
    r.set("moe_ffn_hidden_size", "intermediate_size", r.fields["ffn_hidden_size"])
    r.fields["router"] = "softmax_topk"


def _mixtral(r: _Reader) -> None:
    _decoder(r)
    _local_experts(r)


def _sparse_step(r: _Reader) -> None:
    """Qwen-MoE's sparse layers: (i + 1) % decoder_sparse_step == 0, none in mlp_only_layers."""
    r.set("moe_layer_interval", "decoder_sparse_step", r.integer("decoder_sparse_step", 1))
    if r.raw("mlp_only_layers", []):
        raise SpecError(r.where("mlp_only_layers"), "dense layers at listed positions are not expressible; the planner takes"
                        " leading dense layers and a fixed interval between sparse ones")


def _qwen_moe(r: _Reader, *, shared: bool) -> None:
    _decoder(r)
    r.set("num_experts", "num_experts", r.integer("num_experts"))
    r.set("experts_per_token", "num_experts_per_tok", r.integer("num_experts_per_tok"))
    expert = r.integer("moe_intermediate_size")
    r.set("moe_ffn_hidden_size", "moe_intermediate_size", expert)
    _sparse_step(r)
    r.fields["router"] = "softmax_topk"
    if shared:
        width = r.integer("shared_expert_intermediate_size", 0, minimum=0)
        if width % expert:
            raise SpecError(r.where("shared_expert_intermediate_size"),
                            f"{width} is not a whole number of experts of moe_intermediate_size {expert}")
        r.set("num_shared_experts", "shared_expert_intermediate_size", width // expert)
        if width:
            r.notes.append("the shared expert's sigmoid gate")


def _qwen2_moe(r: _Reader) -> None:
    _qwen_moe(r, shared=True)
    r.notes.append("the Q, K and V projections' biases")


def _qwen3_moe(r: _Reader) -> None:
    _qwen_moe(r, shared=False)
    r.notes.append("the per-head Q and K norms")


def _routed_experts(r: _Reader, router: str) -> None:
    """DeepSeek-style experts (DeepseekV3Config, Glm4MoeConfig): n_routed_experts of
    moe_intermediate_size, top num_experts_per_tok, n_shared_experts of the same width, dense
    layers before first_k_dense_replace; a config with a single routed expert stays dense."""
    routed = r.integer("n_routed_experts", 0, minimum=0)
    if routed <= 1:
        return
    r.set("num_experts", "n_routed_experts", routed)
    r.set("experts_per_token", "num_experts_per_tok", r.integer("num_experts_per_tok"))
    r.set("moe_ffn_hidden_size", "moe_intermediate_size", r.integer("moe_intermediate_size"))
    r.set("num_shared_experts", "n_shared_experts", r.integer("n_shared_experts", 0, minimum=0))
    r.set("first_dense_layers", "first_k_dense_replace", r.integer("first_k_dense_replace", 0, minimum=0))
    r.fields["router"] = router
    if r.integer("n_group", 1, minimum=1) > 1:
        r.set("router_groups", "n_group", r.integer("n_group"))
        r.set("router_group_topk", "topk_group", r.integer("topk_group", minimum=1))


def _mtp(r: _Reader) -> None:
    """num_nextn_predict_layers multi-token-prediction modules (DeepSeek-V3, GLM-4.5)."""
    mtp = r.integer("num_nextn_predict_layers", 0, minimum=0)
    if mtp:
        r.set("mtp_num_layers", "num_nextn_predict_layers", mtp)


def _deepseek(r: _Reader) -> None:
    _decoder(r)
    r.set("num_kv_heads", "num_attention_heads", r.fields["num_attention_heads"])  # latent attention: one K/V per head
    if r.integer("n_routed_experts", 0, minimum=0) > 1:
        if r.integer("moe_layer_freq", 1) != 1:
            # Transformers: layer i >= first_k_dense_replace is sparse when i % moe_layer_freq == 0,
            # counted from 0, not from the first sparse layer as the catalog's interval is.
            raise SpecError(r.where("moe_layer_freq"), "only 1 (every layer after the dense ones) is expressible")
        scoring = r.text("scoring_func", "softmax")
        if scoring not in ("softmax", "sigmoid"):
            raise SpecError(r.where("scoring_func"), f"must be 'softmax' or 'sigmoid', got {_shown(scoring)}")
        _routed_experts(r, f"{scoring}_topk")
    kv_rank = r.integer("kv_lora_rank", 0, minimum=0)
    if kv_rank:
        r.set("kv_lora_rank", "kv_lora_rank", kv_rank)
        r.set("q_lora_rank", "q_lora_rank", r.integer("q_lora_rank", 0, minimum=0))
        r.set("qk_head_dim", "qk_nope_head_dim", r.integer("qk_nope_head_dim"))
        r.set("qk_rope_head_dim", "qk_rope_head_dim", r.integer("qk_rope_head_dim"))
        r.set("v_head_dim", "v_head_dim", r.integer("v_head_dim"))
    _mtp(r)


def _glm4_moe(r: _Reader) -> None:
    """GLM-4.5 / 4.6 / 4.7 (Glm4MoeConfig): grouped-query attention of head_dim-wide heads
    (96 of 128 on hidden 5120), dense layers of intermediate_size before first_k_dense_replace, then
    DeepSeek-style experts whose router is a sigmoid with a score-correction bias
    (Glm4MoeTopkRouter), and num_nextn_predict_layers multi-token-prediction modules."""
    _decoder(r)
    _routed_experts(r, "sigmoid_topk")
    _mtp(r)
    if r.flag("use_qk_norm", False):
        r.notes.append("the per-head Q and K norms")


def _olmo2(r: _Reader) -> None:
    """OLMo 2 (Olmo2Config): Llama's shapes, with the Q and K projections normalised and each
    sublayer's output normalised (element-wise, not costed)."""
    _decoder(r)
    r.notes.append("the Q and K norms and the norms after each sublayer")


def _olmoe(r: _Reader) -> None:
    """OLMoE (OlmoeConfig): num_experts experts of intermediate_size in every layer, top
    num_experts_per_tok, softmax router, no shared expert, the Q and K projections normalised."""
    _decoder(r)
    _local_experts(r, "num_experts")
    r.notes.append("the Q and K norms")


def _llama4_text(r: _Reader) -> None:
    _decoder(r)
    layers = r.fields["num_layers"]
    r.set("ffn_hidden_size", "intermediate_size_mlp", r.integer("intermediate_size_mlp"))
    r.set("num_experts", "num_local_experts", r.integer("num_local_experts"))
    r.set("experts_per_token", "num_experts_per_tok", r.integer("num_experts_per_tok"))
    r.set("moe_ffn_hidden_size", "intermediate_size", r.integer("intermediate_size"))
    step = r.integer("interleave_moe_layer_step", 1)
    r.set("moe_layer_interval", "interleave_moe_layer_step", step)
    expected = list(range(step - 1, layers, step))  # Llama4TextConfig's default moe_layers
    listed = r.raw("moe_layers", expected)
    if listed != expected:
        raise SpecError(r.where("moe_layers"), f"sparse layers {_shown(listed)} do not follow interleave_moe_layer_step {step}")
    r.fields.update(num_shared_experts=1, router="sigmoid_topk")  # Llama4TextMoe: one shared expert, sigmoid scores
    if r.raw("attention_chunk_size", None) is not None:
        r.notes.append("chunked attention on the RoPE layers (costed as full causal attention)")
    r.notes.append("the per-head Q and K norms")


def _gemma(r: _Reader) -> None:
    """Gemma 1/2/3 (GemmaConfig, Gemma2Config, Gemma3TextConfig): a gated GELU MLP (GeGLU, the
    three GEMMs SwiGLU costs), tied embeddings by default, head_dim 256 wider than hidden / heads
    on most sizes."""
    _decoder(r, tied_default=True, act_key="hidden_activation" if r.raw("hidden_activation", None) else "hidden_act",
             alternating_window=True)
    if r.raw("attn_logit_softcapping", None) is not None or r.raw("final_logit_softcapping", None) is not None:
        r.notes.append("logit soft-capping (element-wise, not costed)")
    r.notes.append("the embedding scaling and extra norms (element-wise)")


def _gpt_oss(r: _Reader) -> None:
    """gpt-oss (GptOssConfig): Mixtral-style experts of intermediate_size with biases, top
    num_experts_per_tok, head_dim 64 on hidden 2880."""
    _decoder(r, alternating_window=True)
    _local_experts(r)
    r.notes.append("the experts' biases and the attention sinks")


def _starcoder2(r: _Reader) -> None:
    """StarCoder2 (Starcoder2Config): grouped-query attention, an ungated GELU MLP (c_fc, c_proj),
    LayerNorm, biases on every projection (use_bias), its window in every layer; embeddings
    untied unless tie_word_embeddings says otherwise (Starcoder2Config's default: tied)."""
    _decoder(r, gated=False, tied_default=True)
    act = r.text("hidden_act", "gelu_pytorch_tanh")
    if not act.startswith("gelu"):
        raise SpecError(r.where("hidden_act"), f"only a GELU MLP is expressible for starcoder2, got {_shown(act)}")
    r.fields["mlp_activation"] = "gelu"
    if r.flag("use_bias", True):
        r.notes.append("the projections' biases")


def _nemotron(r: _Reader) -> None:
    _decoder(r, gated=False)
    act = r.text("hidden_act", "relu2")
    if act != "relu2":
        raise SpecError(r.where("hidden_act"), f"only relu2 (squared ReLU) is expressible for nemotron, got {_shown(act)}")
    r.fields["mlp_activation"] = "squared_relu"


def _gpt_neox(r: _Reader) -> None:
    r.sizes(SHAPE_KEYS)
    r.set("num_kv_heads", "num_attention_heads", r.fields["num_attention_heads"])
    r.set("tied_embeddings", "tie_word_embeddings", r.flag("tie_word_embeddings", False))
    r.fields.update(mlp_activation="gelu", architecture="decoder", position_embedding="none")
    r.dropout("hidden_dropout", "attention_dropout")
    if r.raw("use_parallel_residual", True) is True:
        r.notes.append("attention and MLP in parallel (use_parallel_residual) cost as one after the other")


def _gpt2_style(r: _Reader, *, rotary: bool, tied_default: bool) -> None:
    r.sizes((("num_layers", "n_layer"), ("hidden_size", "n_embd"), ("num_attention_heads", "n_head"),
             ("vocab_size", "vocab_size"), ("seq_length", "n_positions")))
    r.set("num_kv_heads", "n_head", r.fields["num_attention_heads"])
    r.set("ffn_hidden_size", "n_inner", r.integer("n_inner", 4 * r.fields["hidden_size"]))
    r.set("tied_embeddings", "tie_word_embeddings", r.flag("tie_word_embeddings", tied_default))
    r.fields.update(mlp_activation="gelu", architecture="decoder", position_embedding="none" if rotary else "learned")
    r.dropout("resid_pdrop", "attn_pdrop")


def _gpt2(r: _Reader) -> None:
    _gpt2_style(r, rotary=False, tied_default=True)


def _gptj(r: _Reader) -> None:
    _gpt2_style(r, rotary=True, tied_default=False)
    r.notes.append("attention and MLP in parallel cost as one after the other")


def _bert(r: _Reader) -> None:
    r.sizes(SHAPE_KEYS)
    r.set("num_kv_heads", "num_attention_heads", r.fields["num_attention_heads"])
    kind = r.text("position_embedding_type", "absolute")
    if kind != "absolute":
        raise SpecError(r.where("position_embedding_type"), f"only 'absolute' (a learned table) is expressible, got {_shown(kind)}")
    r.fields.update(mlp_activation="gelu", tied_embeddings=True, architecture="encoder", position_embedding="learned")
    r.dropout("hidden_dropout_prob", "attention_probs_dropout_prob")
    r.notes.append("the token-type embeddings and the pooler")


def _mpt(r: _Reader) -> None:
    r.sizes((("num_layers", "n_layers"), ("hidden_size", "d_model"), ("num_attention_heads", "n_heads"),
             ("vocab_size", "vocab_size"), ("seq_length", "max_seq_len")))
    r.set("num_kv_heads", "n_heads", r.fields["num_attention_heads"])
    ratio = r.raw("expansion_ratio", 4)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 64:
        raise SpecError(r.where("expansion_ratio"), f"must be a number above 0 and at most 64, got {_shown(ratio)}")
    r.set("ffn_hidden_size", "expansion_ratio", int(round(ratio * r.fields["hidden_size"])))
    attn = r.raw("attn_config", {})
    if not isinstance(attn, Mapping):
        raise SpecError(r.where("attn_config"), f"must be an object, got {_shown(attn)}")
    alibi = attn.get("alibi", False) is True
    r.set("hidden_dropout", "resid_pdrop", r.probability("resid_pdrop", 0.0))
    # MPTConfig keeps the attention dropout in attn_config.
    r.set("attention_dropout", "attn_config", _probability(r.where("attn_config.attn_pdrop"), attn.get("attn_pdrop", 0.0)))
    learned = r.flag("learned_pos_emb", True) and not alibi  # MPTConfig turns the table off under ALiBi
    r.fields.update(mlp_activation="gelu", tied_embeddings=True, architecture="decoder",
                    position_embedding="learned" if learned else "none")


_READERS: dict[str, Callable[[_Reader], None]] = {
    "llama": _llama, "mistral": _llama, "qwen2": _qwen2, "qwen3": _qwen3, "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe, "qwen3_moe": _qwen3_moe, "deepseek_v2": _deepseek, "deepseek_v3": _deepseek,
    "llama4_text": _llama4_text, "nemotron": _nemotron, "gpt_oss": _gpt_oss, "glm4_moe": _glm4_moe,
    "olmo2": _olmo2, "olmoe": _olmoe, "phi3": _llama, "starcoder2": _starcoder2,
    "gemma": _gemma, "gemma2": _gemma, "gemma3_text": _gemma, "gpt_neox": _gpt_neox, "gptj": _gptj, "gpt2": _gpt2,
    "bert": _bert, "mpt": _mpt,
}
# Model types whose layers the cost model has no mechanism for, with what it lacks: a refusal that
# says why, rather than "unknown type" (Transformers' configuration classes of these types).
_NOT_EXPRESSIBLE = {
    "qwen3_next": "Gated DeltaNet linear-attention layers (layer_types 'linear_attention')",
    "kimi_linear": "Kimi Delta Attention linear-attention layers (linear_attn_config)",
    "minimax": "lightning (linear) attention layers",
    "minimax_m1": "lightning (linear) attention layers",
    "jamba": "Mamba state-space layers",
    "falcon_h1": "Mamba-2 state-space heads beside attention",
    "granitemoehybrid": "Mamba-2 state-space layers",
    "nemotron_h": "Mamba-2 state-space layers",
    "mamba": "state-space layers (no attention)",
    "mamba2": "state-space layers (no attention)",
    "rwkv": "recurrent (RWKV) layers",
    "t5": "an encoder-decoder (cross-attention)",
    "bart": "an encoder-decoder (cross-attention)",
}
_OPTIONAL_DEFAULTS = {"moe_layer_interval": 1, "num_shared_experts": 0, "first_dense_layers": 0, "mtp_num_layers": 0}
SUPPORTED_MODEL_TYPES = tuple(sorted([*_READERS, "llama4", "gemma3"]))


def from_hf_config(config: Mapping[str, Any], name: str, seq_length: int | None = None, path: str = "config") -> Converted:
    """The catalog model fields of ``config`` (a parsed config.json) named ``name``; ``path`` is
    how errors name the config ("config.head_dim"). The fields are checked by building the solver's
    ModelSpec, and a shape it rejects is reported under the config key it came from."""
    if not isinstance(config, Mapping):
        raise SpecError(path, "must be a JSON object (a config.json)")
    model_type = config.get("model_type")
    if model_type in ("llama4", "gemma3"):  # the language model is the text_config
        text = config.get("text_config")
        if not isinstance(text, Mapping):
            raise SpecError(f"{path}.text_config", f"is required for model_type {model_type!r} (the language model's config)")
        reader = _Reader(text, f"{path}.text_config")
        if "tie_word_embeddings" not in text and "tie_word_embeddings" in config:
            reader.config = {**text, "tie_word_embeddings": config["tie_word_embeddings"]}
        (_llama4_text if model_type == "llama4" else _gemma)(reader)
        if config.get("vision_config") is not None:
            reader.notes.append("the vision encoder and its projector")
    elif isinstance(model_type, str) and model_type in _READERS:
        reader = _Reader(config, path)
        _READERS[model_type](reader)
    elif isinstance(model_type, str) and model_type in _NOT_EXPRESSIBLE:
        raise SpecError(f"{path}.model_type", f"{model_type!r} has {_NOT_EXPRESSIBLE[model_type]}, which the cost model does not"
                        f" cost; known: {', '.join(SUPPORTED_MODEL_TYPES)}")
    else:
        raise SpecError(f"{path}.model_type", f"{_shown(model_type)} is not a model type this reader knows; known: {', '.join(SUPPORTED_MODEL_TYPES)}")
    # Optional fields at their defaults are left out, as the catalog's entries leave them out.
    fields = {"name": name, **{k: v for k, v in reader.fields.items() if _OPTIONAL_DEFAULTS.get(k, _ABSENT) != v}}
    if seq_length is not None:
        fields["seq_length"] = seq_length
        reader.keys.pop("seq_length", None)
    try:
        model_spec_from_dict(fields)
    except SpecError as error:
        field = error.field.split(".", 1)[1] if error.field.startswith("model.") else ""
        key = reader.keys.get(field)
        raise SpecError(reader.where(key) if key else path, error.reason) from None
    keys = {field: reader.where(key) for field, key in reader.keys.items()}
    return Converted(str(model_type), fields, tuple(reader.notes), keys)
