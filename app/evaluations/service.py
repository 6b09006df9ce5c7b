"""Evaluate one configuration: resolve the request's specs, then ask ``solver.cost.evaluate``."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.catalog.service import resolve
from app.core.ownership import ANYONE, Access
from app.core.problems import from_spec_error
from app.evaluations.schemas import EvaluationOut, EvaluationRequest
from app.evaluations.training import check_num_gpus, error_band, training_spec
from app.profiles.service import measured_profile
from solver.cost.evaluate import evaluate
from solver.spec.errors import SpecError
from solver.spec.parallel import parallel_from_dict


def evaluate_configuration(session: Session, body: EvaluationRequest, access: Access = ANYONE) -> EvaluationOut:
    parallel_gpus = body.parallel.dp_size * body.parallel.tp_size * body.parallel.pp_size * body.parallel.cp_size
    resolved = resolve(session, body.model, body.cluster, body.num_gpus or parallel_gpus)
    profile = measured_profile(session, body.profile_id, resolved.model, access=access).profile if body.profile_id else None
    # The read is over: release the connection (and SQLite's lock) before computing.
    session.rollback()
    training = training_spec(body.training)
    # A node type named as the cluster is sized to the layout, in whole NVLink domains where one
    # spans several hosts (a GB200 NVL72 rack): the layout's GPUs, not the racks', are evaluated.
    entry = resolved.snapshot["cluster"]["entry"]
    sized_to_layout = body.num_gpus is None and entry.get("node") == entry.get("name")
    num_gpus = check_num_gpus(parallel_gpus if sized_to_layout else body.num_gpus, resolved.cluster)
    try:
        parallel = parallel_from_dict(body.parallel.model_dump())
        result = evaluate(
            resolved.model, resolved.cluster, training, parallel, num_gpus=num_gpus, profile=profile,
            error_band=error_band(body.training, resolved.cluster, resolved.model),
        )
    except SpecError as error:
        raise from_spec_error(error, "body") from None
    return EvaluationOut.model_validate(result.to_dict())
