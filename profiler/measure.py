"""Time each layer's forward and backward and count the bytes autograd keeps for backward.

Method (one layer at a time, so a large model's layers need not fit together):
- warm-up: ``warmup`` forward+backward passes (allocator, kernel selection, caches);
- timing: ``repeats`` passes, each timing the forward and the backward separately; the profile
  holds the median (or the minimum, ``statistic="min"``: on a shared, noisy host interference
  only ever adds time, so the fastest pass is the best estimate of the undisturbed one). On a GPU the times come from CUDA events around the work on the current
  stream (no host overhead between kernels counted twice); on a CPU from ``time.perf_counter``.
  Backward starts from a random output gradient (the head from its loss), and parameter
  gradients accumulate as they do across micro-batches;
- activation bytes: one extra forward under ``torch.autograd.graph.saved_tensors_hooks``; every
  tensor autograd saves is counted once per underlying storage (a view keeps its whole storage
  alive), parameters and buffers excluded (they are weights, not activations). The same is done
  with the attention core checkpointed (selective recompute) for ``selective_activation_bytes``;
- ``selective_recompute_s``: the median forward time of the attention core alone, the extra
  work selective recomputation adds in backward (Korthikanti et al. 2022, Sec 5).
"""

from __future__ import annotations

import functools
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from profiler.layers import EmbeddingLayer, HeadLayer, ShardShape, TransformerBlock
from solver.cost.profile import LayerKind, LayerProfile, ModelProfile, Origin
from solver.io.profile_format import ProfileDocument
from solver.spec.errors import SpecError
from solver.spec.model import ModelSpec, PositionEmbedding
from solver.spec.training import Precision

DTYPES = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}
STATISTICS = {"median": statistics.median, "min": min}
TOKEN_ID_DTYPE = torch.int64  # token ids and targets, 8 bytes each


