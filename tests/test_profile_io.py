"""The profile document: round trip, strict validation, derivation, PipeDream import."""

from __future__ import annotations

import json

import pytest

from profiler.pipedream import import_pipedream, parse_pipedream_graph
from solver.cost.derive import derive_profile
from solver.cost.profile import LayerKind, LayerProfile, ModelProfile, Origin
from solver.io.profile_format import (
    FORMAT,
    ProfileDocument,
    parse_profile_document,
    profile_document,
)
from solver.spec.errors import SpecError
from solver.spec.model import ModelSpec
from solver.spec.training import Precision

TINY = ModelSpec(name="tiny", num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=256, seq_length=32)


def _layer(name: str, kind: LayerKind, scale: float = 1.0, **extra) -> LayerProfile:
    values = dict(
        name=name,
        kind=kind,
        forward_s=1e-3 * scale,
        backward_s=2e-3 * scale,
        parameter_count=int(1000 * scale),
        activation_bytes=int(40_000 * scale),
        selective_activation_bytes=int(30_000 * scale),
        checkpoint_bytes=4096,
        output_bytes=4096,
        selective_recompute_s=2e-4 * scale,
        origin=Origin.MEASURED,
    )
    values.update(extra)
    return LayerProfile(**values)


def _profile(tp_size: int = 1, micro_batch_size: int = 1, scale: float = 1.0, **layer_extra) -> ModelProfile:
    return ModelProfile(
        model_name="tiny",
        tp_size=tp_size,
        micro_batch_size=micro_batch_size,
        seq_length=32,
        precision=Precision.BF16,
        device="cpu",
        layers=(
            _layer("embedding", LayerKind.EMBEDDING, 0.5 * scale, **layer_extra),
            _layer("layer.0", LayerKind.TRANSFORMER, scale, **layer_extra),
            _layer("layer.1", LayerKind.TRANSFORMER, scale, **layer_extra),
            _layer("head", LayerKind.HEAD, 3 * scale, **layer_extra),
        ),
    )


def _document() -> dict:
    return profile_document(ProfileDocument(model=TINY, profile=_profile(), source="test"))


def test_round_trip_is_exact_through_json():
    doc = ProfileDocument(model=TINY, profile=_profile(), source="test", measurement={"repeats": 5})
    raw = json.loads(json.dumps(profile_document(doc)))
    assert raw["format"] == FORMAT == "partitura-profile/1"
    back = parse_profile_document(raw)
    assert back.profile == doc.profile
    assert back.model == TINY
    assert back.measurement == {"repeats": 5}
    assert raw["layers"][1]["parameter_bytes"] == 2000  # 1000 parameters x 2 bytes (16 bit)


