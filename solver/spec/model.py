"""What the model is: a transformer described by its shape, independent of hardware and split."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from solver.spec.errors import SpecError


class MlpActivation(str, Enum):
    GELU = "gelu"  # two GEMMs: h -> ffn -> h
    SWIGLU = "swiglu"  # three GEMMs: gate and up h -> ffn, down ffn -> h


class PositionEmbedding(str, Enum):
    LEARNED = "learned"  # an s x h table of parameters (GPT-2/3, BERT, OPT)
    NONE = "none"  # rotary or ALiBi: no parameters


class Architecture(str, Enum):
    DECODER = "decoder"  # GPT, Llama: causal LM head over the vocabulary
    ENCODER = "encoder"  # BERT: masked-LM head over the vocabulary


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a transformer language model.

    ``num_kv_heads`` below ``num_attention_heads`` means grouped-query attention;
    ``ffn_hidden_size`` is the inner width of the MLP (4h for GPT-style GELU MLPs).
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

    def __post_init__(self) -> None:
        for field in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"model.{field}", f"must be a positive integer, got {value!r}")
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_attention_heads)
        if self.ffn_hidden_size is None:
            object.__setattr__(self, "ffn_hidden_size", 4 * self.hidden_size)
        for field in ("num_kv_heads", "ffn_hidden_size"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"model.{field}", f"must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise SpecError(
                "model.hidden_size",
                f"{self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}",
            )
        if self.num_attention_heads % self.num_kv_heads:
            raise SpecError(
                "model.num_kv_heads",
                f"num_attention_heads={self.num_attention_heads} is not a multiple of num_kv_heads={self.num_kv_heads}",
            )
        object.__setattr__(self, "mlp_activation", MlpActivation(self.mlp_activation))
        object.__setattr__(self, "architecture", Architecture(self.architecture))
        object.__setattr__(self, "position_embedding", PositionEmbedding(self.position_embedding))

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_hidden_size(self) -> int:
        """Width of the K and V projections (equal to hidden_size without GQA)."""
        return self.num_kv_heads * self.head_dim

    @property
    def mlp_gemm_count(self) -> int:
        """How many h x ffn weight matrices the MLP has."""
        return 3 if self.mlp_activation is MlpActivation.SWIGLU else 2
