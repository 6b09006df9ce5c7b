"""Evaluate one configuration: resolve the request's specs, then ask ``solver.cost.evaluate``."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.catalog.service import resolve
from app.core.problems import from_spec_error, invalid_field
from app.evaluations.schemas import EvaluationOut, EvaluationRequest, Training
from app.profiles.service import measured_profile
from solver.cost.evaluate import evaluate
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec
from solver.spec.parallel import parallel_from_dict
from solver.spec.training import TrainingSpec


def training_spec(training: Training) -> TrainingSpec:
    try:
        return TrainingSpec(
            global_batch_size=training.global_batch_size,
            seq_length=training.seq_length,
            precision=training.precision,
            optimizer=training.optimizer,
            train_tokens=training.train_tokens,
            flash_attention=training.flash_attention,
            overlap_grad_reduce=training.overlap_grad_reduce,
            fused_kernels=training.fused_kernels,
        )
    except SpecError as error:
        raise from_spec_error(error, "body") from None


def check_num_gpus(num_gpus: int | None, cluster: ClusterSpec) -> int:
    """The request's GPU count, defaulting to the whole cluster; more than it has is an error."""
    if num_gpus is None:
        return cluster.num_gpus
    if num_gpus > cluster.num_gpus:
        raise invalid_field(
            "body.num_gpus", f"the cluster {cluster.name!r} has {cluster.num_gpus} GPUs, {num_gpus} were asked for"
        )
    return num_gpus


def evaluate_configuration(session: Session, body: EvaluationRequest) -> EvaluationOut:
    parallel_gpus = body.parallel.dp_size * body.parallel.tp_size * body.parallel.pp_size
    resolved = resolve(session, body.model, body.cluster, body.num_gpus or parallel_gpus)
    profile = measured_profile(session, body.profile_id, resolved.model).profile if body.profile_id else None
    # The read is over: release the connection (and SQLite's lock) before computing.
    session.rollback()
    training = training_spec(body.training)
    num_gpus = check_num_gpus(body.num_gpus, resolved.cluster)
    try:
        parallel = parallel_from_dict(body.parallel.model_dump())
        result = evaluate(resolved.model, resolved.cluster, training, parallel, num_gpus=num_gpus, profile=profile)
    except SpecError as error:
        raise from_spec_error(error, "body") from None
    return EvaluationOut.model_validate(result.to_dict())
