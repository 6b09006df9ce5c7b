"""How the model is trained and split: training settings and one parallel configuration."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

from solver.spec.errors import SpecError, check_in_range, check_positive_int

# A token budget up to 1e18 (about 60,000 times Llama 3's 15T): beyond it a time to train
# overflows a float on the slowest hardware the specs admit.
TRAIN_TOKENS_MAX = 1e18
# Host time per layer and forward pass: up to a second (three orders above any measured stack).
HOST_S_PER_LAYER_MAX = 1.0
# The optimizer step's gradient copy: at most a 16-bit flat copy and an fp32 cast of it per
# parameter, with room for a stack that keeps more (16 bytes is a whole fp32 Adam state and grad).
STEP_GRAD_COPY_BYTES_MAX = 16
# An optimizer sub-group: DeepSpeed's default is 1e9 parameters, Lightning's 1e12 (the whole shard).
SUB_GROUP_PARAMS_MAX = 10**15
# The caching allocator's overhead where a stack has not measured its own: ~5% of what is
# allocated, the cost model's long-standing assumption (not a measurement).
DEFAULT_FRAGMENTATION_FRACTION = 0.05
# At most as much reserved again as allocated (the highest measured is about 0.4).
FRAGMENTATION_FRACTION_MAX = 1.0


class Precision(str, Enum):
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"  # FP8 GEMMs (Transformer Engine style); weights and grads still kept in 16 bit
    # Block-scaled GEMMs (Blackwell tensor cores, AMD CDNA4): as FP8, only the linear layers' GEMMs
    # run in them; weights and gradients stay 16 bit (solver.cost.analytic.QUANTISATION and
    # solver.cost.compute.bytes_per_element say what each costs). MXFP8: OCP Microscaling spec
    # 1.0, FP8 E4M3 elements in blocks of 32 sharing one E8M0 (power-of-two) scale. NVFP4: FP4
    # E2M1 elements in blocks of 16 sharing one FP8 E4M3 scale, under one FP32 per-tensor scale
    # (NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv 2509.25149).
    MXFP8 = "mxfp8"
    NVFP4 = "nvfp4"


class OptimizerKind(str, Enum):
    ADAM = "adam"  # Adam / AdamW: fp32 master weights, momentum and variance
    SGD = "sgd"  # SGD with momentum: fp32 master weights and momentum
    # Muon (K. Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks";
    # at scale: Liu et al. 2025, arXiv 2502.16982; Kimi K2, arXiv 2507.20534): fp32 master
    # weights and one momentum, the update of each 2-D weight matrix orthogonalised by Newton-
    # Schulz iterations (solver.cost.muon). Megatron-core's Muon leaves embeddings, the output
    # layer and 1-D parameters to Adam (megatron/core/optimizer/layer_wise_optimizer.py
    # ``is_managed_by_layer_wise_optimizer``, NVIDIA/Megatron-LM d98e8a64dd).
    MUON = "muon"


class MuonTpMode(str, Enum):
    """How Muon orthogonalises a tensor-parallel split matrix (megatron-core ``--muon-tp-mode``,
    solver.cost.muon). DUPLICATED: each TP rank gathers the whole momentum and orthogonalises the
    whole matrix (Megatron-LM's default at d98e8a64dd). BLOCKWISE: each rank orthogonalises its
    own shard, no gather (the default at 8f1c2f8; Megatron-Bridge's Muon recipes,
    recipes/utils/optimizer_utils.py ``distributed_muon_with_cosine_annealing``). DISTRIBUTED:
    each rank keeps its shard and the ranks all-reduce the Gram matrix of every iteration
    (NVIDIA-NeMo/Emerging-Optimizers ``newton_schulz_tp``); like DUPLICATED it orthogonalises the
    whole matrix."""

    DUPLICATED = "duplicated"
    BLOCKWISE = "blockwise"
    DISTRIBUTED = "distributed"


class MoeDispatcher(str, Enum):
    """How an MoE layer's tokens reach their experts' ranks (Megatron-core
    ``--moe-token-dispatcher-type``, solver.cost.moe.ep_comm_s). ALLTOALL: NCCL all-to-alls, each
    of a token's copies sent to its expert's rank (Megatron-core's alltoall dispatcher). FLEX:
    the flex dispatcher on DeepEP or HybridEP, which sends a token to each other NVLink domain it
    is routed to once over the network and forwards it inside that domain over NVLink (DeepSeek-V3,
    arXiv 2412.19437 Sec 3.2.2; Megatron-core's MoE README: DeepEP "removes redundant tokens
    during cross-node communication")."""

    ALLTOALL = "alltoall"
    FLEX = "flex"


class MomentsDtype(str, Enum):
    """The dtype the optimizer keeps its moments in (Adam's first and second, SGD's momentum); its
    master weights stay fp32 either way (``solver.cost.memory.optimizer_bytes_per_param``).

    FP32: 4 bytes each, every framework's default. BF16: 2 bytes each, Megatron-core's
    precision-aware optimizer (``--use-precision-aware-optimizer --exp-avg-dtype bf16
    --exp-avg-sq-dtype bf16``: Transformer Engine's FusedAdam stores ``exp_avg`` and ``exp_avg_sq``
    in that dtype and computes in fp32, megatron/training/arguments.py and
    megatron/core/optimizer/optimizer_config.py at NVIDIA/Megatron-LM
    8f1c2f8ae53b4e3f32c0ae7f397d8b38a675eaa2, Adam and the distributed optimizer only), which
    Megatron-Bridge's DeepSeek-V3 recipe sets; DeepSeek-V3's own training (arXiv 2412.19437 Sec
    3.3.3, "Low-Precision Optimizer States": AdamW's first and second moments in BF16, the master
    weights and the gradients kept for batch accumulation in FP32).
    """

    FP32 = "fp32"
    BF16 = "bf16"


class ActInputDtype(str, Enum):
    """The dtype an MoE layer's experts keep their activation function's input in for backward
    (fc1's output: SwiGLU's gate and up; ``solver.cost.moe``).

    HALF: the 16-bit tensor fc1 wrote (Megatron-core's experts, every catalog stack). FP8: an FP8
    copy, one byte per element (DeepSeek-V3, arXiv 2412.19437 Sec 3.3.3, "Low-Precision
    Activation" (2): the inputs of the SwiGLU operator in MoE are cached in FP8 with the
    fine-grained quantisation of Sec 3.3.2, 1x128 tiles; their scaling factors, one per 128
    elements, are left out, as the per-tensor scales of the FP8 GEMM inputs are).
    """

    HALF = "half"
    FP8 = "fp8"


class Recompute(str, Enum):
    NONE = "none"
    SELECTIVE = "selective"  # Korthikanti et al. 2022: recompute the attention core only
    FULL = "full"  # keep only each layer's input, recompute the whole layer


class GradReduce(str, Enum):
    """The dtype of the gradients a stack accumulates and reduces over data parallelism.

    HALF: the 16-bit training dtype (DeepSpeed: ``allreduce_always_fp32`` defaults to false;
    apex AMP O2). FP32: always fp32 (torchtitan's ``mixed_precision_reduce``, whose only value
    is float32; Composer's DEFAULT mixed precision reduces in fp32). FP32_FOR_BF16: fp32 when
    the parameters are bf16 (bf16 and FP8 training), 16 bit with fp16 (Megatron-LM arguments.py
    sets ``accumulate_allreduce_grads_in_fp32`` for --bf16: "bfloat16 requires gradient
    accumulation and all-reduce to be done in fp32"; its gradient buffer, ``main_grad``, is then
    fp32: Megatron-LM docs/source/distrib_optimizer.md counts 4 bytes of gradient per parameter
    for bf16 parameters). FP32_BESIDE_HALF: DeepSpeed's BF16_Optimizer, Megatron-DeepSpeed's bf16
    path from BigScience's 2022 fork on (deepspeed/runtime/bf16_optimizer.py, merged in #1801):
    a flat fp32 gradient of every parameter of the stage, not sharded over data parallelism, into
    which each micro-batch's 16-bit gradients are accumulated, while the pipeline engine keeps
    those 16-bit gradients until the next backward (``update_hp_grads(clear_lp_grads=False)``):
    2 + 4 bytes per parameter (BigScience's chronicles: "The additional memory usage is 4bytes x
    params and it's not sharded across gpus").
    """

    HALF = "half"
    FP32 = "fp32"
    FP32_FOR_BF16 = "fp32_for_bf16"
    FP32_BESIDE_HALF = "fp32_beside_half"


class LossDtype(str, Enum):
    """The dtype the cross entropy computes in (``solver.cost.analytic.loss_peak_bytes_per_logit``).

    FP32: the logits are cast to fp32 first (Megatron's vocab-parallel cross entropy unless
    --fp16-lm-cross-entropy; torchtitan's loss; autocast, whose fp32 list holds cross_entropy).
    HALF: a model cast to 16 bit computes it on its 16-bit logits (DeepSpeed's fp16 engine, apex
    AMP O2, without autocast).
    """

    FP32 = "fp32"
    HALF = "half"


class LossKernel(str, Enum):
    """How the cross entropy runs, which sets what it holds at its peak
    (``solver.cost.analytic.loss_peak_bytes_per_logit``).

    FUSED: a hand-written fused cross entropy, whatever ``fused_kernels`` says (Megatron-core's
    vocab_parallel_cross_entropy, flash-attn's cross entropy in llm-foundry). COMPILED: compiled
    with the model when ``fused_kernels`` (torchtitan since 2025-04-02, commit bbb1b616e:
    ``build_cross_entropy_loss`` wraps the loss in ``torch.compile`` when ``training.compile``),
    else eager. EAGER: eager PyTorch whatever ``fused_kernels`` says (torchtitan before that
    commit: "TODO: compiling loss function causes CUDA errors, turning off for now", train.py at
    9dec370; Hugging Face model code). IN_PLACE: Transformer Engine's parallel_cross_entropy,
    which Megatron-core runs for ``--cross-entropy-loss-fusion --cross-entropy-fusion-impl te``
    (megatron/core/models/common/language_module/language_module.py) and Megatron-Bridge's
    performance scripts set for every model: its forward writes the gradient into the 16-bit
    logits in place and saves them (transformer_engine/pytorch/triton/cross_entropy.py,
    ``cross_entropy_forward`` returns ``_input``, from 2.2's "Parallel Cross Entropy using online
    softmax", #1456, to v2.17). Since #3193 (July 2026, v2.18) it writes an fp32 gradient beside
    the logits instead, which is FUSED's 2 + 4.
    """

    FUSED = "fused"
    COMPILED = "compiled"
    EAGER = "eager"
    IN_PLACE = "in_place"


class SpSavedInput(str, Enum):
    """What a column-parallel GEMM keeps for backward under sequence parallelism, where its input
    (the norm's output) arrives sharded over the sequence and is all-gathered before the QKV and
    MLP-up GEMMs (``solver.cost.analytic._kept_bytes``).

    SHARDED: the sharded input, all-gathered again in backward for the weight gradient; the
    forward's gathered copy sits in one global buffer that every layer reuses
    (NVIDIA/Megatron-LM 000c4ac24f61159c138b0975def722c65245983c,
    megatron/core/tensor_parallel/layers.py ``LinearWithGradAccumulationAndAsyncCommunication``:
    ``ctx.save_for_backward(input, weight)`` of the sharded ``input``, forward gathers into
    ``get_global_memory_buffer()``, backward gathers ``input`` again before the wgrad GEMM).
    Korthikanti et al. 2022's b*s*h/t per input.
    GATHERED: the all-gathered input, b*s*h per input, in the dtype it was gathered in (PyTorch
    DTensor tensor parallelism as torchtitan applies it, pytorch/torchtitan
    9dec370ad26b5f8e9a7333a0e36165018262644b torchtitan/parallelisms/parallelize_llama.py
    ``apply_tp``: ``PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=
    (Replicate(), None))`` on ``attention`` and on ``feed_forward`` redistributes the norm's
    sequence-sharded output to a replicated tensor, an autograd-tracked all-gather, which the
    ColwiseParallel wq / wk / wv and w1 / w3 take as their input and their matmuls save;
    pytorch/pytorch 004c2c9abc52d60e800e06339bb5784f748ce5d5 torch/distributed/tensor/parallel/
    style.py). The sharded norm output is then not kept: the all-gather saves nothing. With
    torchao's float8 the input is cast to FP8 before the all-gather (pytorch/ao
    692236a6eaedd72ed3e307fe4eaac9a7fb292d9d torchao/float8/float8_tensor_parallel.py
    ``PrepareFloat8ModuleInput``: "the float8 cast happens before the all-gather"), and
    Float8Linear saves an input that arrives in FP8 as it is (float8_linear.py
    ``manual_float8_matmul_with_args_in_float8`` there, ``matmul_with_hp_or_float8_args`` from
    12396c648, 2025-01-13): 1 byte per element.
    """

    SHARDED = "sharded"
    GATHERED = "gathered"


class SelectiveRecompute(str, Enum):
    """What a stack's selective recomputation keeps and what it recomputes.

    ATTENTION: Korthikanti et al. 2022 Sec 5 (Megatron-LM ``--recompute-granularity selective``,
    NeMo, Megatron-DeepSpeed): only the attention core (scores, softmax, dropout) is recomputed;
    with a fused attention kernel nothing is (there is no score tensor to drop).
    OP: torchtitan's per-op selective activation checkpointing (``[activation_checkpoint] mode =
    "selective"``, ``selective_ac_option = "op"``, its default; torchtitan/distributed/
    activation_checkpoint.py): inside each checkpointed block only the outputs of the ops on a save
    list are kept (matmuls, the SDPA kernel, reduce-scatter), and of the matmuls every second one is
    recomputed; everything else (norms, rotary, activation functions, products, the other matmuls)
    is recomputed in backward from the block's input.
    """

    ATTENTION = "attention"
    OP = "op"


class RecomputeModule(str, Enum):
    """A submodule Megatron-core's selective recomputation recomputes (``--recompute-granularity
    selective --recompute-modules``; megatron/core/transformer/transformer_config.py
    ``recompute_modules`` at NVIDIA/Megatron-LM 8f1c2f8ae53b4e3f32c0ae7f397d8b38a675eaa2, the
    commit Megatron-Bridge df0289c pins). What each drops from a layer's kept activations and adds
    to its backward is in ``solver.cost.analytic`` (``_module_recompute``), ``solver.cost.mla`` and
    ``solver.cost.moe``. Read only where ``TrainingSpec.selective_recompute`` is ATTENTION (the
    Megatron-style stacks) and the layer is recomputed selectively.
    """

    CORE_ATTN = "core_attn"  # the attention core: its score tensors (none with a fused kernel); Megatron's default
    MLA_UP_PROJ = "mla_up_proj"  # MLA's Q and K/V up projections and RoPE (output-discarding checkpoint)
    LAYERNORM = "layernorm"  # the input and pre-MLP norms' outputs (output-discarding checkpoint)
    MLP = "mlp"  # a dense layer's MLP, from its input (normal checkpoint; not MoE layers)
    MOE_ACT = "moe_act"  # the routed experts' activation function (output-discarding checkpoint)


# Megatron-core's default: the attention core alone, Korthikanti et al.'s selective mode.
DEFAULT_RECOMPUTE_MODULES = (RecomputeModule.CORE_ATTN,)


class ZeroStage(IntEnum):
    NONE = 0
    OS = 1  # optimizer states sharded over data parallel ranks
    OS_G = 2  # + gradients
    OS_G_P = 3  # + parameters


class Framework(str, Enum):
    """Which training framework's rules the plan must obey (see ``solver.spec.legality``)."""

    ANY = "any"
    MEGATRON = "megatron"
    DEEPSPEED = "deepspeed"
    FSDP = "fsdp"  # PyTorch FSDP1 as Composer / llm-foundry run it: no pipeline, no context parallelism
    TORCHTITAN = "torchtitan"  # FSDP2 with TP, PP and CP


class Zero3Collectives(str, Enum):
    """How a ZeRO-3 / FSDP stack issues its parameter all-gathers and gradient reduce-scatters.

    PER_LAYER: one collective per wrapped transformer layer and pass (PyTorch FSDP's flat
    parameter per wrapped block; DeepSpeed from v0.7.0, whose parameter coordinator gathers a
    module's parameters with one ``all_gather_coalesced``).
    PER_TENSOR: one collective per parameter tensor (DeepSpeed v0.3.x-v0.6.x: ``_all_gather``
    calls ``_allgather_param`` for each parameter and ``_reduce_scatter_gradients`` calls
    ``_reduce_scatter_gradient`` for each, deepspeed/runtime/zero/partition_parameters.py at
    v0.3.15). Every collective pays its ring's latency, so this matters on large groups.
    """

    PER_LAYER = "per_layer"
    PER_TENSOR = "per_tensor"


class PipelineSchedule(str, Enum):
    """The pipeline schedule a stack runs (``solver.cost.schedule``).

    ONE_F_ONE_B: 1F1B (Narayanan et al. 2021 Sec 2.2), interleaved when ``virtual_stages`` > 1.
    DUALPIPE: DeepSeek-V3's bidirectional schedule (arXiv 2412.19437 Sec 3.2.1, Figure 5, Table
    2): micro-batches fed from both ends of the pipeline, each rank holding two model chunks (2x
    parameters), PP + 1 micro-batches of activations, a bubble of (PP/2 - 1)(F&B + B - 3W), and
    each forward chunk overlapped with another micro-batch's backward chunk so that the
    all-to-alls and the pipeline's sends run beside compute. Legal with an even pp_size, an even
    micro-batch count ("DualPipe only requires that the pipeline stages and micro-batches be
    divisible by 2") and no interleaving (its two chunks per rank are its own placement). Its
    memory (2x parameters, PP + 1 activations) is not yet costed: stages hold 1F1B's.
    """

    ONE_F_ONE_B = "1f1b"
    DUALPIPE = "dualpipe"


class ExpertGemms(str, Enum):
    """How the stack runs an MoE layer's routed-expert GEMMs on a rank holding several local experts
    (``solver.cost.moe``).

    GROUPED: one grouped-GEMM kernel per GEMM over all local experts (Megatron-core's legacy
    ``GroupedMLP``: ``gg.ops.gmm`` of the grouped_gemm library, NVIDIA/Megatron-LM 8f1c2f8ae
    megatron/core/transformer/moe/experts.py), the default.
    PER_EXPERT: one GEMM launch per local expert, and with MXFP8 one quantisation kernel per local
    expert's rows: Transformer Engine's ``GroupedLinear``, which Megatron-core's ``TEGroupedMLP``
    runs (NVIDIA/TransformerEngine v2.1 to v2.13; Megatron-Bridge df0289c pins 5671fd36, the v2.12
    tag, and 5776a6d90 release_v2.9): ``general_grouped_gemm`` reaches common/gemm/cublaslt_gemm.cu
    ``multi_stream_cublas_gemm``, one cuBLASLt GEMM per expert round-robin over 4 compute streams
    (its CUTLASS grouped GEMM only on Hopper, behind NVTE_USE_CUTLASS_GROUPED_GEMM), and
    pytorch/csrc/extensions/cast.cpp ``split_quantize`` quantises each split with its own kernel
    except under FP8 delayed scaling ("only have fused kernel for FP8 delayed scaling") and NVFP4
    (one fused kernel). FP8 current and blockwise scaling quantise per split too, but ``Precision.FP8``
    does not say which recipe ran, so only MXFP8 is charged per expert.
    """

    GROUPED = "grouped"
    PER_EXPERT = "per_expert"


class FlashKernel(str, Enum):
    """Which fused attention kernel a ``flash_attention`` stack runs, named by the FlashAttention
    generation it performs like (``solver.cost.analytic._attention_core_s``).

    FA2: FlashAttention-2 (Dao 2023) and the kernels that run at its speed or better: PyTorch SDPA's
    flash and cuDNN backends, Transformer Engine's fused attention; the default.
    FA1: FlashAttention 1.x (Dao et al. 2022, the CUDA kernels before flash-attn 2.0) and its Triton
    port (flash_attn/flash_attn_triton.py, which llm-foundry vendors as attn_impl 'triton'): twice
    FA2's time (``FLASH_V1_TIME_FACTOR``)."""

    FA2 = "fa2"
    FA1 = "fa1"


def _member(kind: type[Enum], value: object, field: str) -> Enum:
    """``value`` as a member of ``kind``; a SpecError naming ``field`` and the allowed values if it is none."""
    try:
        return kind(value)
    except ValueError:
        raise SpecError(field, f"must be one of {', '.join(repr(m.value) for m in kind)}, got {value!r}") from None


@dataclass(frozen=True)
class TrainingSpec:
    """Training settings shared by every configuration of one request.

    ``flash_attention`` says whether attention scores are materialised (False: the s x s score,
    softmax and dropout tensors go through HBM, as in Megatron-LM 2021-2022) or computed in a
    fused kernel that keeps them on chip (Dao et al. 2022, the default in current frameworks).

    ``overlap_grad_reduce`` says whether the data-parallel gradient reduction (ZeRO 0-2) runs
    bucket by bucket while the last backward pass is still computing (PyTorch DDP and FSDP,
    Megatron-core's ``overlap_grad_reduce``, DeepSpeed ZeRO's ``overlap_comm``) or only after it
    ends (False: Megatron-LM 2021-2022's local DDP calls ``allreduce_gradients`` after
    ``forward_backward_func`` returns; DeepSpeed's pipeline engine schedules ``ReduceGrads``
    after the last ``BackwardPass``).

    ``fused_kernels`` says whether the element-wise work around the GEMMs runs in fused kernels
    (Megatron-LM / Transformer Engine: fused scale-mask-softmax, bias-GeLU, bias-dropout-add) or
    as one eager PyTorch kernel per operation, each reading and writing its tensors through HBM
    (False: e.g. NVIDIA DeepLearningExamples BERT, Hugging Face style model code). See
    ``solver.cost.analytic`` for the bytes each choice moves.
    """

    global_batch_size: int
    seq_length: int
    precision: Precision = Precision.BF16
    optimizer: OptimizerKind = OptimizerKind.ADAM
    train_tokens: float | None = None
    flash_attention: bool = True
    overlap_grad_reduce: bool = True
    fused_kernels: bool = True
    zero3_collectives: Zero3Collectives = Zero3Collectives.PER_LAYER
    zero3_overlap: bool = True
    tp_comm_overlap: bool = False
    overlap_p2p_comm: bool = False
    host_s_per_layer: float = 0.0
    # Host time per MoE layer and forward pass that runs in step with the GPU because the token
    # dispatcher synchronises the host with the GPU in every MoE layer (Megatron-core's alltoall
    # dispatcher copies the per-expert token counts to the host and waits for them:
    # megatron/core/transformer/moe/token_dispatcher.py ``_maybe_dtoh_and_synchronize``). The host
    # cannot run ahead across such a layer, so each of its passes takes the longer of its GPU work
    # (all-to-alls included) and this host work (twice it backward, as ``host_s_per_layer``).
    # 0: not measured, or a dispatcher that lets the host run ahead.
    moe_host_s_per_layer: float = 0.0
    selective_recompute: SelectiveRecompute = SelectiveRecompute.ATTENTION
    grad_reduce: GradReduce = GradReduce.HALF
    loss_dtype: LossDtype = LossDtype.FP32
    loss_kernel: LossKernel = LossKernel.COMPILED
    # Whether FP8-family GEMMs keep their inputs for backward in the low-precision copy they cast
    # (Transformer Engine's Linear / LayerNormLinear / LayerNormMLP save the FP8 input for the wgrad
    # GEMM) or in 16 bit (torchao's Float8Linear saves the high-precision input and casts again in
    # backward: its README's Llama 3 8B training table shows the same peak memory in bf16 and FP8).
    low_precision_saved_inputs: bool = False
    # Whether an MoE layer's token dispatch and combine all-to-alls run beside compute (another
    # micro-batch's forward or backward of the same layer: Megatron-core's combined 1F1B schedule,
    # ``--overlap-moe-expert-parallel-comm``, 0.14+, off by default; DeepSeek-V3's DualPipe, arXiv
    # 2412.19437 Sec 3.2.1) or on the compute stream, waited for (False). Dense layers are untouched.
    ep_comm_overlap: bool = False
    # How the routed experts' GEMMs (and MXFP8 quantisation) are launched (``ExpertGemms``).
    expert_gemms: ExpertGemms = ExpertGemms.GROUPED
    # The fused attention kernel's generation (FlashKernel); read only where flash_attention is true.
    flash_kernel: FlashKernel = FlashKernel.FA2
    # Whether the model's parameters stay fp32 and the 16-bit compute comes from torch.autocast
    # (torch.cuda.amp: Hugging Face Trainer's fp16/bf16, Lightning's precision 16) rather than from
    # a 16-bit model beside an fp32 master copy (Megatron, DeepSpeed's fp16 engine, apex AMP O2,
    # FSDP's gathered copies). The parameters are then the master weights and the gradients fp32,
    # and autocast's 16-bit cast of each weight is one more copy alive at the peak
    # (solver.cost.memory.model_state_bytes).
    autocast_weights: bool = False
    # Whether PyTorch DDP keeps its all-reduce buckets beside the gradients, a second copy of them
    # (torch.nn.parallel.DistributedDataParallel's gradient_as_bucket_view, default False: "the
    # saved memory size will be equal to the total gradients size" when True). False where the
    # gradients are the buckets or no persistent buckets exist (apex DDP, FSDP, ZeRO, Megatron).
    grad_bucket_copy: bool = False
    # Whether the training loop still references the 16-bit logits when backward starts, beside
    # the loss's own tensors (solver.cost.analytic.loss_peak_bytes_per_logit): torchtitan before
    # e29b6b4d4 (2024-06-12, #391: "del logits=(bs, seq_len, vocab_size) to save 3.9G memory").
    loss_keeps_logits: bool = False
    # What a column-parallel GEMM keeps for backward under sequence parallelism (``SpSavedInput``):
    # Korthikanti et al.'s sharded input (Megatron), the default, or the all-gathered one (DTensor).
    sp_saved_input: SpSavedInput = SpSavedInput.SHARDED
    # What selective recomputation recomputes in a Megatron-style stack (``RecomputeModule``).
    recompute_modules: tuple[RecomputeModule, ...] = DEFAULT_RECOMPUTE_MODULES
    # The pipeline schedule (``PipelineSchedule``): 1F1B (interleaved with virtual stages) or
    # DeepSeek-V3's DualPipe.
    pipeline_schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B
    # The dtype of the optimizer's moments (``MomentsDtype``): fp32, or bf16 (Megatron-core's
    # precision-aware optimizer; DeepSeek-V3's training).
    moments_dtype: MomentsDtype = MomentsDtype.FP32
    # How Muon orthogonalises a tensor-parallel split matrix (``MuonTpMode``; read with Muon only).
    muon_tp_mode: MuonTpMode = MuonTpMode.DUPLICATED
    # How the MoE layers' tokens travel to their experts (``MoeDispatcher``; read with MoE models only).
    moe_dispatcher: MoeDispatcher = MoeDispatcher.ALLTOALL
    # The dtype the MoE experts keep their activation function's input in (``ActInputDtype``):
    # 16 bit, or FP8 (DeepSeek-V3's training).
    moe_act_input_dtype: ActInputDtype = ActInputDtype.HALF
    # Whether the job runs with CUDA_LAUNCH_BLOCKING=1: every kernel launch waits for the kernel to
    # finish, so the framework's host work per layer (``host_s_per_layer``) adds to the GPU's
    # instead of running ahead of it (CUDA Programming Guide, "Asynchronous Concurrent Execution":
    # the variable disables asynchronous kernel launches). BLOOM-176B trained so, to get past a
    # hang at 40+ nodes (bigscience tr11-176B-ml.slurm: export CUDA_LAUNCH_BLOCKING=1).
    launch_blocking: bool = False
    # Bytes per parameter of the gradient copy the optimizer step makes, one sub-group of the local
    # shard at a time, beside the gradients it copies (solver.cost.memory.optimizer_step_copy_bytes):
    # DeepSpeed ZeRO-3 flattens a sub-group's 16-bit gradient partitions into a new tensor (2) and
    # casts that to fp32 for the step (4) before it frees the flat copy
    # (deepspeed/runtime/zero/stage3.py ``_prepare_fp32_grad_for_sub_group``, v0.3 to v0.14).
    # 0: the step reads the gradients where they are.
    step_grad_copy_bytes_per_param: int = 0
    # Parameters the optimizer steps at a time (DeepSpeed ZeRO-3's ``sub_group_size``), which caps
    # the copy above; 0: the whole local shard at once.
    optimizer_sub_group_params: int = 0
    # The PyTorch caching allocator's overhead on this stack: the peak memory it reserves beyond the
    # peak it has allocated, as a fraction of the latter (solver.cost.memory.reserve_bytes). A
    # property of how the stack allocates (block rounding and splitting, the side streams it frees
    # on, expandable segments or not), measured as max_memory_reserved / max_memory_allocated - 1.
    allocator_fragmentation_fraction: float = DEFAULT_FRAGMENTATION_FRACTION
    # Whether the stack runs tensor parallelism wider than the model's KV heads by sub-sharding the
    # QKV activations: each rank computes its 1/tp of the fused QKV projection, all-gathers the
    # result over the TP group and keeps its KV group's slice and its own query heads, so tp may be
    # any multiple of the KV heads (NVIDIA/Megatron-LM f7dfb9979, #2565, in Megatron-core 0.16.0 on:
    # megatron/core/transformer/attention.py, ``num_query_groups < world_size``). False: tp must
    # divide the KV heads, each rank holding whole ones.
    kv_head_subsharding: bool = False
    # Whether the fused attention kernel runs its two GEMMs (Q K^T and P V, and their backward) in
    # FP8: Transformer Engine's fp8_dpa (the recipes' ``fp8_dpa``; Megatron-core's
    # TransformerConfig.fp8_dot_product_attention, megatron/core/fp8_utils.py; Megatron-Bridge's
    # mixed_precision.fp8_dot_product_attention), cuDNN's FP8 fused attention. Q, K and V are cast
    # to FP8 forward and the output gradient backward; the softmax stays in fp32. Only with the FP8
    # or MXFP8 precision (the recipes megatron-core hands fp8_dpa to) and fused attention.
    fp8_attention: bool = False
    # Whether the output layer's projection (the logits GEMM) runs in MXFP8 under the recipe's
    # autocast instead of 16 bit: Megatron-core's TransformerConfig.fp8_output_proj (NVIDIA/Megatron-LM
    # 3f6a2ed844, #4825, 2026-05; --fp8-output-proj), which requires fp8_recipe 'mxfp8'. Its input is
    # quantised forward and the logits' gradient backward, as the linear layers' are.
    fp8_output_proj: bool = False
    # DeepSpeed's ZeRO-1/2 optimizer (deepspeed/runtime/zero/stage2.py to v0.4, stage_1_and_2.py
    # v0.5 to v0.9, DeepSpeedZeroOptimizer) reduces the gradients in buckets of up to
    # ``reduce_bucket_size`` elements (this field; its default 5e8 from v0.3 to v0.9,
    # zero/constants.py ZERO_OPTIMIZATION_REDUCE_BUCKET_SIZE_DEFAULT). At ZeRO-1, where the engine
    # turns contiguous gradients off ("meaningless in stage 1", engine.py
    # ``_configure_zero_optimizer``), each bucket is flattened into a new 16-bit tensor for its
    # reduction after the last backward (``buffered_reduce_fallback`` -> ``allreduce_bucket``); at
    # ZeRO-2 the contiguous gradient buffer of that size is allocated at the start of every backward
    # (``backward``: ``torch.empty(reduce_bucket_size)``) and held through it. 0: no such bucket.
    zero_reduce_bucket_params: int = 0
    # Whether the optimizer step checks and measures the gradients one tensor at a time through
    # copies (DeepSpeed's ZeRO-1/2 optimizer, v0.3.15 to v0.9: ``_has_inf_or_nan`` sums
    # ``x.float()``, a 4-byte copy of each gradient's partition, and ``get_grad_norm_direct`` takes
    # the norm of ``g.data.double()``, an 8-byte one; solver.cost.stage.step_phases).
    zero_step_norm_copies: bool = False
    # Whether the two hidden dropouts of a layer keep their 1-byte masks for backward even where
    # the model trains without hidden dropout (``ModelSpec.hidden_dropout`` 0). Eager dropout and
    # torch.compile's keep none at p = 0 (ATen's ``_dropout_impl`` returns its input; the dropout
    # decomposition copies it), but a TorchScript bias-dropout-add (Megatron-LM's and
    # Megatron-DeepSpeed's ``@torch.jit.script bias_dropout_add_fused_train``) runs TorchScript's
    # autodiff formula for dropout (torch/csrc/jit/runtime/symbolic_script.cpp), which draws
    # ``mask = rand_like(input) < 1 - p`` and keeps it with no p == 0 shortcut
    # (solver.cost.analytic.hidden_mask_bytes).
    jit_dropout_masks: bool = False

    def __post_init__(self) -> None:
        check_positive_int("training.global_batch_size", self.global_batch_size)
        check_positive_int("training.seq_length", self.seq_length)
        object.__setattr__(self, "precision", Precision(self.precision))
        object.__setattr__(self, "optimizer", OptimizerKind(self.optimizer))
        object.__setattr__(self, "zero3_collectives", Zero3Collectives(self.zero3_collectives))
        object.__setattr__(self, "selective_recompute", SelectiveRecompute(self.selective_recompute))
        object.__setattr__(self, "grad_reduce", GradReduce(self.grad_reduce))
        object.__setattr__(self, "loss_dtype", LossDtype(self.loss_dtype))
        object.__setattr__(self, "loss_kernel", LossKernel(self.loss_kernel))
        object.__setattr__(self, "sp_saved_input", SpSavedInput(self.sp_saved_input))
        object.__setattr__(self, "pipeline_schedule", PipelineSchedule(self.pipeline_schedule))
        object.__setattr__(self, "expert_gemms", ExpertGemms(self.expert_gemms))
        object.__setattr__(self, "flash_kernel", _member(FlashKernel, self.flash_kernel, "training.flash_kernel"))
        object.__setattr__(self, "moments_dtype", _member(MomentsDtype, self.moments_dtype, "training.moments_dtype"))
        object.__setattr__(self, "muon_tp_mode", _member(MuonTpMode, self.muon_tp_mode, "training.muon_tp_mode"))
        object.__setattr__(self, "moe_dispatcher", _member(MoeDispatcher, self.moe_dispatcher, "training.moe_dispatcher"))
        object.__setattr__(self, "moe_act_input_dtype", _member(ActInputDtype, self.moe_act_input_dtype, "training.moe_act_input_dtype"))
        try:
            modules = tuple(sorted({RecomputeModule(m) for m in self.recompute_modules}, key=list(RecomputeModule).index))
        except (TypeError, ValueError):
            raise SpecError(
                "training.recompute_modules", f"must list some of {', '.join(m.value for m in RecomputeModule)}, got {self.recompute_modules!r}"
            ) from None
        object.__setattr__(self, "recompute_modules", modules)
        for flag in ("launch_blocking", "kv_head_subsharding", "fp8_attention", "fp8_output_proj"):
            if not isinstance(getattr(self, flag), bool):
                raise SpecError(f"training.{flag}", f"must be true or false, got {getattr(self, flag)!r}")
        if self.fp8_attention and self.precision not in (Precision.FP8, Precision.MXFP8):
            raise SpecError(
                "training.fp8_attention",
                "FP8 attention rides on an FP8 recipe (megatron-core passes fp8_dpa to Transformer Engine's FP8 and MXFP8"
                f" recipes): set training.precision to fp8 or mxfp8, got {self.precision.value}",
            )
        if self.fp8_output_proj and self.precision is not Precision.MXFP8:
            raise SpecError(
                "training.fp8_output_proj",
                "Megatron-core runs the output projection in MXFP8 only (fp8_output_proj requires fp8_recipe 'mxfp8'):"
                f" set training.precision to mxfp8, got {self.precision.value}",
            )
        if self.fp8_attention and not self.flash_attention:
            raise SpecError("training.fp8_attention", "FP8 attention is a fused attention kernel (cuDNN): it needs training.flash_attention true")
        for name, most in (
            ("step_grad_copy_bytes_per_param", STEP_GRAD_COPY_BYTES_MAX), ("optimizer_sub_group_params", SUB_GROUP_PARAMS_MAX),
            ("zero_reduce_bucket_params", SUB_GROUP_PARAMS_MAX),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
                raise SpecError(f"training.{name}", f"must be a whole number from 0 to {most:g}, got {value!r}")
        fraction = self.allocator_fragmentation_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise SpecError("training.allocator_fragmentation_fraction", f"must be a number, got {fraction!r}")
        check_in_range("training.allocator_fragmentation_fraction", fraction, 0.0, FRAGMENTATION_FRACTION_MAX)
        for name in ("host_s_per_layer", "moe_host_s_per_layer"):
            if not 0.0 <= getattr(self, name) <= HOST_S_PER_LAYER_MAX:
                raise SpecError(f"training.{name}", f"must be between 0 and {HOST_S_PER_LAYER_MAX:g} s, got {getattr(self, name)!r}")
        if self.train_tokens is not None and not 0 < self.train_tokens <= TRAIN_TOKENS_MAX:
            raise SpecError("training.train_tokens", f"must be positive and at most {TRAIN_TOKENS_MAX:g}, got {self.train_tokens!r}")

    @property
    def grad_bytes_per_param(self) -> int:
        """Bytes of gradient memory per parameter, beside the 16-bit weights and the optimizer's
        fp32 master copy (``GradReduce``): 4 where Megatron keeps an fp32 ``main_grad`` buffer
        (FP32_FOR_BF16 with bf16 parameters), 6 for DeepSpeed's BF16_Optimizer (FP32_BESIDE_HALF),
        else 2. FSDP's fp32 reduce (FP32) keeps fp32
        sharded gradients, but its fp32 sharded parameters are the master copy and it holds no
        second one, so its states add up to the same 16 bytes per parameter as 2 + 2 + 12
        (PyTorch FSDP2 ``MixedPrecisionPolicy``: parameters sharded in their fp32 dtype, cast to
        ``param_dtype`` when gathered). The data-parallel reductions are still costed at 16 bits
        (solver.cost.schedule): an fp32 reduce alone, without collectives that use every NIC of a
        node, makes cross-node FSDP runs pessimistic (llm-foundry MPT-70B on 64 A100-40GB:
        -23.5% -> -42.5%)."""
        if self.grad_reduce is GradReduce.FP32_BESIDE_HALF:
            return 2 + 4  # DeepSpeed's BF16_Optimizer: the 16-bit gradients and the fp32 accumulation buffer
        fp32_main_grad = self.grad_reduce is GradReduce.FP32_FOR_BF16 and self.precision is not Precision.FP16
        return 4 if fp32_main_grad else 2

    @property
    def reduce_cast_bytes_per_param(self) -> int:
        """Bytes per parameter of the stage that the data-parallel gradient reduce copies after
        backward: 2 for DeepSpeed's BF16_Optimizer (FP32_BESIDE_HALF), else 0. Its pipeline engine
        reduces the optimizer's flat fp32 gradient groups (``_exec_reduce_grads`` ->
        ``_bf16_reduce_grads`` -> ``buffered_allreduce_fallback``, buckets of at least 5e8
        elements, and a group's flat gradient is one bucket), and ``allreduce_bucket`` all-reduces
        each bucket in ``communication_data_type``, bf16 for bf16 training at ZeRO 0 (engine.py,
        deepspeedai/DeepSpeed v0.6.2 to v0.6.5, where BF16_Optimizer runs only at ZeRO 0): a bf16
        copy of every gradient of the stage, not sharded, copied back into the fp32 groups after
        the all-reduce."""
        return 2 if self.grad_reduce is GradReduce.FP32_BESIDE_HALF else 0

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_length


