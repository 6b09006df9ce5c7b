"""What the model is: a transformer described by its shape, independent of hardware and split."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from solver.spec.errors import SpecError, check_positive_int


def is_probability(value: object) -> bool:
    """A dropout probability: a number (not a bool) at least 0 and below 1."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value < 1


class MlpActivation(str, Enum):
    """The MLP's activation, and with it the layer style the cost model counts (``ModelSpec.linear_biases``,
    ``ModelSpec.norm_biases``)."""

    GELU = "gelu"  # two GEMMs: h -> ffn -> h; GPT/BERT-style: biased projections, LayerNorm
    SWIGLU = "swiglu"  # three GEMMs: gate and up h -> ffn, down ffn -> h; Llama-style: no biases, RMSNorm
    # relu(x)^2 (So et al. 2021, Primer, arXiv 2109.08668): two GEMMs h -> ffn -> h, as GELU's.
    # Nemotron-style: no biases (Nemotron-4 15B report, arXiv 2402.16819 Sec 2), LayerNorm
    # (NeMo-Framework-Launcher's Nemotron configs: normalization layernorm1p).
    SQUARED_RELU = "squared_relu"


class PositionEmbedding(str, Enum):
    LEARNED = "learned"  # an s x h table of parameters (GPT-2/3, BERT, OPT)
    NONE = "none"  # rotary or ALiBi: no parameters


class Router(str, Enum):
    """How a mixture-of-experts layer picks each token's experts (the cost model treats both alike:
    an h x num_experts GEMM and a top-k)."""

    SOFTMAX_TOPK = "softmax_topk"  # softmax over expert logits, top-k (Switch, GShard, Mixtral, Qwen-MoE)
    SIGMOID_TOPK = "sigmoid_topk"  # sigmoid affinities, top-k, bias-adjusted balancing (DeepSeek-V3 Sec 2.1.2)