def test_optional_fields_take_documented_defaults():
    raw = _document()
    for layer in raw["layers"]:
        for key in ("selective_activation_bytes", "checkpoint_bytes", "selective_recompute_s",
                    "tp_comm_s", "model_flops", "origin", "parameter_count"):
            layer.pop(key)
    doc = parse_profile_document(raw)
    first, second = doc.profile.layers[0], doc.profile.layers[1]
    assert second.selective_activation_bytes == second.activation_bytes == 40_000
    assert second.checkpoint_bytes == first.output_bytes == 4096  # the layer's input
    assert first.checkpoint_bytes == first.activation_bytes  # nothing before the first layer
    assert second.parameter_count == 1000  # from parameter_bytes / 2
    assert second.origin is Origin.MEASURED and second.selective_recompute_s == 0.0


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.update(format="partitura-profile/2"), "format"),
        (lambda d: d.pop("device"), "device"),
        (lambda d: d.update(precision="fp32"), "precision"),
        (lambda d: d.update(micro_batch_size=0), "micro_batch_size"),
        (lambda d: d.update(tp_size=3), "tp_size"),
        (lambda d: d.update(seq_length=64), "seq_length"),  # beyond the learned positions
        (lambda d: d.update(colour="red"), "colour"),
        (lambda d: d["model"].update(hidden_size=-1), "model.hidden_size"),
        (lambda d: d["model"].update(num_kv_heads=3), "model.num_kv_heads"),
        (lambda d: d["model"].pop("vocab_size"), "model.vocab_size"),
        (lambda d: d["layers"][2].update(forward_s=-1.0), "layers[2].forward_s"),
        (lambda d: d["layers"][2].update(backward_s="fast"), "layers[2].backward_s"),
        (lambda d: d["layers"][1].update(forward_s=float("nan")), "layers[1].forward_s"),
        (lambda d: d["layers"][3].update(activation_bytes=1.5), "layers[3].activation_bytes"),
        (lambda d: d["layers"][1].pop("output_bytes"), "layers[1].output_bytes"),
        (lambda d: d["layers"][0].update(activation_bytes=None), "layers[0].activation_bytes"),  # found by hypothesis
        (lambda d: d["layers"][2].update(forward_s=None), "layers[2].forward_s"),
        (lambda d: d["layers"][2].update(origin=""), "layers[2].origin"),
        (lambda d: d.update(device="x" * 257), "device"),
        (lambda d: d["layers"][1].update(name="layer\x000"), "layers[1].name"),
        (lambda d: d.update(notes=["ok", "\ud800"]), "notes[1]"),
        (lambda d: d.update(tp_size=2**25), "tp_size"),
        (lambda d: d["model"].update(num_layers=2**30), "model.num_layers"),
        (lambda d: d.update(measurement={"repeats": float("nan")}), "measurement.repeats"),
        (lambda d: d.update(measurement={"timer": ["a"]}), "measurement.timer"),
        (lambda d: d["layers"][1].update(kind="mlp"), "layers[1].kind"),
        (lambda d: d["layers"][1].update(selective_activation_bytes=10**9), "layers[1].selective_activation_bytes"),
        (lambda d: d["layers"][2].update(parameter_bytes=7), "layers[2].parameter_bytes"),
        (lambda d: [d["layers"][2].pop(k) for k in ("parameter_bytes", "parameter_count")], "layers[2].parameter_count"),
        (lambda d: d["layers"][2].update(speed=1), "layers[2].speed"),
        (lambda d: d["layers"][2].update(name="layer.0"), "layers[2].name"),
        (lambda d: d["layers"][0].update(kind="transformer"), "layers[0].kind"),
        (lambda d: d["layers"].pop(1), "layers"),  # one transformer layer short of num_layers
        (lambda d: d["layers"][1].update(origin="guessed"), "layers[1].origin"),
    ],
)
def test_validation_names_the_field(mutate, field):
    raw = _document()
    mutate(raw)
    with pytest.raises(SpecError) as err:
        parse_profile_document(raw)
    assert err.value.field == field


def test_integral_floats_are_accepted_as_byte_counts():
    raw = _document()
    raw["layers"][1]["activation_bytes"] = 4.0e4
    assert parse_profile_document(raw).profile.layers[1].activation_bytes == 40_000


def test_derivation_scales_each_field_by_the_analytic_ratio():
    measured = _profile(scale=1.0)
    # The analytic model says: at the target, layer work halves (tp_size 2) and TP comm appears.
    base = _profile(scale=2.0)
    target = _profile(tp_size=2, scale=1.0, tp_comm_s=5e-4, model_flops=1e9)
    base = ModelProfile(**{**base.__dict__, "layers": tuple(
        LayerProfile(**{**layer.__dict__, "model_flops": 2e9}) for layer in base.layers)})
    derived = derive_profile(measured, base, target)
    assert derived.tp_size == 2
    layer = derived.layers[1]
    assert layer.forward_s == pytest.approx(0.5e-3)  # 1 ms x (1 / 2)
    assert layer.backward_s == pytest.approx(1e-3)
    assert layer.activation_bytes == 20_000
    assert layer.parameter_count == 500
    assert layer.model_flops == pytest.approx(1e9)  # not measured: the analytic target value
    assert layer.tp_comm_s == pytest.approx(5e-4)  # zero in both measured and base: added at target
    assert all(l.origin is Origin.DERIVED for l in derived.layers)
    assert any("tp_size=1" in note for note in derived.notes)


def test_derivation_at_the_measured_configuration_keeps_values_and_origin():
    measured = _profile()
    analytic = _profile(scale=3.0)  # the analytic model disagrees on level; ratio 1 regardless
    derived = derive_profile(measured, analytic, analytic)
    assert [l.forward_s for l in derived.layers] == [l.forward_s for l in measured.layers]
    assert all(l.origin is Origin.MEASURED for l in derived.layers)


