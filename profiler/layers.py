"""One GPU's share of each layer of a ModelSpec, as PyTorch modules.

Under Megatron-style tensor parallelism (Shoeybi et al. 2019, Sec 3) a GPU holds 1/tp_size of
the attention heads, of the MLP's inner width and of the vocabulary; the collectives that join
the shares are not run here (one GPU cannot measure them; ``solver.cost.derive.derive_profile``
takes them from the analytic model). The blocks are pre-norm: LayerNorm with biases and a GELU
MLP for GPT/BERT/OPT-style specs, RMSNorm without biases and a SwiGLU MLP for Llama-style specs
(Touvron et al. 2023), LayerNorm without linear biases and a squared-ReLU MLP for Nemotron-style
specs (arXiv 2402.16819). Rotary embeddings (Su et al. 2021) are applied to q and k when the spec
has no learned positions (ALiBi models are timed with rotary: both are element-wise on q/k or the
scores, and flash kernels take neither as a materialised bias). Dropout is left out (modern
pre-training runs without it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from solver.spec.errors import SpecError
from solver.spec.model import Architecture, MlpActivation, ModelSpec, PositionEmbedding


@dataclass(frozen=True)
class ShardShape:
    """Widths of one GPU's share of a layer at ``tp_size``."""

    hidden_size: int
    head_dim: int
    num_heads: int  # attention heads on this GPU
    num_kv_heads: int  # K/V heads on this GPU (replicated when num_kv_heads < tp_size, as Megatron does)
    ffn_hidden_size: int
    vocab_size: int

    @staticmethod
    def of(model: ModelSpec, tp_size: int) -> "ShardShape":
        if tp_size < 1 or model.num_attention_heads % tp_size:
            raise SpecError("tp_size", f"{tp_size} does not divide num_attention_heads={model.num_attention_heads}")
        return ShardShape(
            hidden_size=model.hidden_size,
            head_dim=model.head_width,
            num_heads=model.num_attention_heads // tp_size,
            num_kv_heads=max(1, model.num_kv_heads // tp_size),
            ffn_hidden_size=math.ceil(model.ffn_hidden_size / tp_size),
            vocab_size=math.ceil(model.vocab_size / tp_size),
        )


def _norm(model: ModelSpec) -> nn.Module:
    if not model.norm_biases:
        return nn.RMSNorm(model.hidden_size, eps=1e-5)
    return nn.LayerNorm(model.hidden_size, eps=1e-5)


def _rotary_tables(seq_length: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoFormer's rotation angles, [seq_length, head_dim] (Su et al. 2021, Eq. 34)."""
    inverse_frequency = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_length, dtype=torch.float32), inverse_frequency)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


def attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, flash: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v for [batch, heads, seq, head_dim] inputs (k/v may have fewer heads).

    ``flash`` uses PyTorch's fused scaled-dot-product attention (the score matrix stays on chip,
    Dao et al. 2022); otherwise scores, mask and softmax are materialised as in Megatron-LM
    before flash attention (Korthikanti et al. 2022, Sec 4.1).
    """
    groups = q.shape[1] // k.shape[1]
    if flash:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=groups > 1)
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        seq = q.shape[-2]
        mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


class EmbeddingLayer(nn.Module):
    """Token embedding (this GPU's vocabulary share) plus learned positions when the spec has them."""

    def __init__(self, model: ModelSpec, shard: ShardShape) -> None:
        super().__init__()
        self.word = nn.Embedding(shard.vocab_size, shard.hidden_size)
        learned = model.position_embedding is PositionEmbedding.LEARNED
        # The whole position table (model.seq_length rows) is held even when fewer are used.
        self.position = nn.Embedding(model.seq_length, shard.hidden_size) if learned else None

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        out = self.word(token_ids)
        if self.position is not None:
            out = out + self.position.weight[: token_ids.shape[1]]
        return out


class TransformerBlock(nn.Module):
    """Pre-norm attention + MLP block, one GPU's share. ``selective`` checkpoints the attention core.

    With ``selective`` the core runs under reentrant activation checkpointing, which keeps only
    q, k and v for backward (Korthikanti et al. 2022 selective recomputation).
    """

    def __init__(self, model: ModelSpec, shard: ShardShape, seq_length: int, flash_attention: bool) -> None:
        super().__init__()
        bias = model.linear_biases
        self.shard = shard
        self.causal = model.architecture is Architecture.DECODER
        self.flash = flash_attention
        self.selective = False
        q_width = shard.num_heads * shard.head_dim
        kv_width = shard.num_kv_heads * shard.head_dim
        self.split = (q_width, kv_width, kv_width)
        self.norm1 = _norm(model)
        self.qkv = nn.Linear(shard.hidden_size, q_width + 2 * kv_width, bias=bias)
        self.proj = nn.Linear(q_width, shard.hidden_size, bias=bias)
        self.norm2 = _norm(model)
        self.swiglu = model.mlp_activation is MlpActivation.SWIGLU
        self.squared_relu = model.mlp_activation is MlpActivation.SQUARED_RELU
        # SwiGLU's gate and up projections are one fused GEMM, as in Megatron-LM.
        up_width = (2 if self.swiglu else 1) * shard.ffn_hidden_size
        self.up = nn.Linear(shard.hidden_size, up_width, bias=bias)
        self.down = nn.Linear(shard.ffn_hidden_size, shard.hidden_size, bias=bias)
        self.rotary = model.position_embedding is PositionEmbedding.NONE
        if self.rotary:
            cos, sin = _rotary_tables(seq_length, shard.head_dim)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as [batch, heads, seq, head_dim] from the block input (after norm1)."""
        batch, seq, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(self.split, dim=-1)
        d = self.shard.head_dim
        q = q.view(batch, seq, -1, d).transpose(1, 2)
        k = k.view(batch, seq, -1, d).transpose(1, 2)
        v = v.view(batch, seq, -1, d).transpose(1, 2)
        if self.rotary:
            cos, sin = self.cos[:seq].to(x.dtype), self.sin[:seq].to(x.dtype)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        return q, k, v

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return attention_core(q, k, v, self.causal, self.flash)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q, k, v = self.qkv_heads(x)
        if self.selective:
            context = checkpoint(self.core, q, k, v, use_reentrant=True)
        else:
            context = self.core(q, k, v)
        x = x + self.proj(context.transpose(1, 2).reshape(batch, seq, -1))
        hidden = self.up(self.norm2(x))
        if self.swiglu:
            gate, up = hidden.chunk(2, dim=-1)
            hidden = F.silu(gate) * up
        elif self.squared_relu:
            hidden = torch.square(F.relu(hidden))  # Megatron-core's squared_relu: relu(x)^2
        else:
            hidden = F.gelu(hidden, approximate="tanh")
        return x + self.down(hidden)


class HeadLayer(nn.Module):
    """Final norm, logits over this GPU's vocabulary share, and the cross-entropy loss in fp32.

    Encoder (BERT) specs add the masked-LM transform (dense + GELU + LayerNorm, Devlin et al.
    2018). With tied embeddings the projection is the embedding matrix; the last pipeline stage
    holds its own copy of it (Megatron-LM), so it is counted here as well.
    """

    def __init__(self, model: ModelSpec, shard: ShardShape) -> None:
        super().__init__()
        self.norm = _norm(model)
        self.transform = None
        if model.architecture is Architecture.ENCODER:
            self.transform = nn.Sequential(
                nn.Linear(shard.hidden_size, shard.hidden_size), nn.GELU(), nn.LayerNorm(shard.hidden_size)
            )
        self.logits = nn.Linear(shard.hidden_size, shard.vocab_size, bias=False)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        if self.transform is not None:
            x = self.transform(x)
        logits = self.logits(x)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))
