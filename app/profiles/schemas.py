"""Schemas of /v1/profiles.

The request body is a ``partitura-profile/1`` document. Its models below document the format
for OpenAPI but accept any value: ``solver.io.profile_format.parse_profile_document`` validates it (one
source of truth for the format, shared with the CLI), so a bad field is reported the same way
everywhere, ``body.layers[3].forward_s``.
"""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.catalog.schemas import StoredModelSpec

# A two-layer model measured on a CPU (shortened from `partitura profile`'s output).
PROFILE_EXAMPLE: dict[str, Any] = {
    "format": "partitura-profile/1",
    "model": {
        "name": "tiny-gpt", "num_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
        "vocab_size": 512, "seq_length": 64,
    },
    "device": "NVIDIA H100 80GB HBM3",
    "precision": "bf16",
    "micro_batch_size": 4,
    "seq_length": 64,
    "tp_size": 1,
    "layers": [
        {"name": "embedding", "kind": "embedding", "forward_s": 2.1e-05, "backward_s": 7.3e-05,
         "activation_bytes": 2048, "output_bytes": 65536, "parameter_count": 73728},
        {"name": "layer.0", "kind": "transformer", "forward_s": 9.0e-04, "backward_s": 2.7e-03,
         "activation_bytes": 1054720, "selective_activation_bytes": 1050624, "output_bytes": 65536,
         "parameter_count": 198272, "selective_recompute_s": 1.9e-04},
        {"name": "layer.1", "kind": "transformer", "forward_s": 9.1e-04, "backward_s": 2.8e-03,
         "activation_bytes": 1054720, "selective_activation_bytes": 1050624, "output_bytes": 65536,
         "parameter_count": 198272, "selective_recompute_s": 1.9e-04},
        {"name": "head", "kind": "head", "forward_s": 2.0e-04, "backward_s": 3.3e-04,
         "activation_bytes": 658436, "output_bytes": 0, "parameter_count": 65792},
    ],
}


class ProfileLayerIn(BaseModel):
    """One layer for one micro-batch on one GPU of the TP group (see solver.io.profile_format)."""

    model_config = ConfigDict(extra="allow")

    name: Any = Field(None, description="unique layer name (embedding, layer.0, ..., head)")
    kind: Any = Field(None, description="embedding, transformer or head; in that order")
    forward_s: Any = Field(None, description="forward time, seconds (required)")
    backward_s: Any = Field(None, description="backward time, seconds (required)")
    activation_bytes: Any = Field(None, description="bytes kept for backward (required)")
    output_bytes: Any = Field(None, description="bytes sent to the next layer (required)")
    parameter_count: Any = Field(None, description="parameters on this GPU (or parameter_bytes, 2 per parameter)")
    parameter_bytes: Any = Field(None, description="16-bit parameter bytes on this GPU")
    selective_activation_bytes: Any = Field(None, description="kept under selective recompute (default: activation_bytes)")
    checkpoint_bytes: Any = Field(None, description="kept under full recompute (default: the layer's input)")
    selective_recompute_s: Any = Field(None, description="attention-core forward time, seconds (optional)")
    tp_comm_s: Any = Field(None, description="tensor-parallel communication, seconds (optional)")
    model_flops: Any = Field(None, description="useful FLOPs of forward + backward (optional)")
    origin: Any = Field(None, description="measured (default), derived or analytic")


class ProfileDocumentIn(BaseModel):
    """A ``partitura-profile/1`` document, as ``partitura profile`` writes it."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [PROFILE_EXAMPLE]})

    format: Any = Field(None, description='"partitura-profile/1"')
    model: Any = Field(None, description="the model spec (as in the catalog)")
    device: Any = Field(None, description="the device as the framework names it")
    precision: Any = Field(None, description="bf16, fp16 or fp8")
    micro_batch_size: Any = Field(None, description="micro-batch size measured at")
    seq_length: Any = Field(None, description="sequence length measured at")
    tp_size: Any = Field(None, description="tensor-parallel size whose one-GPU share was measured")
    sequence_parallel: Any = Field(None, description="measured with sequence parallelism (default false)")
    flash_attention: Any = Field(None, description="measured with a fused attention kernel (default true)")
    source: Any = Field(None, description="what produced the document (free text)")
    measurement: Any = Field(None, description="how it was measured: plain values (warmup, repeats, timer, ...)")
    notes: Any = Field(None, description="list of strings")
    layers: list[ProfileLayerIn] | Any = Field(None, description="embedding, transformer layers, head")

    def document(self) -> dict[str, Any]:
        """The document exactly as the client sent it (unset fields stay absent)."""
        return self.model_dump(exclude_unset=True)


class ProfileLayerOut(BaseModel):
    """One layer of a stored profile, with the defaults the planner uses filled in."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: str = Field(description="embedding, transformer or head")
    forward_s: float
    backward_s: float
    selective_recompute_s: float = Field(description="attention-core forward time, seconds (0: not measured)")
    tp_comm_s: float = Field(description="tensor-parallel communication, seconds")
    activation_bytes: int = Field(description="bytes kept for backward")
    selective_activation_bytes: int = Field(description="bytes kept under selective recompute")
    checkpoint_bytes: int = Field(description="bytes kept under full recompute")
    output_bytes: int = Field(description="bytes sent to the next layer")
    parameter_count: int = Field(description="parameters on this GPU")
    parameter_bytes: int = Field(description="16-bit parameter bytes on this GPU")
    model_flops: float = Field(description="useful FLOPs of forward + backward (0: unknown)")
    origin: str = Field(description="measured, derived or analytic")


class ProfileDocumentOut(BaseModel):
    """A stored ``partitura-profile/1`` document, normalised: every default spelled out."""

    model_config = ConfigDict(extra="forbid")

    format: str = Field(description='"partitura-profile/1"')
    model: StoredModelSpec
    device: str = Field(description="the device as the framework names it")
    precision: str
    micro_batch_size: int
    seq_length: int
    tp_size: int = Field(description="tensor-parallel size whose one-GPU share was measured")
    sequence_parallel: bool
    flash_attention: bool
    source: str = Field(description="what produced the document (free text)")
    measurement: dict[str, bool | int | float | str] = Field(
        description="how it was measured: plain values (warmup, repeats, timer, ...)"
    )
    notes: list[str]
    layers: list[ProfileLayerOut] = Field(description="embedding, transformer layers, head")


# defer_build=True: a model that answering a plan never uses builds its schema when first used,
# not when `partitura plan` imports this module (bench/cli.py, issue 17).
class ProfileSummary(BaseModel):
    """What a profile was measured on and at; ``num_layers`` counts transformer layers."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    id: str
    created_at: datetime
    model_name: str
    device: str
    precision: str
    micro_batch_size: int
    seq_length: int
    tp_size: int
    num_layers: int


class Profile(ProfileSummary):
    """A stored profile with its normalised document (defaults filled in)."""

    model_config = ConfigDict(defer_build=True)

    document: ProfileDocumentOut


class ProfileList(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")

    items: list[ProfileSummary]
    next_cursor: str | None = None
