"""Schemas of /v1/evaluations, and the training and parallel settings and the cost model's
verdict that plans share."""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from app.catalog.schemas import ClusterSpecIn, ModelSpecIn
from app.core.dimensions import parallel_fields
from app.core.types import (
    LIST_MAX_ITEMS,
    Flag,
    FragmentationFraction,
    HostSeconds,
    NonNegativeInt,
    PositiveInt,
    Reference,
    Size,
    StepCopyBytes,
    SubGroupParams,
    TrainTokens,
    not_given,
)


class Training(BaseModel):
    """Training settings. ``train_tokens`` enables ``time_to_train_s``.

    ``stack`` names the software stack that will run the job (``GET /v1/catalog/stacks``); it sets
    the kernel and overlap facts below, each of which a request may still override. Left out, the
    catalog's default stack is assumed; a stored plan records the stack and every fact it used."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "global_batch_size": 512, "seq_length": 2048, "precision": "bf16", "optimizer": "adam", "train_tokens": 3e11,
                    "stack": "megatron-core-2024",
                }
            ]
        },
    )

    global_batch_size: Size
    seq_length: Size
    precision: Literal["fp16", "bf16", "fp8", "mxfp8", "nvfp4"] = Field(
        "bf16", description="GEMM precision; fp8, mxfp8 and nvfp4 need a GPU with that tensor-core peak (else 422)"
    )
    optimizer: Literal["adam", "sgd", "muon"] = Field(
        "adam",
        description=(
            "adam (fp32 master weights, momentum and variance), sgd (with momentum) or muon (momentum; each weight"
            " matrix's update orthogonalised by Newton-Schulz GEMMs on the GPU, embeddings and the output layer"
            " stepped by Adam, as Megatron-core runs it); muon takes no offload (else 422)"
        ),
    )
    train_tokens: TrainTokens | None = not_given()
    stack: Reference | None = Field(None, description="software stack (catalog name); null: the catalog's default stack")
    # Facts a stack sets; null: the stack's value.
    flash_attention: Flag | None = Field(None, description="fused attention kernel (FlashAttention / cuDNN); null: the stack's")
    # False: the framework reduces data-parallel gradients only after the backward pass ends
    # (Megatron-LM's local DDP, DeepSpeed's pipeline engine) instead of overlapping them with it.
    overlap_grad_reduce: Flag | None = Field(None, description="gradient reduction overlapped with backward; null: the stack's")
    # False: element-wise work runs as one eager PyTorch kernel per operation (Hugging Face or
    # DeepLearningExamples style model code) instead of Megatron-style fused kernels.
    fused_kernels: Flag | None = Field(None, description="fused element-wise kernels; null: the stack's")
    zero3_collectives: Literal["per_layer", "per_tensor"] | None = Field(
        None, description="ZeRO-3 collectives per layer (FSDP, DeepSpeed >= 0.7) or per parameter tensor (DeepSpeed 0.3-0.6); null: the stack's"
    )
    zero3_overlap: Flag | None = Field(None, description="ZeRO-3 gathers prefetched beside compute; null: the stack's")
    tp_comm_overlap: Flag | None = Field(None, description="TP collectives overlapped inside the GEMMs (TE userbuffers); null: the stack's")
    overlap_p2p_comm: Flag | None = Field(None, description="interleaved pipeline p2p overlapped with compute; null: the stack's")
    host_s_per_layer: HostSeconds | None = Field(
        None, description="framework host time per transformer layer and forward pass, s (a layer takes the longer of it and its GPU work); null: the stack's"
    )
    moe_host_s_per_layer: HostSeconds | None = Field(
        None,
        description=(
            "host time per MoE layer and forward pass that the token dispatcher's host synchronisation keeps in step with the GPU, s "
            "(Megatron-core's alltoall dispatcher; each MoE layer pass takes the longer of it and its GPU work); null: the stack's"
        ),
    )
    selective_recompute: Literal["attention", "op"] | None = Field(
        None,
        description=(
            "what recompute 'selective' keeps: attention (Megatron: recompute the attention core) or op "
            "(torchtitan: keep every other matmul's output and the attention kernel's); null: the stack's"
        ),
    )
    grad_reduce: Literal["half", "fp32", "fp32_for_bf16", "fp32_beside_half"] | None = Field(
        None,
        description=(
            "dtype of the gradients held and reduced over data parallelism (fp32_for_bf16: fp32 when parameters are bf16; "
            "fp32_beside_half: DeepSpeed's BF16_Optimizer, the 16-bit gradients beside an fp32 accumulation buffer); null: the stack's"
        ),
    )
    loss_dtype: Literal["fp32", "half"] | None = Field(None, description="dtype the cross entropy computes in; null: the stack's")
    loss_kernel: Literal["fused", "compiled", "eager", "in_place"] | None = Field(
        None,
        description=(
            "how the cross entropy runs: a fused kernel, compiled with the model when fused_kernels, eager, "
            "or in_place (Transformer Engine's, its gradient written into the 16-bit logits); null: the stack's"
        ),
    )
    low_precision_saved_inputs: Flag | None = Field(
        None, description="FP8-family GEMMs keep their inputs for backward in the low-precision copy (Transformer Engine); null: the stack's"
    )
    ep_comm_overlap: Flag | None = Field(
        None, description="MoE dispatch and combine all-to-alls run beside another micro-batch's compute (combined 1F1B, DualPipe); null: the stack's"
    )
    autocast_weights: Flag | None = Field(
        None, description="fp32 parameters under torch.autocast: fp32 gradients and autocast's 16-bit copy of each weight; null: the stack's"
    )
    grad_bucket_copy: Flag | None = Field(
        None, description="PyTorch DDP's all-reduce buckets are a second copy of the gradients (gradient_as_bucket_view off); null: the stack's"
    )
    loss_keeps_logits: Flag | None = Field(
        None, description="the training loop still references the 16-bit logits when backward starts; null: the stack's"
    )
    sp_saved_input: Literal["sharded", "gathered"] | None = Field(
        None,
        description=(
            "under sequence parallelism, a column-parallel GEMM keeps its sequence-sharded input (Megatron: gathered again in backward) "
            "or the all-gathered one (DTensor); null: the stack's"
        ),
    )
    expert_gemms: Literal["grouped", "per_expert"] | None = Field(
        None,
        description=(
            "how a rank's local experts run their GEMMs: one grouped kernel for all of them, or one launch per expert "
            "(Transformer Engine's GroupedLinear, DeepSpeed-MoE's loop; with MXFP8 one quantisation kernel per expert too); null: the stack's"
        ),
    )
    flash_kernel: Literal["fa2", "fa1"] | None = Field(
        None,
        description=(
            "the fused attention kernel's generation where flash_attention is true: fa2 (FlashAttention-2, cuDNN, PyTorch SDPA) "
            "or fa1 (FlashAttention 1.x or its Triton port, twice fa2's time); null: the stack's"
        ),
    )
    step_grad_copy_bytes_per_param: StepCopyBytes | None = Field(
        None,
        description=(
            "bytes per parameter of the gradient copy the optimizer step makes one sub-group at a time (DeepSpeed ZeRO-3: a flat 16-bit "
            "copy and its fp32 cast, 6); null: the stack's"
        ),
    )
    optimizer_sub_group_params: SubGroupParams | None = Field(
        None,
        description="parameters the optimizer steps at a time (DeepSpeed's sub_group_size; 0: the whole local shard); null: the stack's",
    )
    zero_reduce_bucket_params: SubGroupParams | None = Field(
        None,
        description=(
            "DeepSpeed ZeRO-1/2's gradient reduce bucket (reduce_bucket_size, 16-bit elements): ZeRO-1 flattens each bucket into a new "
            "tensor for its reduction after backward, ZeRO-2 holds a contiguous buffer of that size through every backward; 0: none; "
            "null: the stack's"
        ),
    )
    zero_step_norm_copies: Flag | None = Field(
        None,
        description=(
            "the optimizer step checks and measures each gradient through copies (DeepSpeed ZeRO-1/2: an fp32 copy for the overflow "
            "check, then an fp64 one for the norm, of one gradient's partition at a time); null: the stack's"
        ),
    )
    allocator_fragmentation_fraction: FragmentationFraction | None = Field(
        None,
        description=(
            "memory the caching allocator reserves beyond its allocated peak, as a fraction of that peak "
            "(max_memory_reserved / max_memory_allocated - 1, measured on the stack); null: the stack's"
        ),
    )
    kv_head_subsharding: Flag | None = Field(
        None,
        description=(
            "tensor parallelism may be any multiple of the model's KV heads, wider than them: each rank all-gathers the QKV "
            "activations over the TP group and keeps its KV group's slice (Megatron-core 0.16+); false: tp must divide the KV heads; "
            "null: the stack's"
        ),
    )
    fp8_attention: Flag | None = Field(
        None,
        description=(
            "the fused attention kernel runs Q K^T and P V in FP8 (Transformer Engine's fp8_dpa, Megatron-core's "
            "fp8_dot_product_attention, cuDNN FP8 attention); needs precision fp8 or mxfp8 and fused attention; null: the stack's"
        ),
    )
    fp8_output_proj: Flag | None = Field(
        None,
        description=(
            "the output layer's logits GEMM runs in MXFP8 under the recipe's autocast (Megatron-core's fp8_output_proj, "
            "--fp8-output-proj); needs precision mxfp8; null: the stack's"
        ),
    )
    jit_dropout_masks: Flag | None = Field(
        None,
        description=(
            "the hidden dropouts' masks are kept even for a model trained without dropout (a TorchScript bias-dropout-add, whose "
            "autodiff draws and keeps the mask at p = 0: Megatron-LM and Megatron-DeepSpeed before torch.compile); null: the stack's"
        ),
    )
    # Megatron-core's --recompute-modules (solver.spec.training.RecomputeModule): what a selectively
    # recomputed layer recomputes where the stack's selective mode is "attention".
    recompute_modules: list[Literal["core_attn", "mla_up_proj", "layernorm", "mlp", "moe_act"]] | None = Field(
        None, min_length=1, max_length=5,
        description=(
            "submodules selective recomputation recomputes in a Megatron-style stack (megatron-core --recompute-modules); "
            "null: core_attn, megatron-core's default"
        ),
    )
    # Per-job choices beside the stack's facts (solver.spec.training.MomentsDtype, ActInputDtype).
    moments_dtype: Literal["fp32", "bf16"] | None = Field(
        None,
        description=(
            "dtype of the optimizer's moments (Adam's exp_avg and exp_avg_sq), master weights staying fp32: bf16 is "
            "megatron-core's precision-aware optimizer (--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16), as DeepSeek-V3 trained; null: fp32"
        ),
    )
    muon_tp_mode: Literal["duplicated", "blockwise", "distributed"] | None = Field(
        None,
        description=(
            "with optimizer muon, how a tensor-parallel split matrix is orthogonalised (megatron-core --muon-tp-mode):"
            " duplicated gathers the momentum and orthogonalises the whole matrix on every TP rank, blockwise each rank"
            " its own shard (Megatron-Bridge's Muon recipes), distributed the whole matrix from the shards, all-reducing"
            " each iteration's Gram matrix over the TP group; null: duplicated"
        ),
    )
    moe_dispatcher: Literal["alltoall", "flex"] | None = Field(
        None,
        description=(
            "with an MoE model, how tokens reach their experts (megatron-core --moe-token-dispatcher-type): alltoall"
            " sends each routed copy to its expert's rank (NCCL all-to-alls); flex (DeepEP or HybridEP) sends a token"
            " once to each other NVLink domain it is routed to and forwards it over NVLink there; null: alltoall"
        ),
    )
    moe_act_input_dtype: Literal["half", "fp8"] | None = Field(
        None,
        description=(
            "dtype the MoE experts keep their activation function's input (SwiGLU's gate and up) in for backward: fp8 caches an "
            "FP8 copy as DeepSeek-V3 did (arXiv 2412.19437 Sec 3.3.3); null: half, the 16-bit tensor"
        ),
    )
    launch_blocking: Flag | None = Field(
        None,
        description=(
            "the job runs with CUDA_LAUNCH_BLOCKING=1 (as BLOOM-176B did): kernel launches wait for their kernels, so the stack's "
            "host time per layer adds to the GPU's instead of overlapping it; null: false"
        ),
    )


Parallel = create_model(
    "Parallel",
    __doc__="One way to split the job: data x tensor x pipeline x context parallel degrees and memory savers.",
    __config__=ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "dp_size": 2, "tp_size": 4, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 2,
                    "recompute": "selective", "virtual_stages": 1, "sequence_parallel": True,
                }
            ]
        },
    ),
    # The dimensions, from the solver's registry (solver.spec.dimensions).
    **parallel_fields(),
    stage_layers=(
        Annotated[list[NonNegativeInt], Field(max_length=LIST_MAX_ITEMS)] | None,
        Field(None, description="layers per pipeline chunk (pp_size x virtual_stages entries); null: the uniform split"),
    ),
    full_recompute_layers=(
        Annotated[list[NonNegativeInt], Field(max_length=LIST_MAX_ITEMS)] | None,
        Field(None, description="per chunk, how many of its layers are fully recomputed; null: all follow recompute"),
    ),
)


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

    model: Reference | ModelSpecIn
    cluster: Reference | ClusterSpecIn
    num_gpus: PositiveInt | None = None
    training: Training
    parallel: Parallel
    profile_id: Reference | None = Field(
        None, description="a measured profile (POST /v1/profiles) to predict from instead of the analytic model"
    )


class StepBreakdownOut(BaseModel):
    """Where the step time goes, seconds (on the slowest stage where that is what counts)."""

    model_config = ConfigDict(extra="forbid", title="StepBreakdown")

    compute_s: float = Field(description="forward + backward of all micro-batches on the slowest stage")
    recompute_s: float = Field(description="extra forward work of activation recomputation")
    tp_comm_s: float = Field(
        description="tensor / sequence parallel collectives, the exposed context-parallel ring exchange and the MoE dispatch and combine all-to-alls"
    )
    pp_comm_s: float = Field(description="pipeline point-to-point sends on the critical path")
    dp_comm_exposed_s: float = Field(description="data-parallel gradient sync and ZeRO gathers not hidden by compute")
    grad_accumulation_s: float = Field(description="adding each micro-batch's gradients into the fp32 buffer")
    bubble_s: float = Field(description="pipeline fill and drain")
    optimizer_s: float = Field(description="optimizer step over the local shard")


class MemoryBreakdown(BaseModel):
    """Memory of one GPU by kind, GiB."""

    model_config = ConfigDict(extra="forbid")

    weights: float = Field(description="16-bit weights held, GiB")
    gradients: float = Field(description="gradients held, GiB")
    optimizer_states: float = Field(description="optimizer states held (ZeRO shards them), GiB")
    activations: float = Field(description="activations kept for backward, in-flight micro-batches included, GiB")
    embedding_and_logits: float = Field(description="embedding output and logits, GiB")
    zero3_gather_buffers: float = Field(description="ZeRO-3 gathered-weight buffers, GiB")
    optimizer_step_copy: float = Field(
        0.0,
        description=(
            "what the gradients' copy after backward adds beyond the backward's freed memory (the optimizer step's, DeepSpeed "
            "ZeRO: fp32 per sub-group or partition; or the gradient reduce's, DeepSpeed's BF16_Optimizer: a bf16 copy of the "
            "stage's gradients; the larger), GiB; 0 in plans stored before it was costed"
        ),
    )
    reserve: float = Field(description="runtime reserve and allocator fragmentation, GiB")


class PredictionRangeOut(BaseModel):
    """Where the measured figures are expected to fall: the prediction scaled by the measured /
    predicted ratios that held most bench runs of the same stack and GPU generation (``group``;
    'all' when the bench has too few of them). How: docs/cost_model.md, Error bars."""

    model_config = ConfigDict(extra="forbid", title="PredictionRange")

    tokens_per_s_low: float
    tokens_per_s_high: float
    step_time_low_s: float
    step_time_high_s: float
    time_to_train_low_s: float | None
    time_to_train_high_s: float | None
    group: str = Field(description="the bench runs the band comes from: stack/gpu, stack, or all")
    runs: int = Field(description="how many measured runs the band comes from")


class PredictionOut(BaseModel):
    """Predicted speed of one configuration."""

    model_config = ConfigDict(extra="forbid", title="Prediction")

    step_time_s: float = Field(description="one optimizer step")
    tokens_per_s: float = Field(description="training throughput of the whole job")
    samples_per_s: float = Field(description="sequences per second of the whole job")
    model_tflops_per_gpu: float = Field(description="useful model FLOPs per GPU, TFLOP/s")
    hardware_tflops_per_gpu: float = Field(description="executed FLOPs per GPU (recomputation included), TFLOP/s")
    mfu: float = Field(description="model FLOPs utilisation, a fraction of the peak")
    hfu: float = Field(description="hardware FLOPs utilisation, a fraction of the peak")
    time_to_train_s: float | None = Field(description="time to train on train_tokens; null without train_tokens")
    breakdown_s: StepBreakdownOut
    range: PredictionRangeOut | None = Field(None, description="error bars from measured runs; null in plans stored before them")


class StagePeak(BaseModel):
    """One pipeline stage's peak memory per GPU."""

    model_config = ConfigDict(extra="forbid")

    stage: int
    peak_gib: float


