"""A model of a template's family at a given parameter count.

The family keeps the template's MLP activation, vocabulary, embeddings (tied or not),
architecture, position embedding, the ratio of attention heads to KV heads (shapes whose heads
it divides are preferred) and the MLP's width per hidden unit. What changes is depth and width: heads of ``HEAD_DIM`` (128, as in GPT-3 175B,
Llama 2 and 3) in multiples of ``HEADS_MULTIPLE`` (4: tensor parallel degrees 2 and 4 divide
every shape, and 8 divides those with a multiple of 8 heads, which win ties), and layers chosen
so the parameter count lands on the target. Of the shapes within ``PARAMETER_TOLERANCE`` of the
target, the one whose hidden size per layer is closest to ``HIDDEN_PER_LAYER`` wins (GPT-3
175B: 12288 / 96 = 128; Llama 2 7B: 4096 / 32 = 128; Chinchilla 70B: 8192 / 80 = 102).
"""

from __future__ import annotations

import math
from dataclasses import replace

from solver.cost.flops import total_parameter_count
from solver.spec.model import ModelSpec

HEAD_DIM = 128
HEADS_MULTIPLE = 4
MAX_HEADS = 512  # hidden 65,536: past every published dense model
HIDDEN_PER_LAYER = 128.0
PARAMETER_TOLERANCE = 0.05
# MLP widths are rounded to this multiple (Llama rounds 8/3 h to a multiple of 256).
FFN_MULTIPLE = 256


def _family_member(template: ModelSpec, name: str, num_layers: int, heads: int, seq_length: int) -> ModelSpec:
    hidden = heads * HEAD_DIM
    ffn_ratio = template.ffn_hidden_size / template.hidden_size
    ffn = max(FFN_MULTIPLE, int(round(ffn_ratio * hidden / FFN_MULTIPLE)) * FFN_MULTIPLE)
    group = max(1, template.num_attention_heads // template.num_kv_heads)
    kv_heads = heads // group if heads % group == 0 else heads
    return replace(
        template, name=name, num_layers=num_layers, hidden_size=hidden, num_attention_heads=heads,
        num_kv_heads=kv_heads, ffn_hidden_size=ffn, seq_length=seq_length,
    )


def shape_for(template: ModelSpec, parameters: float, seq_length: int, name: str) -> ModelSpec:
    """The family member of ``template`` closest to ``parameters`` parameters (see the module
    docstring). ValueError below the smallest shape (one layer of ``HEADS_MULTIPLE`` heads)."""
    candidates: list[tuple[tuple, ModelSpec]] = []
    group = max(1, template.num_attention_heads // template.num_kv_heads)
    for heads in range(HEADS_MULTIPLE, MAX_HEADS + 1, HEADS_MULTIPLE):
        one = _family_member(template, name, 1, heads, seq_length)
        two = replace(one, num_layers=2)
        per_layer = total_parameter_count(two) - total_parameter_count(one)
        fixed = total_parameter_count(one) - per_layer
        layers = max(1, round((parameters - fixed) / per_layer))
        model = replace(one, num_layers=layers)
        miss = abs(total_parameter_count(model) / parameters - 1)
        aspect = abs(math.log(model.hidden_size / layers / HIDDEN_PER_LAYER))
        within = miss <= PARAMETER_TOLERANCE
        keeps_groups = heads % group == 0  # the template's query heads per KV head still divide
        candidates.append(((not within, not keeps_groups, aspect if within else miss, heads % 8 != 0, heads), model))
    best_key, best = min(candidates, key=lambda item: item[0])
    if best_key[0] and abs(total_parameter_count(best) / parameters - 1) > 0.5:
        raise ValueError(f"no shape of the {template.name} family has about {parameters:.3g} parameters")
    return best
