"""What every framework's export shares: the plan to export, the launch files, the differences.

An export never claims more than its framework runs. Each framework module (``megatron``,
``deepspeed``, ``torchtitan``, ``nemo``) first finds the configuration it can run exactly that is
nearest to the plan (``exact_config``, a ``Nearest``), naming every way it differs from the plan,
and then writes its launch files for that configuration. The search asks the same
``exact_config`` (``solver.frameworks.nearest_exact``) for a request that names the framework, so
what it returns and what the export writes can never disagree. ``Export.exact`` is True only when nothing
differs; otherwise ``Export.parallel`` is the nearest exact configuration and
``Export.differences`` says what changed and why.

"Nearest" prefers changes that never need more memory per GPU than the plan (more
recomputation, a uniform layer split over the same stages, sequence parallelism); where the
framework leaves no such choice (a ZeRO stage it does not offer), the difference says that
memory grows, and the caller may evaluate the nearest configuration again.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from solver.spec.dimensions import NvmeOffload
from solver.spec.legality import stage_layer_counts
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig, micro_batch_count
from solver.spec.training import ActInputDtype, MoeDispatcher, MomentsDtype, OptimizerKind, Recompute, TrainingSpec

# A launcher or program flag and its value: None for a switch, a tuple for a flag taking several
# values (argparse nargs, e.g. Megatron's --recompute-modules).
Argument = tuple[str, str | tuple[str, ...] | None]


class ExportFormat(str, Enum):
    """The frameworks a plan can be exported to."""

    MEGATRON = "megatron"  # Megatron-LM / Megatron-core: pretrain_gpt.py arguments
    DEEPSPEED = "deepspeed"  # ds_config.json + Megatron-DeepSpeed launcher arguments
    TORCHTITAN = "torchtitan"  # torchtitan job TOML (JobConfig)
    NEMO = "nemo"  # NeMo Megatron GPT trainer/model YAML overrides


class RecomputeForm(str, Enum):
    """A plan's recomputation as a framework sees it (``recompute_form``)."""

    NONE = "none"  # no layer recomputed
    SELECTIVE = "selective"  # the attention core of every layer, nothing fully
    FULL_ALL = "full_all"  # every layer of every chunk fully recomputed
    FULL_PARTIAL = "full_partial"  # some layers of some chunks fully, the rest nothing
    MIXED = "mixed"  # some layers fully, the rest selective


