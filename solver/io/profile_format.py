"""Measured profiles in and out: the ``partitura-profile/1`` JSON document, and derivation of a
measured profile at other configurations (PipeDream's output is imported by ``profiler.pipedream``).

A profile document is what ``partitura profile`` writes and ``POST /v1/profiles`` accepts::

    {
      "format": "partitura-profile/1",
      "model": {"name": "gpt2-xl", "num_layers": 48, "hidden_size": 1600, ...},   # a ModelSpec
      "device": "NVIDIA H100 80GB HBM3",      # as the framework names it
      "precision": "bf16",
      "micro_batch_size": 1, "seq_length": 1024, "tp_size": 1,
      "sequence_parallel": false, "flash_attention": true,        # optional, these defaults
      "source": "partitura profile (torch 2.13.0)",               # optional, free text
      "measurement": {"warmup": 3, "repeats": 10, ...},           # optional, scalars only
      "layers": [
        {"name": "embedding", "kind": "embedding", "forward_s": 1.2e-4, "backward_s": 3.0e-4,
         "activation_bytes": 0, "output_bytes": 3276800, "parameter_count": 82049600}, ...
      ]
    }

Per layer, for ONE micro-batch on ONE GPU of a tensor-parallel group of ``tp_size``:
``forward_s``, ``backward_s`` (seconds), ``activation_bytes`` (kept for backward),
``output_bytes`` (sent to the next layer) and ``parameter_count`` or ``parameter_bytes`` (16-bit
weights, 2 bytes each) are required; ``selective_activation_bytes`` (default: activation_bytes,
i.e. no saving known), ``checkpoint_bytes`` (default: the layer's input, the previous layer's
output_bytes), ``selective_recompute_s``, ``tp_comm_s``, ``model_flops`` (default 0: unknown,
filled from the analytic model by ``derive_profile``) and ``origin`` (default measured) are
optional (null means not given). Layers run embedding, ``model.num_layers`` transformer layers,
head, in that order.
Every error is a ``SpecError`` whose field names the place, e.g. ``layers[3].forward_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Sequence

from solver.cost.profile import (
    BYTE_FIELDS,
    TIME_FIELDS,
    LayerKind,
    LayerProfile,
    ModelProfile,
    Origin,
)
from solver.spec.errors import SpecError
from solver.spec.model import Architecture, MlpActivation, ModelSpec, PositionEmbedding
from solver.spec.training import Precision

FORMAT = "partitura-profile/1"

# Weights are kept in 16 bit under every precision the solver knows (fp8 runs only the GEMMs in
# 8 bit, see solver.spec.training.Precision), so a parameter is 2 bytes in a profile document.
PARAMETER_BYTES = 2

MODEL_KEYS = (
    "name", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size",
    "vocab_size", "seq_length", "mlp_activation", "tied_embeddings", "architecture",
    "position_embedding", "head_dim", "hidden_dropout", "attention_dropout",
)
MODEL_INFO_KEYS = ("display_name", "source")  # catalog entries carry these; kept out of ModelSpec
TOP_KEYS = (
    "format", "model", "device", "precision", "micro_batch_size", "seq_length", "tp_size",
    "sequence_parallel", "flash_attention", "source", "measurement", "notes", "layers",
)
LAYER_REQUIRED = ("name", "kind", "forward_s", "backward_s", "activation_bytes", "output_bytes")
LAYER_OPTIONAL = (
    "parameter_count", "parameter_bytes", "selective_activation_bytes", "checkpoint_bytes",
    "selective_recompute_s", "tp_comm_s", "model_flops", "origin",
)
# Limits of the format: names, device and free text are printable Unicode of bounded length, and
# structural sizes stay below 2^24 (as the API's sizes do), so a document fits any store and a typo
# (1e12 layers) cannot become a huge computation.
NAME_MAX_CHARS = 128
DEVICE_MAX_CHARS = 256
TEXT_MAX_CHARS = 4096
SIZE_MAX = 2**24
# Free-form notes and measurement settings a document may carry (the profiler writes one note and
# a handful of settings), so a document's size is bounded by its layers, not by its comments.
NOTES_MAX = 64
MEASUREMENT_KEYS_MAX = 64


@dataclass(frozen=True)
class ProfileDocument:
    """A validated profile document: the model it describes, the profile, and how it was taken."""

    model: ModelSpec
    profile: ModelProfile
    sequence_parallel: bool = False
    flash_attention: bool = True
    source: str = ""
    measurement: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Field checks: each returns the clean value or raises SpecError naming the field.


def check_integer(path: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """An integer in [minimum, maximum]; an integral JSON float (1e6) is accepted, 1.5 or true are not."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(path, f"must be an integer, got {value!r}")
    if isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            raise SpecError(path, f"must be an integer, got {value!r}")
        value = int(value)
    if value < minimum:
        raise SpecError(path, f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise SpecError(path, f"must be at most {maximum}, got {value}")
    return value


def _seconds(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(path, f"must be a finite number of seconds, got {value!r}")
    if value < 0:
        raise SpecError(path, f"must not be negative, got {value!r}")
    return float(value)


def _boolean(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(path, f"must be true or false, got {value!r}")
    return value


def _text(path: str, value: Any, allow_empty: bool = False, max_chars: int = NAME_MAX_CHARS) -> str:
    """Printable Unicode text of at most ``max_chars`` characters (tabs and newlines allowed)."""
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise SpecError(path, f"must be a non-empty string, got {value!r}")
    if len(value) > max_chars:
        raise SpecError(path, f"must be at most {max_chars} characters, got {len(value)}")
    if any(ord(c) < 32 and c not in "\t\n" or ord(c) == 127 for c in value):
        raise SpecError(path, "must not contain control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecError(path, "must be valid Unicode text (no lone surrogates)") from None
    return value


def _choice(path: str, value: Any, enum: type[Enum]) -> Any:
    try:
        return enum(value)
    except ValueError:
        raise SpecError(path, f"expected one of {', '.join(e.value for e in enum)}, got {value!r}") from None


def _object(path: str, value: Any, allowed: Sequence[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(path, f"must be an object, got {type(value).__name__}")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        where = f"{path}.{unknown[0]}" if path else str(unknown[0])
        raise SpecError(where, f"unknown field; known: {', '.join(allowed)}")
    return value


def _required(path: str, raw: dict[str, Any], key: str) -> Any:
    if key not in raw:
        raise SpecError(f"{path}.{key}" if path else key, "is required")
    return raw[key]


# ---------------------------------------------------------------------------------------------
# Model spec (the solver may not import catalog, so it reads the same keys itself).


def model_to_dict(model: ModelSpec) -> dict[str, Any]:
    """The ModelSpec as the catalog/API writes it (enum values as strings)."""
    out = {key: getattr(model, key) for key in MODEL_KEYS}
    for key in ("mlp_activation", "architecture", "position_embedding"):
        out[key] = out[key].value
    if out["head_dim"] is None:  # written only where the heads are not hidden / heads wide
        del out["head_dim"]
    return out


def model_from_dict(raw: Any, path: str = "model") -> ModelSpec:
    """A ModelSpec from the catalog/API form; unknown keys and bad values name ``model.<key>``."""
    raw = _object(path, raw, MODEL_KEYS + MODEL_INFO_KEYS)
    kwargs: dict[str, Any] = {"name": _text(f"{path}.name", _required(path, raw, "name"))}
    for key in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length"):
        kwargs[key] = check_integer(f"{path}.{key}", _required(path, raw, key), 1, SIZE_MAX)
    for key in ("num_kv_heads", "ffn_hidden_size", "head_dim"):
        if raw.get(key) is not None:
            kwargs[key] = check_integer(f"{path}.{key}", raw[key], 1, SIZE_MAX)
    if raw.get("tied_embeddings") is not None:
        kwargs["tied_embeddings"] = _boolean(f"{path}.tied_embeddings", raw["tied_embeddings"])
    for key, enum in (
        ("mlp_activation", MlpActivation), ("architecture", Architecture),
        ("position_embedding", PositionEmbedding),
    ):
        if raw.get(key) is not None:
            kwargs[key] = _choice(f"{path}.{key}", raw[key], enum)
    for key in ("hidden_dropout", "attention_dropout"):  # probabilities, checked by ModelSpec
        if raw.get(key) is not None:
            kwargs[key] = raw[key]
    try:
        return ModelSpec(**kwargs)
    except SpecError as err:
        raise SpecError(f"{path}.{err.field.split('.', 1)[-1]}", err.reason) from None


# ---------------------------------------------------------------------------------------------
# Document <-> ProfileDocument


def _layer_from_dict(index: int, raw: Any, previous_output_bytes: int | None) -> LayerProfile:
    path = f"layers[{index}]"
    raw = _object(path, raw, LAYER_REQUIRED + LAYER_OPTIONAL)
    for key in LAYER_REQUIRED:
        _required(path, raw, key)
    # A required field must hold a valid value (null is an error); an optional one may be null,
    # which means "not given".
    times = {
        key: _seconds(f"{path}.{key}", raw[key])
        for key in TIME_FIELDS if key in LAYER_REQUIRED or raw.get(key) is not None
    }
    sizes = {
        key: check_integer(f"{path}.{key}", raw[key], 0)
        for key in BYTE_FIELDS if key in LAYER_REQUIRED or raw.get(key) is not None
    }
    activation_bytes = sizes["activation_bytes"]
    sizes.setdefault("selective_activation_bytes", activation_bytes)
    if sizes["selective_activation_bytes"] > activation_bytes:
        raise SpecError(
            f"{path}.selective_activation_bytes",
            f"{sizes['selective_activation_bytes']} exceeds activation_bytes={activation_bytes}: "
            "selective recomputation keeps a subset of the activations",
        )
    # Full recompute keeps the layer's input; the first layer has nothing cheaper than itself.
    sizes.setdefault(
        "checkpoint_bytes", activation_bytes if previous_output_bytes is None else previous_output_bytes
    )
    count = raw.get("parameter_count")
    size = raw.get("parameter_bytes")
    if count is None and size is None:
        raise SpecError(f"{path}.parameter_count", "is required (or parameter_bytes)")
    if count is not None:
        count = check_integer(f"{path}.parameter_count", count, 0)
    if size is not None:
        size = check_integer(f"{path}.parameter_bytes", size, 0)
        if count is None:
            if size % PARAMETER_BYTES:
                raise SpecError(
                    f"{path}.parameter_bytes",
                    f"{size} is not a whole number of {PARAMETER_BYTES}-byte (16-bit) parameters",
                )
            count = size // PARAMETER_BYTES
        elif size != count * PARAMETER_BYTES:
            raise SpecError(
                f"{path}.parameter_bytes",
                f"{size} disagrees with parameter_count={count} x {PARAMETER_BYTES} bytes",
            )
    flops = raw.get("model_flops")
    flops = 0.0 if flops is None else flops
    if isinstance(flops, bool) or not isinstance(flops, (int, float)) or not math.isfinite(flops) or flops < 0:
        raise SpecError(f"{path}.model_flops", f"must be a non-negative number, got {flops!r}")
    return LayerProfile(
        name=_text(f"{path}.name", raw["name"]),
        kind=_choice(f"{path}.kind", raw["kind"], LayerKind),
        parameter_count=count,
        model_flops=float(flops),
        origin=_choice(f"{path}.origin", Origin.MEASURED.value if raw.get("origin") is None else raw["origin"], Origin),
        # Keyword arguments by field group: the time fields as floats, the byte fields as ints.
        **times,  # type: ignore[arg-type]
        **sizes,
    )


def _check_layer_order(layers: Sequence[LayerProfile], model: ModelSpec) -> None:
    kinds = [layer.kind for layer in layers]
    if kinds[0] is not LayerKind.EMBEDDING or kinds.count(LayerKind.EMBEDDING) != 1:
        bad = next((i for i, k in enumerate(kinds) if k is LayerKind.EMBEDDING and i), 0)
        raise SpecError(f"layers[{bad}].kind", "exactly one embedding layer is needed, and it comes first")
    if kinds[-1] is not LayerKind.HEAD or kinds.count(LayerKind.HEAD) != 1:
        bad = next((i for i, k in enumerate(kinds) if k is LayerKind.HEAD), len(kinds) - 1)
        raise SpecError(f"layers[{bad}].kind", "exactly one head layer is needed, and it comes last")
    transformers = len(kinds) - 2
    if transformers != model.num_layers:
        raise SpecError(
            "layers", f"has {transformers} transformer layers but model.num_layers is {model.num_layers}"
        )
    seen: dict[str, int] = {}
    for index, layer in enumerate(layers):
        if layer.name in seen:
            raise SpecError(f"layers[{index}].name", f"{layer.name!r} repeats layers[{seen[layer.name]}]")
        seen[layer.name] = index


def parse_profile_document(raw: Any) -> ProfileDocument:
    """Validate a ``partitura-profile/1`` document (parsed JSON) and return it as solver types.

    Raises SpecError naming the first bad field (``format``, ``model.hidden_size``,
    ``layers[3].forward_s``, ...). Nothing is silently repaired; optional fields get the defaults
    stated in this module's docstring.
    """
    raw = _object("", raw, TOP_KEYS)
    fmt = _required("", raw, "format")
    if fmt != FORMAT:
        raise SpecError("format", f"expected {FORMAT!r}, got {fmt!r}")
    model = model_from_dict(_required("", raw, "model"))
    precision = _choice("precision", _required("", raw, "precision"), Precision)
    micro_batch_size = check_integer("micro_batch_size", _required("", raw, "micro_batch_size"), 1, SIZE_MAX)
    seq_length = check_integer("seq_length", _required("", raw, "seq_length"), 1, SIZE_MAX)
    tp_size = check_integer("tp_size", _required("", raw, "tp_size"), 1, SIZE_MAX)
    if model.position_embedding is PositionEmbedding.LEARNED and seq_length > model.seq_length:
        raise SpecError("seq_length", f"{seq_length} exceeds the model's learned positions ({model.seq_length})")
    if model.num_attention_heads % tp_size:
        raise SpecError("tp_size", f"{tp_size} does not divide num_attention_heads={model.num_attention_heads}")
    measurement = raw.get("measurement", {})
    if not isinstance(measurement, dict):
        raise SpecError("measurement", "must be an object of plain values (strings, numbers, booleans)")
    if len(measurement) > MEASUREMENT_KEYS_MAX:
        raise SpecError("measurement", f"must have at most {MEASUREMENT_KEYS_MAX} settings, got {len(measurement)}")
    for key, value in measurement.items():
        _text(f"measurement.{key}", key)
        if isinstance(value, str):
            _text(f"measurement.{key}", value, allow_empty=True, max_chars=TEXT_MAX_CHARS)
        elif isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"measurement.{key}", f"must be a finite number, got {value!r}")
        elif value is not None and not isinstance(value, (int, float, bool)):
            raise SpecError(f"measurement.{key}", "must be a plain value (string, number, boolean)")
    notes = raw.get("notes", [])
    if not isinstance(notes, list):
        raise SpecError("notes", "must be a list of strings")
    if len(notes) > NOTES_MAX:
        raise SpecError("notes", f"must have at most {NOTES_MAX} notes, got {len(notes)}")
    for index, note in enumerate(notes):
        _text(f"notes[{index}]", note, allow_empty=True, max_chars=TEXT_MAX_CHARS)
    layers_raw = _required("", raw, "layers")
    if not isinstance(layers_raw, list) or len(layers_raw) < 3:
        raise SpecError("layers", "must be a list: embedding, at least one transformer layer, head")
    layers: list[LayerProfile] = []
    for index, layer_raw in enumerate(layers_raw):
        previous = layers[-1].output_bytes if layers else None
        layers.append(_layer_from_dict(index, layer_raw, previous))
    _check_layer_order(layers, model)
    sequence_parallel = _boolean("sequence_parallel", raw.get("sequence_parallel", False))
    flash_attention = _boolean("flash_attention", raw.get("flash_attention", True))
    profile = ModelProfile(
        model_name=model.name,
        tp_size=tp_size,
        micro_batch_size=micro_batch_size,
        seq_length=seq_length,
        precision=precision,
        layers=tuple(layers),
        device=_text("device", _required("", raw, "device"), max_chars=DEVICE_MAX_CHARS),
        notes=tuple(notes),
        sequence_parallel=sequence_parallel,
        flash_attention=flash_attention,
    )
    return ProfileDocument(
        model=model,
        profile=profile,
        sequence_parallel=sequence_parallel,
        flash_attention=flash_attention,
        source=_text("source", raw.get("source", ""), allow_empty=True, max_chars=TEXT_MAX_CHARS),
        measurement=dict(measurement),
    )


def profile_document(doc: ProfileDocument) -> dict[str, Any]:
    """The JSON form of a profile (inverse of ``parse_profile_document``; floats round-trip)."""
    profile = doc.profile
    layers = []
    for layer in profile.layers:
        entry: dict[str, Any] = {"name": layer.name, "kind": layer.kind.value}
        entry.update({key: getattr(layer, key) for key in TIME_FIELDS + BYTE_FIELDS})
        entry["parameter_count"] = layer.parameter_count
        entry["parameter_bytes"] = layer.parameter_count * PARAMETER_BYTES
        entry["model_flops"] = layer.model_flops
        entry["origin"] = layer.origin.value
        layers.append(entry)
    return {
        "format": FORMAT,
        "model": model_to_dict(doc.model),
        "device": profile.device,
        "precision": profile.precision.value,
        "micro_batch_size": profile.micro_batch_size,
        "seq_length": profile.seq_length,
        "tp_size": profile.tp_size,
        "sequence_parallel": doc.sequence_parallel,
        "flash_attention": doc.flash_attention,
        "source": doc.source,
        "measurement": dict(doc.measurement),
        "notes": list(profile.notes),
        "layers": layers,
    }


# ---------------------------------------------------------------------------------------------
# Derivation at another tp_size / micro-batch size


