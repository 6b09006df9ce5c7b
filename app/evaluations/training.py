"""A request's training settings as the solver takes them: the stack named and its facts filled in,
the error band of its stack and GPU, and the GPU count checked against the cluster. Shared by
evaluations, plans, sweeps and sizing; free of SQLAlchemy and FastAPI."""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

import catalog
from app.core.problems import clip, from_spec_error, invalid_field
from app.evaluations.schemas import Training
from catalog.conversion import STACK_FACTS
from solver.cost.uncertainty import ErrorBand
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec
from solver.spec.model import ModelSpec
from solver.spec.training import TrainingSpec


def resolve_training(training: Training) -> Training:
    """The training settings with their stack named (the catalog's default when the request names
    none) and every fact the stack sets filled in where the request left it out."""
    name = training.stack or catalog.default_stack_name()
    try:
        facts = catalog.get_stack_facts(name)
    except catalog.CatalogError as error:
        # Few stacks exist: with no close name, every one is a suggestion.
        known = error.suggestions or [entry["name"] for entry in catalog.list_entries("stacks")]
        raise invalid_field("body.training.stack", f"unknown stack {clip(repr(name), 128)}", known) from None
    given = training.model_dump(exclude_none=True)
    return Training.model_validate({**facts, **given, "stack": name})


# TrainingSpec fields a request may set that no stack sets (null: the TrainingSpec default).
RUN_FACTS = ("moments_dtype", "moe_act_input_dtype", "launch_blocking", "muon_tp_mode", "moe_dispatcher")


def _json_value(value: object) -> object:
    return value.value if isinstance(value, Enum) else value


# Each run fact's default as a request spells it ("fp32", "half", false).
RUN_FACT_DEFAULTS = {f.name: _json_value(f.default) for f in dataclasses.fields(TrainingSpec) if f.name in RUN_FACTS}


def without_default_run_facts(training: dict[str, Any]) -> dict[str, Any]:
    """A dumped request's training settings without the run facts that only spell out their
    default: ``"launch_blocking": false`` asks what leaving it out asks."""
    return {name: value for name, value in training.items() if not (name in RUN_FACT_DEFAULTS and value == RUN_FACT_DEFAULTS[name])}


def training_spec(training: Training) -> TrainingSpec:
    resolved = resolve_training(training)
    if resolved.recompute_modules and resolved.selective_recompute != "attention":
        raise invalid_field(
            "body.training.recompute_modules",
            f"applies to Megatron-style selective recomputation (selective_recompute 'attention'); the stack {resolved.stack!r}"
            f" recomputes per {resolved.selective_recompute!r}",
        )
    try:
        return TrainingSpec(
            global_batch_size=resolved.global_batch_size,
            seq_length=resolved.seq_length,
            precision=resolved.precision,
            optimizer=resolved.optimizer,
            train_tokens=resolved.train_tokens,
            **({"recompute_modules": tuple(resolved.recompute_modules)} if resolved.recompute_modules else {}),
            **{name: getattr(resolved, name) for name in RUN_FACTS if getattr(resolved, name) is not None},
            **{name: getattr(resolved, name) for name in STACK_FACTS},
        )
    except SpecError as error:
        raise from_spec_error(error, "body") from None


def error_band(training: Training, cluster: ClusterSpec, model: ModelSpec) -> ErrorBand:
    """The range every prediction of this request carries: the bench residuals of its stack on
    its GPU generation, of MoE runs for an MoE model (catalog/data/error_bands.json). The stack
    name is checked by ``training_spec``, which every caller runs first."""
    return catalog.error_band(training.stack or catalog.default_stack_name(), cluster.gpu.name, model.is_moe)


def check_num_gpus(num_gpus: int | None, cluster: ClusterSpec) -> int:
    """The request's GPU count, defaulting to the whole cluster; more than it has is an error."""
    if num_gpus is None:
        return cluster.num_gpus
    if num_gpus > cluster.num_gpus:
        raise invalid_field(
            "body.num_gpus", f"the cluster {cluster.name!r} has {cluster.num_gpus} GPUs, {num_gpus} were asked for"
        )
    return num_gpus