@dataclass(frozen=True)
class ProfileSettings:
    """How to measure: the configuration (one micro-batch, one GPU of tp_size) and the method."""

    micro_batch_size: int = 1
    seq_length: int | None = None  # None: the model's seq_length
    tp_size: int = 1
    precision: Precision = Precision.BF16
    device: str = "cpu"
    flash_attention: bool = True
    warmup: int = 3
    repeats: int = 10
    seed: int = 0
    statistic: str = "median"  # or "min"

    def check(self, model: ModelSpec) -> None:
        for name in ("micro_batch_size", "tp_size", "repeats"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(name, f"must be a positive integer, got {value!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise SpecError("warmup", f"must be a non-negative integer, got {self.warmup!r}")
        seq = self.seq_length if self.seq_length is not None else model.seq_length
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise SpecError("seq_length", f"must be a positive integer, got {seq!r}")
        if model.position_embedding is PositionEmbedding.LEARNED and seq > model.seq_length:
            raise SpecError("seq_length", f"{seq} exceeds the model's learned positions ({model.seq_length})")
        if Precision(self.precision) not in DTYPES:
            raise SpecError(
                "precision",
                f"{Precision(self.precision).value} layers cannot be built with plain PyTorch; profile in bf16 "
                "and let derive_profile carry it to fp8 with the analytic ratios",
            )
        if self.statistic not in STATISTICS:
            raise SpecError("statistic", f"expected one of {', '.join(STATISTICS)}, got {self.statistic!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise SpecError("device", "CUDA was asked for but torch.cuda.is_available() is False")


def device_name(device: torch.device) -> str:
    """The device as the framework names it (``torch.cuda.get_device_name``; CPU: its model)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    processor = platform.processor() or platform.machine()
    return f"cpu ({processor}, {torch.get_num_threads()} threads)"


class _Timer:
    """Seconds taken by a callable: CUDA events on a GPU, perf_counter on a CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def __call__(self, work: Callable[[], object]) -> tuple[float, object]:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            result = work()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0, result  # elapsed_time is in ms
        began = time.perf_counter()
        result = work()
        return time.perf_counter() - began, result


def _kept_bytes(forward: Callable[[], object], module: torch.nn.Module) -> int:
    """Bytes of the distinct storages autograd saves during ``forward`` (weights excluded)."""
    weights = {t.untyped_storage().data_ptr() for t in list(module.parameters()) + list(module.buffers())}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = forward()
    del output
    return sum(storages.values())


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.nelement() * tensor.element_size()


def _measure(
    forward: Callable[[], torch.Tensor],
    backward: Callable[[torch.Tensor], None],
    settings: ProfileSettings,
    timer: _Timer,
) -> tuple[float, float]:
    """Forward and backward seconds after warm-up (``settings.statistic`` of the repeats)."""
    for _ in range(settings.warmup):
        backward(forward())
    forward_s, backward_s = [], []
    for _ in range(settings.repeats):
        seconds, output = timer(forward)
        forward_s.append(seconds)
        seconds, _ = timer(functools.partial(backward, output))
        backward_s.append(seconds)
    reduce = STATISTICS[settings.statistic]
    return reduce(forward_s), reduce(backward_s)


def _parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@dataclass(frozen=True)
class _Inputs:
    """Random inputs of one micro-batch on the measured device, from a seeded generator."""

    device: torch.device
    dtype: torch.dtype
    batch: int
    seq: int
    generator: torch.Generator

    def hidden(self, width: int, requires_grad: bool = False) -> torch.Tensor:
        values = torch.randn(self.batch, self.seq, width, generator=self.generator)
        return values.to(device=self.device, dtype=self.dtype).requires_grad_(requires_grad)

    def token_ids(self, vocab: int) -> torch.Tensor:
        ids = torch.randint(0, vocab, (self.batch, self.seq), generator=self.generator, dtype=TOKEN_ID_DTYPE)
        return ids.to(self.device)


def _embedding_profile(model: ModelSpec, shard: ShardShape, inputs: _Inputs, settings: ProfileSettings, timer: _Timer) -> LayerProfile:
    """Token ids in, hidden states out; backward from a random output gradient."""
    embedding = EmbeddingLayer(model, shard).to(device=inputs.device, dtype=inputs.dtype)
    ids = inputs.token_ids(shard.vocab_size)
    grad = inputs.hidden(shard.hidden_size)
    forward_s, backward_s = _measure(lambda: embedding(ids), lambda out: out.backward(grad), settings, timer)
    kept = _kept_bytes(lambda: embedding(ids), embedding)
    return LayerProfile(
        name="embedding", kind=LayerKind.EMBEDDING, forward_s=forward_s, backward_s=backward_s,
        parameter_count=_parameters(embedding), activation_bytes=kept, selective_activation_bytes=kept,
        checkpoint_bytes=_nbytes(ids), output_bytes=_nbytes(grad), origin=Origin.MEASURED,
    )


def _block_profile(
    index: int, model: ModelSpec, shard: ShardShape, inputs: _Inputs, settings: ProfileSettings, timer: _Timer
) -> LayerProfile:
    """One transformer block: times, kept bytes with and without selective recompute, core time."""
    block = TransformerBlock(model, shard, inputs.seq, settings.flash_attention).to(device=inputs.device, dtype=inputs.dtype)
    x = inputs.hidden(shard.hidden_size, requires_grad=True)
    grad = inputs.hidden(shard.hidden_size)

    def backward(out: torch.Tensor) -> None:
        out.backward(grad)
        x.grad = None

    forward_s, backward_s = _measure(lambda: block(x), backward, settings, timer)
    kept = _kept_bytes(lambda: block(x), block)
    block.selective = True
    selective_kept = _kept_bytes(lambda: block(x), block)
    block.selective = False
    with torch.no_grad():
        q, k, v = block.qkv_heads(x)
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    core_s = []
    for repeat in range(settings.warmup + settings.repeats):
        seconds, _ = timer(lambda: block.core(q, k, v))
        if repeat >= settings.warmup:
            core_s.append(seconds)
    return LayerProfile(
        name=f"layer.{index}", kind=LayerKind.TRANSFORMER, forward_s=forward_s, backward_s=backward_s,
        parameter_count=_parameters(block), activation_bytes=kept,
        selective_activation_bytes=min(selective_kept, kept), checkpoint_bytes=_nbytes(x),
        output_bytes=_nbytes(x), selective_recompute_s=STATISTICS[settings.statistic](core_s),
        origin=Origin.MEASURED,
    )


def _head_profile(model: ModelSpec, shard: ShardShape, inputs: _Inputs, settings: ProfileSettings, timer: _Timer) -> LayerProfile:
    """Final norm, logits and loss; backward from the loss."""
    head = HeadLayer(model, shard).to(device=inputs.device, dtype=inputs.dtype)
    x = inputs.hidden(shard.hidden_size, requires_grad=True)
    targets = inputs.token_ids(shard.vocab_size)

    def backward(loss: torch.Tensor) -> None:
        loss.backward()
        x.grad = None

    forward_s, backward_s = _measure(lambda: head(x, targets), backward, settings, timer)
    kept = _kept_bytes(lambda: head(x, targets), head)
    return LayerProfile(
        name="head", kind=LayerKind.HEAD, forward_s=forward_s, backward_s=backward_s,
        parameter_count=_parameters(head), activation_bytes=kept, selective_activation_bytes=kept,
        checkpoint_bytes=_nbytes(x), output_bytes=0,  # the loss goes to no further layer
        origin=Origin.MEASURED,
    )


def profile_model(model: ModelSpec, settings: ProfileSettings) -> ProfileDocument:
    """Measure every layer of ``model`` at ``settings``; returns a ``partitura-profile/1`` document.

    Times in seconds per micro-batch on one GPU of the TP group (no TP communication), bytes per
    micro-batch; see the module docstring for the method. One layer lives at a time.
    """
    settings.check(model)
    precision = Precision(settings.precision)
    device = torch.device(settings.device)
    seq = settings.seq_length if settings.seq_length is not None else model.seq_length
    shard = ShardShape.of(model, settings.tp_size)
    torch.manual_seed(settings.seed)
    inputs = _Inputs(
        device, DTYPES[precision], settings.micro_batch_size, seq, torch.Generator(device="cpu").manual_seed(settings.seed)
    )
    timer = _Timer(device)
    layers = [_embedding_profile(model, shard, inputs, settings, timer)]
    for index in range(model.num_layers):
        layers.append(_block_profile(index, model, shard, inputs, settings, timer))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    layers.append(_head_profile(model, shard, inputs, settings, timer))
    profile = ModelProfile(
        model_name=model.name,
        tp_size=settings.tp_size,
        micro_batch_size=settings.micro_batch_size,
        seq_length=seq,
        precision=precision,
        layers=tuple(layers),
        device=device_name(device),
        notes=("measured one GPU's share of each layer; TP communication not included",),
    )
    measurement = {
        "warmup": settings.warmup,
        "repeats": settings.repeats,
        "statistic": settings.statistic,
        "timer": "cuda_events" if device.type == "cuda" else "perf_counter",
        "torch_version": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "seed": settings.seed,
    }
    return ProfileDocument(
        model=model,
        profile=profile,
        sequence_parallel=False,
        flash_attention=settings.flash_attention,
        source=f"partitura profile (torch {torch.__version__})",
        measurement=measurement,
    )
