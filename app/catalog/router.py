"""/v1/catalog: built-in GPUs, models, clusters, node types and software stacks; custom models and clusters."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from app.catalog import service
from app.catalog.schemas import (
    ClusterEntry,
    ClusterList,
    ClusterSpecIn,
    GpuEntry,
    GpuList,
    HfConfigIn,
    HfConfigModel,
    ModelEntry,
    ModelList,
    ModelSpecIn,
    NodeEntry,
    NodeList,
    StackEntry,
    StackList,
)
from app.core.deps import SessionDep
from app.core.openapi import CONFLICT_RESPONSES, PROBLEM_RESPONSES, ProblemDocument
from app.tokens.auth import ReadAccess, WriteAccess

router = APIRouter(prefix="/v1/catalog", tags=["catalog"], responses=PROBLEM_RESPONSES)

# A delete answers 403 with authentication off too: built-in entries are read-only.
DELETE_RESPONSES: dict[int | str, dict] = {
    403: {
        "description": "A built-in entry (built-ins cannot be deleted), another token's custom entry, or a token without the scope",
        "model": ProblemDocument,
    }
}


@router.get("/gpus", operation_id="list_gpus", response_model=GpuList)
def list_gpus(session: SessionDep, _access: ReadAccess) -> dict:
    return {"items": service.list_entries(session, "gpus")}


@router.get("/gpus/{name}", operation_id="get_gpu", response_model=GpuEntry)
def get_gpu(name: str, session: SessionDep, _access: ReadAccess) -> dict:
    return service.get_entry(session, "gpus", name)


@router.get("/models", operation_id="list_models", response_model=ModelList)
def list_models(session: SessionDep, _access: ReadAccess) -> dict:
    return {"items": service.list_entries(session, "models")}


@router.get("/models/{name}", operation_id="get_model", response_model=ModelEntry)
def get_model(name: str, session: SessionDep, _access: ReadAccess) -> dict:
    return service.get_entry(session, "models", name)


@router.post(
    "/models", operation_id="create_model", response_model=ModelEntry, status_code=status.HTTP_201_CREATED,
    responses=CONFLICT_RESPONSES,
)
def create_model(body: ModelSpecIn, response: Response, session: SessionDep, access: WriteAccess) -> dict:
    entry = service.create_custom(session, "models", body, access)
    session.commit()
    response.headers["Location"] = f"/v1/catalog/models/{entry['name']}"
    return entry


@router.post(
    "/models/from-hf-config", operation_id="convert_hf_config", response_model=HfConfigModel, response_model_exclude_none=True
)
def convert_hf_config(body: HfConfigIn, _access: ReadAccess) -> dict:
    """Read a model's shape from its Hugging Face config.json. Nothing is stored: send the returned
    ``model`` inline in a plan or evaluation, or to ``POST /v1/catalog/models`` to name it."""
    return service.convert_hf_config(body)


@router.delete(
    "/models/{name}", operation_id="delete_model", status_code=status.HTTP_204_NO_CONTENT, responses=DELETE_RESPONSES
)
def delete_model(name: str, session: SessionDep, access: WriteAccess) -> Response:
    service.delete_custom(session, "models", name, access)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/clusters", operation_id="list_clusters", response_model=ClusterList)
def list_clusters(session: SessionDep, _access: ReadAccess) -> dict:
    return {"items": service.list_entries(session, "clusters")}


@router.get("/clusters/{name}", operation_id="get_cluster", response_model=ClusterEntry)
def get_cluster(name: str, session: SessionDep, _access: ReadAccess) -> dict:
    return service.get_entry(session, "clusters", name)


@router.post(
    "/clusters", operation_id="create_cluster", response_model=ClusterEntry, status_code=status.HTTP_201_CREATED,
    responses=CONFLICT_RESPONSES,
)
def create_cluster(body: ClusterSpecIn, response: Response, session: SessionDep, access: WriteAccess) -> dict:
    entry = service.create_custom(session, "clusters", body, access)
    session.commit()
    response.headers["Location"] = f"/v1/catalog/clusters/{entry['name']}"
    return entry


@router.delete(
    "/clusters/{name}", operation_id="delete_cluster", status_code=status.HTTP_204_NO_CONTENT, responses=DELETE_RESPONSES
)
def delete_cluster(name: str, session: SessionDep, access: WriteAccess) -> Response:
    service.delete_custom(session, "clusters", name, access)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/nodes", operation_id="list_nodes", response_model=NodeList)
def list_nodes(session: SessionDep, _access: ReadAccess) -> dict:
    """The node types a request may name as its cluster with a GPU count."""
    return {"items": service.list_entries(session, "nodes")}


@router.get("/nodes/{name}", operation_id="get_node", response_model=NodeEntry)
def get_node(name: str, session: SessionDep, _access: ReadAccess) -> dict:
    return service.get_entry(session, "nodes", name)


@router.get("/stacks", operation_id="list_stacks", response_model=StackList)
def list_stacks(_access: ReadAccess) -> dict:
    """The software stacks a plan can assume, with the facts each sets and their sources."""
    return {"items": service.list_stacks()}


@router.get("/stacks/{name}", operation_id="get_stack", response_model=StackEntry)
def get_stack(name: str, _access: ReadAccess) -> dict:
    return service.get_stack(name)