class Memory(BaseModel):
    """Memory per GPU: the peak stage's breakdown and every stage's peak."""

    model_config = ConfigDict(extra="forbid")

    peak_gib: float = Field(description="the largest stage's memory per GPU, GiB")
    reserved_gib: float | None = Field(
        None,
        description=(
            "the most a GPU holds through PyTorch's caching allocator and the runtime, what nvidia-smi shows: the peak plus the "
            "segments the buffers made after backward take beside the activations' cached blocks (DeepSpeed's step copies), at "
            "most the capacity; plans fit on the peak, which the allocator falls back to when memory runs short; GiB; null in "
            "evaluations stored before it"
        ),
    )
    capacity_gib: float = Field(description="the GPU's memory, GiB")
    peak_stage: int = Field(description="the stage with the peak")
    breakdown_gib: MemoryBreakdown = Field(description="the peak stage's memory by kind")
    per_stage: list[StagePeak]
    host_gib_per_node: float = Field(
        0.0, description="host memory per node that offloaded model states take (parallel.offload), GiB; 0 without offload"
    )
    nvme_gbytes_per_node: float = Field(
        0.0, description="NVMe per node that states offloaded there take (parallel.nvme_offload), decimal GB; 0 without NVMe offload"
    )


class PipelineStage(BaseModel):
    """One pipeline stage, seen from one of its GPUs (all of its chunks when interleaved)."""

    model_config = ConfigDict(extra="forbid")

    stage: int
    num_layers: int
    layers: list[int] = Field(description="transformer layer indices on this GPU, in order")
    full_recompute_layers: list[int] = Field(description="the layers of this stage that are fully recomputed")
    has_embedding: bool
    has_head: bool
    time_per_micro_batch_s: float = Field(description="forward + backward (+ recompute) + TP communication, all chunks")
    in_flight_micro_batches: float = Field(description="micro-batches whose activations the stage holds at its peak")
    parameter_count: int = Field(description="parameters on this GPU")
    peak_gib: float
    breakdown_gib: MemoryBreakdown


# defer_build=True: a model that answering a plan never uses builds its schema when first used,
# not when `partitura plan` imports this module (bench/cli.py, issue 17).
class EvaluationOut(BaseModel):
    """The cost model's verdict on a legal configuration (an illegal one is a 422): its
    prediction, its memory and, when it does not fit or cannot run, the violations."""

    model_config = ConfigDict(defer_build=True, extra="forbid", title="Evaluation")

    feasible: bool
    violations: list[str] = Field(description="why it does not fit or cannot run, one rule each")
    prediction: PredictionOut
    memory: Memory
    stages: list[PipelineStage]
    num_micro_batches: int = Field(description="micro-batches per step on each data-parallel rank")
    profile_origins: dict[str, str] = Field(description="layer name -> measured, derived or analytic")