def test_missing_selective_recompute_takes_analytic_value_scaled_by_measured_speed():
    measured = _profile(selective_recompute_s=0.0)
    analytic = _profile(scale=2.0)  # analytic forward 2 ms, selective 0.4 ms: measured is 2x faster
    derived = derive_profile(measured, analytic, analytic)
    assert derived.layers[1].selective_recompute_s == pytest.approx(0.2e-3)


def test_derivation_rejects_mismatched_inputs():
    with pytest.raises(SpecError) as err:
        derive_profile(_profile(), _profile(tp_size=2), _profile(tp_size=2))
    assert err.value.field == "profile.tp_size"
    short = ModelProfile(**{**_profile().__dict__, "layers": _profile().layers[:3]})
    with pytest.raises(SpecError) as err:
        derive_profile(_profile(), _profile(), short)
    assert err.value.field == "profile.layers"


# A small PipeDream graph.txt in the profiler's own format (graph/graph.py Node.__str__): an
# Input node, an embedding, two blocks with a residual edge each, and a head.
PIPEDREAM_GRAPH = """\
node1 -- Input -- forward_compute_time=12.000, backward_compute_time=0.000, activation_size=1024.000, parameter_size=0.000
node2 -- Embedding(256, 64) -- forward_compute_time=0.100, backward_compute_time=0.200, activation_size=8192.000, parameter_size=65536.000
node3 -- Linear(in_features=64, out_features=64, bias=True) -- forward_compute_time=1.000, backward_compute_time=2.000, activation_size=8192.000, parameter_size=16640.000
node4 -- Add -- forward_compute_time=0.050, backward_compute_time=0.010, activation_size=8192.000, parameter_size=0.000
node5 -- Linear(in_features=64, out_features=64, bias=True) -- forward_compute_time=1.500, backward_compute_time=3.000, activation_size=[4096.000; 4096.000], parameter_size=16640.000 -- stage_id=1
node6 -- Add -- forward_compute_time=0.050, backward_compute_time=0.010, activation_size=8192.000, parameter_size=0.000 -- stage_id=1
node7 -- Linear(in_features=64, out_features=256, bias=False) -- forward_compute_time=0.400, backward_compute_time=0.900, activation_size=32768.000, parameter_size=65536.000 -- stage_id=1
\tnode1 -- node2
\tnode2 -- node3
\tnode2 -- node4
\tnode3 -- node4
\tnode4 -- node5
\tnode4 -- node6
\tnode5 -- node6
\tnode6 -- node7
"""


def test_pipedream_graph_parses_nodes_in_topological_order():
    nodes, edges = parse_pipedream_graph(PIPEDREAM_GRAPH)
    assert [n.node_id for n in nodes] == ["node1", "node2", "node3", "node4", "node5", "node6", "node7"]
    assert nodes[4].activation_bytes == 8192.0  # [4096; 4096] is summed, as PipeDream does
    assert len(edges) == 8


def test_pipedream_import_groups_nodes_into_layers_with_units():
    doc = import_pipedream(
        PIPEDREAM_GRAPH, TINY, micro_batch_size=4, precision=Precision.FP16, nodes_per_layer=[1, 2, 2, 1]
    )
    layers = doc.profile.layers
    assert [l.kind for l in layers] == [LayerKind.EMBEDDING, LayerKind.TRANSFORMER, LayerKind.TRANSFORMER, LayerKind.HEAD]
    block = layers[1]
    assert block.forward_s == pytest.approx(1.05e-3)  # (1.000 + 0.050) ms
    assert block.backward_s == pytest.approx(2.01e-3)
    assert block.parameter_count == 4160  # 16640 fp32 bytes / 4
    assert block.activation_bytes == 16384  # both node outputs are stashed
    assert block.output_bytes == 8192  # only node4's output crosses into the next block
    assert block.checkpoint_bytes == layers[0].output_bytes == 8192
    # node2 feeds node3 and node4 (the residual): one tensor crosses the embedding boundary.
    assert layers[0].checkpoint_bytes == 1024  # the Input node's output
    assert doc.profile.micro_batch_size == 4 and doc.profile.tp_size == 1
    # The imported profile is a valid document.
    again = parse_profile_document(json.loads(json.dumps(profile_document(doc))))
    assert again.profile == doc.profile