@dataclass(frozen=True)
class PlanToExport:
    """One stored plan candidate with what its launch config needs: the model, the training
    settings, the split and the node size (``gpus_per_node``: how many processes a launcher
    starts on each node)."""

    model: ModelSpec
    training: TrainingSpec
    parallel: ParallelConfig
    gpus_per_node: int

    @property
    def num_gpus(self) -> int:
        return self.parallel.num_gpus

    @property
    def num_nodes(self) -> int:
        return -(-self.num_gpus // self.gpus_per_node)

    @property
    def processes_per_node(self) -> int:
        return min(self.gpus_per_node, self.num_gpus)

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches per step on each data-parallel rank (the gradient accumulation)."""
        p = self.parallel
        return micro_batch_count(self.training.global_batch_size, p.dp_size, p.micro_batch_size)

    def chunk_layers(self, parallel: ParallelConfig | None = None) -> tuple[int, ...]:
        """Transformer layers of each model chunk, pipeline order (the uniform split if none)."""
        return stage_layer_counts(self.model, parallel or self.parallel)


@dataclass(frozen=True)
class Difference:
    """One way the exported configuration differs from the plan: the plan's field, its value in
    the plan and in the export (JSON-like text), and why."""

    field: str
    planned: str
    exported: str
    reason: str


@dataclass(frozen=True)
class Nearest:
    """The configuration and training settings nearest to a plan that a framework runs
    exactly, and every way they differ from the plan (none: the plan is exact there)."""

    parallel: ParallelConfig
    training: TrainingSpec
    differences: tuple[Difference, ...]

    @property
    def exact(self) -> bool:
        return not self.differences


@dataclass(frozen=True)
class LaunchFile:
    """A file of the launch config: its name, media type and text."""

    name: str
    media_type: str
    text: str


@dataclass(frozen=True)
class Export:
    """A plan as one framework's launch config. ``parallel`` is what the files run: the plan's
    own configuration when ``exact``, else the nearest configuration the framework runs
    exactly (``training`` likewise: a precision it lacks changes there). ``notes`` are what the user still supplies (data, tokenizer, model code)."""

    framework: ExportFormat
    exact: bool
    parallel: ParallelConfig
    training: TrainingSpec
    differences: tuple[Difference, ...]
    files: tuple[LaunchFile, ...]
    notes: tuple[str, ...]


def full_recompute_counts(plan: PlanToExport, parallel: ParallelConfig | None = None) -> tuple[int, ...]:
    """Fully recomputed layers of each chunk (pipeline order)."""
    parallel = parallel or plan.parallel
    layers = plan.chunk_layers(parallel)
    if parallel.full_recompute_layers is not None:
        return parallel.full_recompute_layers
    if parallel.recompute is Recompute.FULL:
        return layers
    return tuple(0 for _ in layers)


def recompute_form(plan: PlanToExport, parallel: ParallelConfig | None = None) -> RecomputeForm:
    parallel = parallel or plan.parallel
    counts, layers = full_recompute_counts(plan, parallel), plan.chunk_layers(parallel)
    if counts == layers:
        return RecomputeForm.FULL_ALL
    selective = parallel.recompute is Recompute.SELECTIVE
    if not any(counts):
        return RecomputeForm.SELECTIVE if selective else RecomputeForm.NONE
    return RecomputeForm.MIXED if selective else RecomputeForm.FULL_PARTIAL


def block_recompute_layers(layers: tuple[int, ...], counts: tuple[int, ...]) -> int | None:
    """The one number N with which "recompute the first N layers of every chunk" gives exactly
    ``counts`` (chunk i recomputes min(N, layers[i])), or None when no single N does."""
    n = max(counts)
    return n if all(min(n, size) == k for size, k in zip(layers, counts)) else None


def all_full(parallel: ParallelConfig) -> ParallelConfig:
    """``parallel`` with every layer fully recomputed: never more activation memory."""
    return replace(parallel, recompute=Recompute.FULL, full_recompute_layers=None)


def resplit(parallel: ParallelConfig, form: RecomputeForm, stage_layers: tuple[int, ...] | None, virtual_stages: int) -> ParallelConfig:
    """``parallel`` with another layer split. Its per-chunk recompute counts belonged to the old
    split: no recomputation and selective stay, any full recomputation becomes every layer
    (never more activation memory)."""
    base = {RecomputeForm.NONE: Recompute.NONE, RecomputeForm.SELECTIVE: Recompute.SELECTIVE}.get(form, Recompute.FULL)
    return replace(parallel, recompute=base, full_recompute_layers=None, stage_layers=stage_layers, virtual_stages=virtual_stages)


def fold_context_parallel(
    parallel: ParallelConfig, training: TrainingSpec, reason: str
) -> tuple[ParallelConfig, TrainingSpec, tuple["Difference", ...]]:
    """For a framework without context parallelism: the same GPUs with cp_size 1, the CP ranks
    becoming data-parallel replicas (dp x cp of them). Each replica then takes whole sequences,
    so the global batch must divide over dp x cp: the micro-batch shrinks to the largest size
    that divides a replica's share, and a global batch that does not divide at all is rounded
    down to a multiple of dp x cp (never below one sequence per replica)."""
    replicas = parallel.dp_size * parallel.cp_size
    out = [differs("parallel.cp_size", parallel.cp_size, 1, reason),
           differs("parallel.dp_size", parallel.dp_size, replicas, "the context-parallel ranks become data-parallel replicas")]
    batch = training.global_batch_size
    if batch % replicas:
        rounded = max(replicas, batch // replicas * replicas)
        out.append(differs(
            "training.global_batch_size", batch, rounded,
            f"{batch} sequences do not divide over {replicas} data-parallel replicas",
        ))
        training = replace(training, global_batch_size=rounded)
    per_replica = training.global_batch_size // replicas
    micro = max(b for b in range(1, min(parallel.micro_batch_size, per_replica) + 1) if per_replica % b == 0)
    if micro != parallel.micro_batch_size:
        out.append(differs(
            "parallel.micro_batch_size", parallel.micro_batch_size, micro,
            f"each of {replicas} replicas takes {per_replica} sequences per step",
        ))
    return replace(parallel, cp_size=1, dp_size=replicas, micro_batch_size=micro), training, tuple(out)


def without_activation_offload(parallel: ParallelConfig, reason: str) -> tuple[ParallelConfig, tuple["Difference", ...]]:
    """For a framework without partial activation offload (``activation_offload_layers``, Megatron-core's
    cpu_offloading_num_layers): the same configuration keeping every layer's activations on the GPU."""
    if not parallel.activation_offload_layers:
        return parallel, ()
    return replace(parallel, activation_offload_layers=0), (
        differs("parallel.activation_offload_layers", parallel.activation_offload_layers, 0, reason),
    )


def without_nvme(parallel: ParallelConfig, framework: str) -> tuple[ParallelConfig, tuple["Difference", ...]]:
    """For a framework without offload to NVMe (every one but DeepSpeed's ZeRO-3: ``nvme_offload``):
    the same configuration keeping the offloaded states in host memory, a difference naming
    ``parallel.nvme_offload``."""
    if parallel.nvme_offload is NvmeOffload.NONE:
        return parallel, ()
    return replace(parallel, nvme_offload=NvmeOffload.NONE), (
        differs(
            "parallel.nvme_offload", parallel.nvme_offload.value, NvmeOffload.NONE.value,
            f"{framework} has no offload to NVMe (DeepSpeed's ZeRO-3 offload_optimizer / offload_param device nvme):"
            " what the plan keeps on NVMe stays in host memory, which the plan found too small",
        ),
    )


def without_bf16_moments(training: TrainingSpec, reason: str) -> tuple[TrainingSpec, tuple["Difference", ...]]:
    """For a framework (or a configuration of one) whose optimizer keeps its moments in fp32 only:
    the same training with fp32 moments (``training.moments_dtype``), more optimizer memory than planned."""
    if training.moments_dtype is MomentsDtype.FP32:
        return training, ()
    return replace(training, moments_dtype=MomentsDtype.FP32), (
        differs("training.moments_dtype", training.moments_dtype.value, MomentsDtype.FP32.value,
                f"{reason}: the moments take 4 bytes each, more optimizer memory per GPU than planned"),
    )


def without_muon(training: TrainingSpec, framework: str) -> tuple[TrainingSpec, tuple["Difference", ...]]:
    """For a launch config with no Muon optimizer to write: the same training stepped by Adam,
    which keeps a second moment for every parameter and has no Newton-Schulz step."""
    if training.optimizer is not OptimizerKind.MUON:
        return training, ()
    return replace(training, optimizer=OptimizerKind.ADAM), (
        differs("training.optimizer", OptimizerKind.MUON.value, OptimizerKind.ADAM.value,
                f"{framework}'s launch config as this export writes it has no Muon optimizer: the job steps Adam,"
                " a second moment per parameter more optimizer memory than planned and no orthogonalisation step"),
    )


def _moe_setting_reset(
    model: ModelSpec, training: TrainingSpec, field: str, default: Enum, reason: str,
) -> tuple[TrainingSpec, tuple["Difference", ...]]:
    """The same training with MoE setting ``field`` at ``default``, the difference named with
    ``reason``, where a framework cannot run the planned value; nothing differs for a dense model,
    which the setting does not touch."""
    planned = getattr(training, field)
    if planned is default or not model.is_moe:
        return training, ()
    changes: dict[str, Any] = {field: default}
    return replace(training, **changes), (differs(f"training.{field}", planned.value, default.value, reason),)


def without_flex_dispatch(model: ModelSpec, training: TrainingSpec, framework: str) -> tuple[TrainingSpec, tuple["Difference", ...]]:
    """For a framework whose expert parallelism dispatches tokens with plain all-to-alls (torchtitan,
    DeepSpeed-MoE as these exports write them): the same training on the alltoall dispatcher, every
    routed copy of a token sent across the network on its own."""
    return _moe_setting_reset(
        model, training, "moe_dispatcher", MoeDispatcher.ALLTOALL,
        f"{framework} dispatches the MoE tokens with all-to-alls: a token routed to several experts in another"
        " node crosses the network once per expert, not once per node as planned",
    )


def without_fp8_act_input(model: ModelSpec, training: TrainingSpec, framework: str) -> tuple[TrainingSpec, tuple["Difference", ...]]:
    """For a framework whose MoE experts keep their activation function's input as fc1 wrote it
    (every exported one: DeepSeek-V3's FP8 cache of the SwiGLU input is its own framework's,
    arXiv 2412.19437 Sec 3.3.3): the same training with the 16-bit input, more activation memory
    than planned."""
    return _moe_setting_reset(
        model, training, "moe_act_input_dtype", ActInputDtype.HALF,
        f"{framework}'s experts keep fc1's 16-bit output for the activation function's backward (no FP8 cache of it):"
        " more activation memory per GPU than planned",
    )


def window_skip_freq(model: ModelSpec) -> int | None:
    """Megatron-core's window_attn_skip_freq for the model's share of windowed layers: N, one
    full-attention layer after N - 1 windowed ones (Megatron-LM's --window-attn-skip-freq), where
    the share is (N - 1) / N; None where every layer has the window or the share is no such ratio."""
    fraction = model.sliding_window_fraction
    if fraction >= 1:
        return None
    n = round(1 / (1 - fraction))
    return n if n >= 2 and abs((n - 1) / n - fraction) < 1e-9 else None


def window_notes(model: ModelSpec, framework: str, writes_window: bool) -> tuple[str, ...]:
    """What a launch config cannot say about the model's sliding window, as notes."""
    if not model.sliding_window:
        return ()
    if not writes_window:
        return (f"{framework} runs no sliding-window attention here: the run attends in full, slower than the plan,"
                f" which costs a {model.sliding_window}-token window in {model.sliding_window_fraction:.0%} of the layers",)
    if model.sliding_window_fraction < 1 and window_skip_freq(model) is None:
        return (f"the window covers {model.sliding_window_fraction:.0%} of the layers, which no skip frequency states:"
                " the files put it in every layer; set the per-layer pattern (window_attn_skip_freq as a list)",)
    return ()


def kv_head_notes(model: ModelSpec, tp_size: int, framework: str, subshards: bool) -> tuple[str, ...]:
    """What a plan with tensor parallelism wider than the model's KV heads needs of the framework, as
    a note (none where tp divides them). Megatron-core sub-shards the QKV activations from 0.16.0
    (NVIDIA/Megatron-LM #2565; ``training.kv_head_subsharding``); ``subshards``: the framework's
    current release does. The others split K and V into whole heads per rank."""
    kv = model.num_kv_heads
    if kv % tp_size == 0:
        return ()
    if subshards:
        return (f"tp {tp_size} is wider than the model's {kv} KV heads: {framework} runs it from Megatron-core 0.16.0"
                " (QKV sub-sharding, NVIDIA/Megatron-LM #2565); older releases need tp to divide the KV heads",)
    return (f"tp {tp_size} is wider than the model's {kv} KV heads: {framework} splits K and V into whole heads per rank"
            f" and needs tp to divide {kv}; plan with training.kv_head_subsharding false to keep to that",)


def dispatcher_notes(model: ModelSpec, training: TrainingSpec, framework: str) -> tuple[str, ...]:
    """What the files' MoE token dispatcher means for the plan's timing, as a note (Megatron-core
    stacks: Megatron-LM and NeMo write ``alltoall``, which runs without extra packages).

    Megatron-core's alltoall dispatcher copies the per-expert token counts to the host and
    synchronises once per MoE layer (megatron/core/transformer/moe/token_dispatcher.py). Where the
    plan costs that (``training.moe_host_s_per_layer`` above 0, megatron-core-2024's measured host
    time per MoE layer), the files run as planned, and the note names the flex dispatcher, which
    Megatron-Bridge's published runs show reading within about 10% of plans costed without the host
    time (bench family mbridge-qwen3's HybridEP rows), as the way past it. Where the plan does not
    cost it (0), the alltoall runs of models with many small experts measured 13% to 5x slower than
    such plans (mbridge-qwen3, mbridge-gptoss, aws-qwen3). Which backend runs where follows
    Megatron-Bridge's apply_flex_dispatcher_backend (training/flex_dispatcher_backend.py at
    df0289c): DeepEP on Ampere, Hopper, B200 and B300, HybridEP on those and on GB200 / GB300 NVL72."""
    if not model.is_moe:
        return ()
    backends = "deepep (Hopper, B200, B300) or hybridep (also GB200 / GB300 NVL72)"
    if training.moe_dispatcher is MoeDispatcher.FLEX:
        return (f"{framework} runs the MoE dispatch here with Megatron-core's flex dispatcher on DeepEP, as the plan costs it"
                " (a token crosses the network once per node it is routed to); it needs DeepEP installed, and on"
                " GB200 / GB300 NVL72 Megatron-Bridge sets the hybridep backend instead",)
    if training.moe_host_s_per_layer > 0:
        return (f"{framework} runs the MoE all-to-alls here with Megatron-core's alltoall dispatcher, which syncs the host"
                f" once per MoE layer; the plan costs that sync ({training.moe_host_s_per_layer * 1e3:.1f} ms of host work per MoE"
                " layer and forward pass that the GPU cannot run ahead of). With DeepEP or HybridEP installed, the flex dispatcher"
                f" lets the GPU run ahead and can be faster where the layers are short: set it with backend {backends}",)
    return (f"{framework} runs the MoE all-to-alls here with Megatron-core's alltoall dispatcher, which syncs the host"
            " once per MoE layer; the plan costs them as the flex dispatcher runs them (DeepEP or HybridEP), and"
            " published alltoall runs of models with many small experts (Qwen3, gpt-oss) measured 13% to 5x slower than"
            f" such plans: with DeepEP or HybridEP installed, set the dispatcher to flex with backend {backends}",)


def launch_environment(training: TrainingSpec) -> list[str]:
    """Shell lines a launch script sets for the job's own run settings: CUDA_LAUNCH_BLOCKING=1
    where the plan was costed with blocking launches (``training.launch_blocking``)."""
    return ["export CUDA_LAUNCH_BLOCKING=1"] if training.launch_blocking else []


def _without_flag(training: TrainingSpec, flag: str, why: str, consequence: str) -> tuple[TrainingSpec, tuple["Difference", ...]]:
    """The same training with the boolean ``flag`` off where the plan had it on, and the difference
    that says so (``why`` the launch does not run it, and what that costs)."""
    if not getattr(training, flag):
        return training, ()
    off: dict[str, Any] = {flag: False}
    return replace(training, **off), (differs(f"training.{flag}", True, False, f"{why}: {consequence}"),)


def without_overlap_grad_reduce(training: TrainingSpec, why: str, consequence: str) -> tuple[TrainingSpec, tuple["Difference", ...]]:
    """For a launch that reduces gradients only after the last backward: the same training with
    ``overlap_grad_reduce`` off, and the difference (``why`` and what it costs)."""
    return _without_flag(training, "overlap_grad_reduce", why, consequence)


def without_launch_blocking(training: TrainingSpec, framework: str) -> tuple[TrainingSpec, tuple["Difference", ...]]:
    """For an export that is a configuration file, which does not set the environment the job
    starts in: the same training with asynchronous launches, a difference naming
    ``training.launch_blocking`` (the plan's host time per layer then hides behind the GPU's)."""
    return _without_flag(
        training, "launch_blocking", f"{framework}'s configuration file cannot set CUDA_LAUNCH_BLOCKING",
        "started without it, kernel launches run ahead of the GPU and steps take less time than planned;"
        " export CUDA_LAUNCH_BLOCKING=1 where the job starts to run as planned",
    )


def without_fp8_attention(training: TrainingSpec, framework: str, reason: str = "") -> tuple[TrainingSpec, tuple["Difference", ...]]:
    """For a framework whose launch runs attention in 16 bit: the same training without FP8
    attention (``training.fp8_attention``), a difference saying the attention GEMMs take longer
    than planned. ``reason``: why the framework does not run it (default: it has no FP8 attention)."""
    return _without_flag(training, "fp8_attention", reason or f"{framework} has no FP8 attention kernel",
                         "attention runs in 16 bit, its GEMMs take longer than planned")


def without_fp8_output_proj(training: TrainingSpec, framework: str, reason: str = "") -> tuple[TrainingSpec, tuple["Difference", ...]]:
    """For a framework whose launch keeps the output layer in 16 bit: the same training without
    ``training.fp8_output_proj``, a difference saying the logits GEMM takes longer than planned."""
    return _without_flag(training, "fp8_output_proj", reason or f"{framework} has no MXFP8 output projection",
                         "the logits GEMM runs in 16 bit and takes longer than planned")


def listed(values: tuple[int, ...] | None) -> str:
    return "null" if values is None else "[" + ", ".join(str(v) for v in values) + "]"


def differs(field: str, planned: object, exported: object, reason: str) -> Difference:
    """A Difference with both values written as JSON-like text."""
    return Difference(field, _text(planned), _text(exported), reason)


def _text(value: object) -> str:
    if isinstance(value, tuple) or value is None:
        return listed(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


def render_shell(program: str, launcher: list[str], args: list[Argument], header: list[str], environment: list[str]) -> str:
    """A bash snippet: comments, exports, then the launcher, the program and one argument per
    line (values quoted for the shell). ``$EXTRA_ARGS`` takes the user's own arguments."""
    lines = ["#!/usr/bin/env bash", *(f"# {line}" for line in header), "set -euo pipefail", *environment]
    lines.append(" ".join(launcher) + " \\")
    lines.append(f"    {program} \\")
    for flag, value in args:
        values = () if value is None else (value,) if isinstance(value, str) else value
        lines.append(" ".join(("   ", flag, *map(shlex.quote, values), "\\")))
    lines.append("    ${EXTRA_ARGS:-}")
    return "\n".join(lines) + "\n"