class Architecture(str, Enum):
    DECODER = "decoder"  # GPT, Llama: causal LM head over the vocabulary
    ENCODER = "encoder"  # BERT: masked-LM head over the vocabulary


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a transformer language model.

    ``num_kv_heads`` below ``num_attention_heads`` means grouped-query attention;
    ``ffn_hidden_size`` is the inner width of the MLP (4h for GPT-style GELU MLPs).

    Mixture of experts: ``num_experts`` above 1 replaces the MLP of the MoE layers by that many
    routed experts of inner width ``moe_ffn_hidden_size`` (default ``ffn_hidden_size``), of which
    each token uses ``experts_per_token`` (top-k), plus ``num_shared_experts`` experts of the same
    width that every token uses (DeepSeekMoE, Dai et al. 2024; Qwen-MoE). The first
    ``first_dense_layers`` layers keep a dense MLP of ``ffn_hidden_size`` (DeepSeek-V3: 3); after
    them every ``moe_layer_interval``-th layer is an MoE layer (1: all of them; Llama 4 Maverick
    alternates, 2: layers first_dense + 1, + 3, ..., as Hugging Face's ``interleave_moe_layer_step``).
    ``num_experts`` 0 (the default) or 1 is a dense model and takes none of the other MoE fields.
    Group-limited routing (DeepSeek-V3 Sec 2.1.2, "node-limited routing"; Megatron-core
    ``--moe-router-num-groups`` / ``--moe-router-group-topk``, Hugging Face ``n_group`` /
    ``topk_group``): the experts form ``router_groups`` equal groups and a token picks its top-k
    experts within its top ``router_group_topk`` groups (0: no limit; DeepSeek-V3: 8 and 4). It
    changes which nodes a token's copies travel to (``solver.cost.moe.remote_domain_copies``).

    Multi-head latent attention (DeepSeek-V2 Sec 2.1, DeepSeek-V3 Sec 2.1.1): ``kv_lora_rank``
    above 0 compresses K and V through a rank-``kv_lora_rank`` latent (and Q through
    ``q_lora_rank`` when above 0); each head has a ``qk_head_dim`` + ``qk_rope_head_dim`` query and
    key and a ``v_head_dim`` value. It changes the attention's weights and FLOPs, its projection
    GEMMs, the width its heads score and weigh with, and the K and V kept (``solver.cost.mla``).

    Multi-token prediction (DeepSeek-V3 Sec 2.2, arXiv 2412.19437): ``mtp_num_layers`` modules
    after the last layer, each predicting one token further: the embedding of the shifted tokens
    and the previous depth's hidden state, each RMS-normalised, concatenated and projected from
    2h to h, one transformer layer (the kind layer ``num_layers`` would be), a final norm, and the
    model's output head and loss again (DeepSeek-V3: 1; Megatron-core ``mtp_num_layers``). They
    train beside the main model and are dropped for inference, so the parameter counts
    (``solver.cost.flops.total_parameter_count``, 671B) leave them out and
    ``flops.mtp_parameter_count`` counts them (11.5B).

    Dropout: ``hidden_dropout`` is the probability of the dropouts on the hidden stream (the
    embedding's output and the two residual branches of each layer: Megatron-LM's
    ``--hidden-dropout``, Hugging Face's ``hidden_dropout`` / ``resid_pdrop``), ``attention_dropout``
    that of the attention probabilities (``--attention-dropout``, ``attention_dropout`` /
    ``attn_pdrop``). Both default to 0.1, Megatron-LM's defaults (megatron/training/arguments.py
    ``_add_regularization_args``: ``--attention-dropout`` and ``--hidden-dropout``, default=0.1).
    At 0 the frameworks run no dropout: ATen's ``dropout`` takes the fused kernel only for
    0 < p < 1 and ``_dropout_impl`` returns its input when p == 0 (aten/src/ATen/native/Dropout.cpp),
    so no mask is kept (``solver.cost.analytic``: except the hidden masks of a TorchScript
    bias-dropout-add, ``TrainingSpec.jit_dropout_masks``). The dropout kernels' time is still
    charged at p = 0 (docs/cost_model.md, the dropout row).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    seq_length: int
    # None (the default) is filled in by __post_init__: num_attention_heads, and 4 * hidden_size.
    num_kv_heads: int = None  # type: ignore[assignment]
    ffn_hidden_size: int = None  # type: ignore[assignment]
    mlp_activation: MlpActivation = MlpActivation.GELU
    tied_embeddings: bool = True
    architecture: Architecture = Architecture.DECODER
    position_embedding: PositionEmbedding = PositionEmbedding.LEARNED
    # Mixture of experts (all at their defaults: a dense model).
    num_experts: int = 0
    experts_per_token: int = 0  # top-k; required (>= 1) when num_experts > 1
    moe_ffn_hidden_size: int = None  # type: ignore[assignment]  # None: ffn_hidden_size (MoE models)
    num_shared_experts: int = 0
    first_dense_layers: int = 0
    moe_layer_interval: int = 1
    router: Router = Router.SOFTMAX_TOPK
    router_groups: int = 0  # group-limited routing: the expert groups (0: none)
    router_group_topk: int = 0  # the groups each token may use (0: none)
    # Multi-head latent attention (all 0: standard multi-head / grouped-query attention).
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # Multi-token prediction modules trained beside the model (0: none).
    mtp_num_layers: int = 0
    # Width of each attention head where it is not hidden_size / num_attention_heads (Qwen3-30B-A3B:
    # 32 heads of 128 on hidden 2048; Megatron's --kv-channels, Hugging Face's head_dim). None: that
    # quotient. Q and the attention output are num_attention_heads x head_dim wide, K and V
    # num_kv_heads x head_dim; the residual stream stays hidden_size.
    head_dim: int | None = None
    # Sliding-window (local) attention: each query attends to the ``sliding_window`` tokens before
    # it (0: full attention) in a share ``sliding_window_fraction`` of the layers, the rest attending
    # in full (Mistral 7B v0.1: 4096 in every layer; Gemma 2 and gpt-oss: every other layer, 1/2;
    # Gemma 3: five local layers to one global, 5/6).
    sliding_window: int = 0
    sliding_window_fraction: float = 1.0
    # Dropout probabilities in training (0: none; see the docstring). Megatron-LM's defaults.
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1

    def __post_init__(self) -> None:
        for field in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length"):
            check_positive_int(f"model.{field}", getattr(self, field))
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_attention_heads)
        if self.ffn_hidden_size is None:
            object.__setattr__(self, "ffn_hidden_size", 4 * self.hidden_size)
        for field in ("num_kv_heads", "ffn_hidden_size"):
            check_positive_int(f"model.{field}", getattr(self, field))
        if self.head_dim is not None:
            check_positive_int("model.head_dim", self.head_dim)
            if self.head_dim * self.num_attention_heads == self.hidden_size:
                object.__setattr__(self, "head_dim", None)  # the default, held as None so equal models compare equal
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise SpecError(
                "model.hidden_size",
                f"{self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads} (give head_dim)",
            )
        if self.num_attention_heads % self.num_kv_heads:
            raise SpecError(
                "model.num_kv_heads",
                f"num_attention_heads={self.num_attention_heads} is not a multiple of num_kv_heads={self.num_kv_heads}",
            )
        try:
            object.__setattr__(self, "mlp_activation", MlpActivation(self.mlp_activation))
        except ValueError:
            raise SpecError(
                "model.mlp_activation", f"must be one of {', '.join(a.value for a in MlpActivation)}, got {self.mlp_activation!r}"
            ) from None
        object.__setattr__(self, "architecture", Architecture(self.architecture))
        object.__setattr__(self, "position_embedding", PositionEmbedding(self.position_embedding))
        self._check_experts()
        self._check_latent_attention()
        self._check_sliding_window()
        if self.head_dim is not None and self.is_mla:
            raise SpecError("model.head_dim", "latent attention sizes its heads with qk_head_dim, qk_rope_head_dim and v_head_dim")
        value = self.mtp_num_layers
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise SpecError("model.mtp_num_layers", f"must be a non-negative integer, got {value!r}")
        if value and self.architecture is not Architecture.DECODER:
            raise SpecError("model.mtp_num_layers", "multi-token prediction needs a decoder (it predicts further next tokens)")
        for field in ("hidden_dropout", "attention_dropout"):
            value = getattr(self, field)
            if not is_probability(value):
                raise SpecError(f"model.{field}", f"must be a probability at least 0 and below 1, got {value!r}")
            object.__setattr__(self, field, float(value))

    def _check_latent_attention(self) -> None:
        """MLA's fields: non-negative; with kv_lora_rank > 0 the head widths are required, without
        it every MLA field stays 0."""
        fields = ("kv_lora_rank", "q_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim")
        for field in fields:
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecError(f"model.{field}", f"must be a non-negative integer, got {value!r}")
        if not self.is_mla:
            for field in fields[1:]:
                if getattr(self, field):
                    raise SpecError(f"model.{field}", "is a multi-head latent attention field: needs kv_lora_rank > 0")
            return
        for field in ("qk_head_dim", "v_head_dim"):
            if getattr(self, field) < 1:
                raise SpecError(f"model.{field}", "must be a positive integer with multi-head latent attention (kv_lora_rank > 0)")

    @property
    def is_mla(self) -> bool:
        """Whether attention is multi-head latent attention (kv_lora_rank above 0)."""
        return self.kv_lora_rank > 0

    def _check_experts(self) -> None:
        """The mixture-of-experts fields: all at their defaults for a dense model; for an MoE
        model top-k in 1..num_experts, positive widths and counts, and at least one MoE layer."""
        for field in ("num_experts", "experts_per_token", "num_shared_experts", "first_dense_layers", "router_groups", "router_group_topk"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecError(f"model.{field}", f"must be a non-negative integer, got {value!r}")
        try:
            object.__setattr__(self, "router", Router(self.router))
        except ValueError:
            raise SpecError("model.router", f"must be one of {', '.join(r.value for r in Router)}, got {self.router!r}") from None
        if not self.is_moe:
            for field, dense in (
                ("experts_per_token", 0), ("moe_ffn_hidden_size", None), ("num_shared_experts", 0),
                ("first_dense_layers", 0), ("moe_layer_interval", 1), ("router_groups", 0), ("router_group_topk", 0),
            ):
                if getattr(self, field) != dense:
                    raise SpecError(f"model.{field}", f"is a mixture-of-experts field: needs num_experts > 1, got num_experts={self.num_experts}")
            return
        if self.moe_ffn_hidden_size is None:
            object.__setattr__(self, "moe_ffn_hidden_size", self.ffn_hidden_size)
        for field in ("moe_ffn_hidden_size", "moe_layer_interval"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"model.{field}", f"must be a positive integer, got {value!r}")
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise SpecError(
                "model.experts_per_token",
                f"must be between 1 and num_experts={self.num_experts} (each token's top-k experts), got {self.experts_per_token}",
            )
        self._check_router_groups()
        if self.num_moe_layers < 1:
            raise SpecError(
                "model.first_dense_layers",
                f"{self.first_dense_layers} dense layers and moe_layer_interval {self.moe_layer_interval} leave no MoE layer"
                f" among num_layers={self.num_layers}",
            )

    def _check_router_groups(self) -> None:
        """Group-limited routing, as Megatron-core's TransformerConfig checks it: the groups divide
        the experts and the chosen groups are at most all of them and hold the top-k; one group
        (Kimi K2's n_group 1) is no limit, held as 0."""
        groups, topk = self.router_groups, self.router_group_topk
        if groups <= 1:
            if topk > 1:
                raise SpecError("model.router_group_topk", f"needs router_groups > 1, got router_groups={groups}")
            object.__setattr__(self, "router_groups", 0)
            object.__setattr__(self, "router_group_topk", 0)
            return
        if self.num_experts % groups:
            raise SpecError("model.router_groups", f"must divide num_experts={self.num_experts}, got {groups}")
        if not 1 <= topk <= groups:
            raise SpecError("model.router_group_topk", f"must be between 1 and router_groups={groups}, got {topk}")
        if topk * (self.num_experts // groups) < self.experts_per_token:
            raise SpecError(
                "model.router_group_topk",
                f"{topk} groups of {self.num_experts // groups} experts cannot hold the top {self.experts_per_token}",
            )

    @property
    def is_moe(self) -> bool:
        """Whether some layers route tokens to experts (num_experts above 1)."""
        return self.num_experts > 1

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) has experts: past the first dense layers, every
        ``moe_layer_interval``-th one (see the class docstring)."""
        if not self.is_moe or index < self.first_dense_layers:
            return False
        return (index - self.first_dense_layers + 1) % self.moe_layer_interval == 0

    @property
    def num_moe_layers(self) -> int:
        if not self.is_moe:
            return 0
        return max(0, self.num_layers - self.first_dense_layers) // self.moe_layer_interval

    def _check_sliding_window(self) -> None:
        window, fraction = self.sliding_window, self.sliding_window_fraction
        if not isinstance(window, int) or isinstance(window, bool) or window < 0:
            raise SpecError("model.sliding_window", f"must be a non-negative integer (tokens; 0: full attention), got {window!r}")
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise SpecError("model.sliding_window_fraction", f"must be a share of the layers in (0, 1], got {fraction!r}")
        if window and self.architecture is not Architecture.DECODER:
            raise SpecError("model.sliding_window", "a sliding window needs a causal decoder")

    def causal_score_fraction(self, seq_length: int) -> float:
        """Share of the s x s attention scores a causal fused kernel computes, averaged over the
        layers: half for full causal attention (FlashAttention skips the blocks above the
        diagonal); with a window of w < s tokens, sum over queries of min(i, w) / s^2 =
        w/s - w(w - 1)/(2 s^2) for the layers that use it. 1 for an encoder."""
        if self.architecture is not Architecture.DECODER:
            return 1.0
        full = 0.5
        w, s = self.sliding_window, seq_length
        if not w or w >= s:
            return full
        local = w / s - w * (w - 1) / (2 * s * s)
        return self.sliding_window_fraction * local + (1 - self.sliding_window_fraction) * full

    @property
    def head_width(self) -> int:
        """Width of each attention head: ``head_dim``, or hidden_size / num_attention_heads."""
        return self.hidden_size // self.num_attention_heads if self.head_dim is None else self.head_dim

    @property
    def q_width(self) -> int:
        """Width of the queries and of the attention output (the output projection's input):
        num_attention_heads x head width, hidden_size unless ``head_dim`` says otherwise."""
        return self.num_attention_heads * self.head_width

    @property
    def qk_head_width(self) -> int:
        """Width of each head's query and key: head_dim, or MLA's d_qk + d_rope (DeepSeek-V3: 192)."""
        return self.qk_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_width

    @property
    def v_head_width(self) -> int:
        """Width of each head's value: head_dim, or MLA's d_v (DeepSeek-V3: 128)."""
        return self.v_head_dim if self.is_mla else self.head_width

    @property
    def kv_hidden_size(self) -> int:
        """Width of the K and V projections (equal to hidden_size without GQA)."""
        return self.num_kv_heads * self.head_width

    @property
    def linear_biases(self) -> bool:
        """Whether the projections carry biases: GPT/BERT-style GELU layers do; Llama-style SwiGLU
        layers (Touvron et al. 2023) and Nemotron's squared-ReLU layers do not (Nemotron-4 15B
        report, arXiv 2402.16819 Sec 2: 'no bias terms'; NeMo-Framework-Launcher's Nemotron
        configs: ``bias: false``)."""
        return self.mlp_activation is MlpActivation.GELU

    @property
    def norm_biases(self) -> bool:
        """Whether the norms are LayerNorms with a weight and a bias (GELU; squared ReLU: NeMo's
        Nemotron configs set ``normalization: layernorm1p``, a LayerNorm with zero-centred gamma)
        rather than RMSNorm's scale alone (SwiGLU)."""
        return self.mlp_activation is not MlpActivation.SWIGLU

    @property
    def mlp_gemm_count(self) -> int:
        """How many h x ffn weight matrices the MLP has."""
        return 3 if self.mlp_activation is MlpActivation.SWIGLU else 2