def test_pipedream_import_errors_name_the_problem():
    with pytest.raises(SpecError) as err:
        import_pipedream(PIPEDREAM_GRAPH, TINY, micro_batch_size=1, precision=Precision.BF16)
    assert err.value.field == "nodes_per_layer"  # 6 nodes, 4 layers: a grouping is needed
    bad = PIPEDREAM_GRAPH.replace("backward_compute_time=2.000", "backward_compute_time=abc")
    with pytest.raises(SpecError) as err:
        parse_pipedream_graph(bad)
    assert err.value.field == "pipedream.line[3].backward_compute_time"
    with pytest.raises(SpecError) as err:
        parse_pipedream_graph(PIPEDREAM_GRAPH + "\tnode7 -- node9\n")
    assert err.value.field == "pipedream.edges"
    with pytest.raises(SpecError) as err:
        parse_pipedream_graph(PIPEDREAM_GRAPH + "\tnode7 -- node2\n")
    assert "cycle" in err.value.reason


def test_import_pipedream_command_writes_a_profile(tmp_path, capsys):
    from profiler.cli import main  # the import command needs no torch

    graph = tmp_path / "graph.txt"
    graph.write_text(PIPEDREAM_GRAPH)
    spec = tmp_path / "model.json"
    spec.write_text(json.dumps({"name": "tiny", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                "vocab_size": 256, "seq_length": 32}))
    out = tmp_path / "profile.json"
    status = main(["import-pipedream", str(graph), "--model", str(spec), "--micro-batch-size", "4",
                   "--precision", "fp16", "--nodes-per-layer", "1,2,2,1", "--output", str(out)])
    assert status == 0
    doc = parse_profile_document(json.loads(out.read_text()))
    assert doc.profile.layers[1].forward_s == pytest.approx(1.05e-3)
    assert main(["import-pipedream", str(graph), "--model", str(spec), "--micro-batch-size", "4",
                 "--precision", "fp16", "--nodes-per-layer", "1,x"]) == 2
    assert "nodes_per_layer" in capsys.readouterr().err


def test_the_readme_example_is_a_valid_document():
    from pathlib import Path

    text = (Path(__file__).parents[1] / "profiler" / "README.md").read_text()
    example = json.loads(text.split("```json\n", 1)[1].split("```", 1)[0])
    doc = parse_profile_document(example)
    assert doc.profile.layers[2].parameter_count == 198272  # from parameter_bytes / 2
    assert doc.profile.layers[2].checkpoint_bytes == 65536  # default: layer.0's output


# Any JSON value in any place of a valid document: the validator accepts it or raises SpecError
# naming a field, never anything else (the API turns SpecError into a 422, anything else is a 500).
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
TOP_PLACES = ["format", "model", "device", "precision", "micro_batch_size", "seq_length", "tp_size",
              "sequence_parallel", "flash_attention", "source", "measurement", "notes", "layers", "extra"]
LAYER_PLACES = ["name", "kind", "forward_s", "backward_s", "activation_bytes", "output_bytes", "parameter_count",
                "parameter_bytes", "selective_activation_bytes", "checkpoint_bytes", "selective_recompute_s",
                "tp_comm_s", "model_flops", "origin", "extra"]
MODEL_PLACES = ["name", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size",
                "vocab_size", "seq_length", "mlp_activation", "tied_embeddings", "architecture", "position_embedding"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    where=st.sampled_from(["top", "layer", "model"]),
    top=st.sampled_from(TOP_PLACES),
    layer_index=st.integers(0, 3),
    layer_key=st.sampled_from(LAYER_PLACES),
    model_key=st.sampled_from(MODEL_PLACES),
    value=JSON_VALUES,
)
def test_any_value_anywhere_is_accepted_or_a_spec_error(where, top, layer_index, layer_key, model_key, value):
    raw = _document()
    if where == "top":
        raw[top] = value
    elif where == "layer":
        raw["layers"][layer_index][layer_key] = value
    else:
        raw["model"][model_key] = value
    try:
        parse_profile_document(raw)
    except SpecError as err:
        assert err.field and err.reason


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.sampled_from(PIPEDREAM_GRAPH.splitlines()) | st.text(max_size=40), max_size=12),
    counts=st.none() | st.lists(st.integers(-1, 4), max_size=5),
)
def test_any_pipedream_text_imports_or_is_a_spec_error(lines, counts):
    try:
        import_pipedream("\n".join(lines), TINY, micro_batch_size=1, precision=Precision.BF16, nodes_per_layer=counts)
    except SpecError as err:
        assert err.field and err.reason
