"""/openapi.json describes every successful response with typed objects: each object declares
its properties and no others, so a generated SDK has a model class (attribute access) for
candidates, parallel settings, stages, memory, search statistics, explanations and catalog
entries, not a dict. The only maps are the string-keyed ones below, whose keys are data."""

from __future__ import annotations

import httpx
import pytest

# (schema, property) -> why a map (keys are data, not field names) is the right type there.
ALLOWED_MAPS = {
    ("CandidateOut", "profile_origins"): "layer name -> origin; the layers are the model's",
    ("EvaluationOut", "profile_origins"): "layer name -> origin; the layers are the model's",
    ("ExplanationOut", "rejections"): "legality rule -> configurations it rejected; only rules that rejected some appear",
    ("SearchStatistics", "cpsat_status"): "CP-SAT status name -> solves that ended with it",
    ("SearchStatistics", "partition_methods"): "partition method -> solves that used it",
    ("StoredGpuSpec", "sources"): "field name -> citation; which fields carry one varies by entry",
    ("GpuSpecOut", "sources"): "field name -> citation; which fields carry one varies by entry",
    ("GpuEntry", "sources"): "field name -> citation; which fields carry one varies by entry",
    ("StoredClusterSpec", "link_sources"): "link figure -> citation; which figures carry one varies by node",
    ("ClusterEntry", "link_sources"): "link figure -> citation; which figures carry one varies by node",
    ("NodeEntry", "sources"): "field name -> citation; which fields carry one varies by node type",
    ("ProfileDocumentOut", "measurement"): "free-form settings of a measurement (the format allows any scalars)",
}
SCALAR_TYPES = {"string", "integer", "number", "boolean"}
TYPED = ("type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const")


def _map_value_types(value_schema: dict) -> set[str]:
    return {option.get("type") for option in value_schema.get("anyOf", [value_schema])}


class ResponseSchemaWalk:
    """Every schema reachable from a 2xx response, and what is wrong with it."""

    def __init__(self, spec: dict) -> None:
        self.components = spec["components"]["schemas"]
        self.reached: set[str] = set()
        self.maps_seen: set[tuple[str, str]] = set()
        self.problems: list[str] = []
        for path, operations in spec["paths"].items():
            for method, operation in operations.items():
                for status, response in operation.get("responses", {}).items():
                    if status.startswith("2"):
                        for content in (response.get("content") or {}).values():
                            self._walk(content["schema"], f"{method.upper()} {path} {status}", None)

    def _walk(self, schema: dict, where: str, owner: tuple[str, str] | None) -> None:
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            if name not in self.reached:
                self.reached.add(name)
                self._walk(self.components[name], name, None)
            return
        if not any(key in schema for key in TYPED):
            self.problems.append(f"{where}: untyped value {schema}")
        extra = schema.get("additionalProperties")
        if schema.get("type") == "object" or "properties" in schema or extra is not None:
            if schema.get("properties"):
                if extra is not False:
                    self.problems.append(f"{where}: declares properties but allows others ({extra!r})")
            elif owner in ALLOWED_MAPS and isinstance(extra, dict) and _map_value_types(extra) <= SCALAR_TYPES:
                self.maps_seen.add(owner)
            else:
                self.problems.append(f"{where}: an object without declared properties ({schema})")
        for name, sub in (schema.get("properties") or {}).items():
            self._walk(sub, f"{where}.{name}", (where, name))
        for key in ("anyOf", "oneOf", "allOf"):
            for sub in schema.get(key, []):
                self._walk(sub, where, owner)
        if isinstance(schema.get("items"), dict):
            self._walk(schema["items"], f"{where}[]", None)
        if isinstance(extra, dict):
            self._walk(extra, f"{where}{{}}", None)


@pytest.fixture(scope="module")
def walk(live_server) -> ResponseSchemaWalk:
    return ResponseSchemaWalk(httpx.get(f"{live_server.base_url}/openapi.json", timeout=30).json())


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_every_object_in_a_successful_response_is_typed(walk):
    assert walk.problems == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_walk_reaches_the_result_models_and_every_allowed_map(walk):
    assert {
        "Plan", "CandidateOut", "Parallel", "PipelineStage", "Memory", "MemoryBreakdown", "StepBreakdownOut",
        "SearchStatistics", "ExplanationOut", "MemoryMissOut", "DeadlineMissOut", "SuggestionOut",
        "NormalisedRequest", "CatalogSnapshot", "EvaluationOut", "GpuEntry", "ModelEntry", "ClusterEntry",
        "ProfileDocumentOut", "PlanSummary",
    } <= walk.reached
    assert walk.maps_seen == set(ALLOWED_MAPS), "an allowed map is no longer in any response: drop it from the list"


def test_the_walk_flags_open_and_untyped_objects():
    ok = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/X"}}}}
    x = {
        "type": "object",
        "properties": {
            "loose": {"$ref": "#/components/schemas/Loose"},
            "bag": {"type": "object", "additionalProperties": {"type": "number"}},
            "anything": {},
        },
        "additionalProperties": False,
    }
    loose = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True}
    spec = {"paths": {"/x": {"get": {"responses": {"200": ok}}}}, "components": {"schemas": {"X": x, "Loose": loose}}}
    problems = ResponseSchemaWalk(spec).problems
    assert len(problems) == 3
    assert any(p.startswith("Loose: declares properties") for p in problems)
    assert any(p.startswith("X.bag: an object without declared properties") for p in problems)
    assert any(p.startswith("X.anything: untyped value") for p in problems)
