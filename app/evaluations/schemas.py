"""Schemas of /v1/evaluations, and the training and parallel settings plans share."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.catalog.schemas import ClusterSpecIn, ModelSpecIn
from app.core.types import NonNegativeInt, PositiveFloat, PositiveInt, Size


class Training(BaseModel):
    """Training settings. ``train_tokens`` enables ``time_to_train_s``."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"global_batch_size": 512, "seq_length": 2048, "precision": "bf16", "optimizer": "adam", "train_tokens": 3e11}
            ]
        },
    )

    global_batch_size: Size
    seq_length: Size
    precision: Literal["fp16", "bf16", "fp8"] = "bf16"
    optimizer: Literal["adam", "sgd"] = "adam"
    train_tokens: PositiveFloat | None = None
    flash_attention: bool = True
    # False: the framework reduces data-parallel gradients only after the backward pass ends
    # (Megatron-LM's local DDP, DeepSpeed's pipeline engine) instead of overlapping them with it.
    overlap_grad_reduce: bool = True
    # False: element-wise work runs as one eager PyTorch kernel per operation (Hugging Face or
    # DeepLearningExamples style model code) instead of Megatron-style fused kernels.
    fused_kernels: bool = True


class Parallel(BaseModel):
    """One way to split the job: data x tensor x pipeline parallel degrees and memory savers."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "dp_size": 2, "tp_size": 4, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 2,
                    "recompute": "selective", "virtual_stages": 1, "sequence_parallel": True,
                }
            ]
        },
    )

    dp_size: PositiveInt = 1
    tp_size: PositiveInt = 1
    pp_size: PositiveInt = 1
    zero_stage: Annotated[int, Field(strict=True, ge=0, le=3)] = 0
    micro_batch_size: PositiveInt = 1
    recompute: Literal["none", "selective", "full"] = "none"
    virtual_stages: PositiveInt = 1
    sequence_parallel: bool = False
    # Layers per pipeline chunk (pp_size x virtual_stages entries); null: the uniform split.
    stage_layers: list[NonNegativeInt] | None = None
    # Per chunk, how many of its layers are fully recomputed; null: all follow ``recompute``.
    full_recompute_layers: list[NonNegativeInt] | None = None


EVALUATION_EXAMPLE = {
    "model": "gpt3-1.3b",
    "cluster": "dgx-a100-80gb-x1",
    "num_gpus": 8,
    "training": {"global_batch_size": 512, "seq_length": 2048, "precision": "bf16", "optimizer": "adam", "train_tokens": 3e11},
    "parallel": {
        "dp_size": 2, "tp_size": 4, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 2,
        "recompute": "selective", "virtual_stages": 1, "sequence_parallel": True,
    },
}


class EvaluationRequest(BaseModel):
    """Evaluate one configuration, no search. ``model`` and ``cluster`` are catalog names
    (built-in or custom) or inline specs; ``num_gpus`` defaults to every GPU of the cluster."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [EVALUATION_EXAMPLE]})

    model: str | ModelSpecIn
    cluster: str | ClusterSpecIn
    num_gpus: PositiveInt | None = None
    training: Training
    parallel: Parallel
    profile_id: str | None = Field(
        None, description="a measured profile (POST /v1/profiles) to predict from instead of the analytic model"
    )


class Prediction(BaseModel):
    model_config = ConfigDict(extra="allow")

    step_time_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    time_to_train_s: float | None = None
    breakdown_s: dict[str, float]


class Memory(BaseModel):
    model_config = ConfigDict(extra="allow")

    peak_gib: float
    capacity_gib: float
    breakdown_gib: dict[str, float]
    per_stage: list[dict[str, Any]]


class Evaluation(BaseModel):
    """The cost model's verdict. ``prediction`` is null only for a configuration that is not
    even legal (the violations say why)."""

    model_config = ConfigDict(extra="allow")

    feasible: bool
    violations: list[str]
    prediction: Prediction | None
    memory: Memory
    stages: list[dict[str, Any]] = Field(default_factory=list)
