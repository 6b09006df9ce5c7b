"""Which per-layer profile a configuration is costed with: the analytic one, or a measured one
carried to another tensor-parallel size, micro-batch or sequence length by the analytic model's
ratios (what one GPU cannot measure, TP communication and model FLOPs, comes from the analytic
model)."""

from __future__ import annotations

from dataclasses import replace

from solver.cost.analytic import analytic_layers, analytic_profile
from solver.cost.profile import (
    BYTE_FIELDS,
    TIME_FIELDS,
    LayerChain,
    ModelProfile,
    Origin,
    ProfileShape,
)
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec
from solver.spec.model import ModelSpec
from solver.spec.training import TrainingSpec

# Fields derive_profile scales by the analytic model's target/measured ratio.
SCALED_FIELDS = TIME_FIELDS + BYTE_FIELDS + ("parameter_count", "model_flops", "cp_comm_s")


def _check_same_chain(measured: ModelProfile, other: ModelProfile, label: str) -> None:
    if len(other.layers) != len(measured.layers):
        raise SpecError(
            "profile.layers", f"{label} has {len(other.layers)} layers, the measured profile {len(measured.layers)}"
        )
    for index, (mine, theirs) in enumerate(zip(measured.layers, other.layers, strict=True)):
        if mine.kind is not theirs.kind:
            raise SpecError(
                f"profile.layers[{index}].kind", f"measured {mine.kind.value}, {label} {theirs.kind.value}"
            )

def derive_profile(
    measured: ModelProfile, analytic_at_measured: ModelProfile, analytic_at_target: ModelProfile
) -> ModelProfile:
    """The measured profile carried to the target configuration with the analytic model's ratios.

    Returns a ModelProfile at ``analytic_at_target``'s tp_size, micro-batch size, sequence length
    and precision. For each layer and field in SCALED_FIELDS:
    ``value = measured * analytic_at_target / analytic_at_measured`` (the measurement fixes the
    level, the analytic model the trend, as PipeDream-style profiles are reused in Piper and
    Alpa-style cost models). Fields the measurement lacks (0, e.g. ``tp_comm_s``, which one GPU
    cannot measure, or ``model_flops``) take the analytic target value; a missing
    ``selective_recompute_s`` takes the analytic value scaled by the layer's measured/analytic
    forward ratio. Where both analytic values are 0 the measured value is kept. A layer whose
    analytic values are identical at both configurations is ``Origin.MEASURED``, otherwise
    ``Origin.DERIVED``. Raises SpecError when the analytic-at-measured profile is not at the
    measured configuration or the layer chains differ.
    """
    for attr in ("tp_size", "micro_batch_size", "seq_length", "cp_size"):
        if getattr(analytic_at_measured, attr) != getattr(measured, attr):
            raise SpecError(
                f"profile.{attr}",
                f"analytic_at_measured is at {attr}={getattr(analytic_at_measured, attr)}, "
                f"the measured profile at {getattr(measured, attr)}",
            )
    _check_same_chain(measured, analytic_at_measured, "analytic_at_measured")
    _check_same_chain(measured, analytic_at_target, "analytic_at_target")
    layers = []
    filled: set[str] = set()
    for mine, base, target in zip(measured.layers, analytic_at_measured.layers, analytic_at_target.layers, strict=True):
        values: dict[str, float] = {}
        for key in SCALED_FIELDS:
            value, at_base, at_target = getattr(mine, key), getattr(base, key), getattr(target, key)
            if value == 0 and at_base != 0:
                if key == "selective_recompute_s" and base.forward_s > 0:
                    value = at_target * (mine.forward_s / base.forward_s)
                else:
                    value = at_target
                filled.add(key)
            elif at_base != 0:
                value = value * (at_target / at_base)
            elif at_target != 0:
                value = value + at_target  # the analytic model sees new work only at the target
            values[key] = value
        same = all(getattr(base, key) == getattr(target, key) for key in SCALED_FIELDS)
        for key in BYTE_FIELDS + ("parameter_count",):
            values[key] = int(round(values[key]))
        # values holds SCALED_FIELDS only, each as its field's type (bytes and counts rounded).
        layers.append(replace(mine, origin=Origin.MEASURED if same else Origin.DERIVED, **values))  # type: ignore[arg-type]
    notes = list(measured.notes)
    if filled:
        notes.append("from the analytic model (not in the measurement): " + ", ".join(sorted(filled)))
    if any(layer.origin is Origin.DERIVED for layer in layers):
        notes.append(
            f"derived from a measurement at tp_size={measured.tp_size}, "
            f"micro_batch_size={measured.micro_batch_size}, seq_length={measured.seq_length}"
        )
    return ModelProfile(
        model_name=measured.model_name,
        tp_size=analytic_at_target.tp_size,
        micro_batch_size=analytic_at_target.micro_batch_size,
        seq_length=analytic_at_target.seq_length,
        precision=analytic_at_target.precision,
        layers=tuple(layers),
        device=measured.device,
        notes=tuple(notes),
        cp_size=analytic_at_target.cp_size,
    )


def resolve_profile(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, shape: ProfileShape, profile: ModelProfile | None
) -> LayerChain:
    """The layers to cost this configuration with: the analytic ones (``analytic_layers``, the
    analytic profile without a named copy of every transformer layer), or the given measured
    profile carried to ``shape`` (tp_size, micro-batch, SP) and this sequence length by the
    analytic model's ratios (``solver.cost.derive.derive_profile``). At the measured
    configuration the ratios are 1, and what one GPU cannot measure (TP communication, model
    FLOPs) comes from the analytic model."""
    # A profile reads the GPU, the NVLink domain and the links, never the cluster's size
    # (tests/test_sweep_speed.py): costed on a one-node copy, the analytic profiles' cache serves
    # the search's bounds and partitions (solver.search.space.Profiles) and the evaluator alike.
    if cluster.num_nodes != 1:
        cluster = replace(cluster, num_nodes=1)
    if profile is None:
        return analytic_layers(model, cluster, training, shape)
    target = analytic_profile(model, cluster, training, shape)
    as_measured = replace(training, seq_length=profile.seq_length, flash_attention=profile.flash_attention)
    measured_at = analytic_profile(model, cluster, as_measured, profile.shape)
    return derive_profile(profile, measured_at, target)
