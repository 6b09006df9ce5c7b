"""Import PipeDream profiler output into a ``partitura-profile/1`` document (no torch needed).

PipeDream's profiler (msr-fiddle/pipedream, graph/graph.py ``Node.__str__`` / ``Graph.from_str``)
writes a graph.txt:
  node<N> -- <description> -- forward_compute_time=<ms>, backward_compute_time=<ms>,
      activation_size=<bytes or [b1; b2]>, parameter_size=<bytes>[ -- stage_id=<k>]
  <TAB>node<A> -- node<B>                 (an edge: B consumes the output of A)
Times are milliseconds (PipeDream's optimizer divides them by 1000); activation_size is the
node's output in bytes (the optimizer sums it for stashed activations and sends it across a
stage boundary); parameter_size is bytes, fp32 in PipeDream's profiles (Conv2d(3, 64, 3x3) has
1792 parameters and parameter_size=7168 in its vgg16 graph.txt).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Sequence

from solver.cost.profile import LayerKind, LayerProfile, ModelProfile, Origin
from solver.io.profile_format import ProfileDocument, check_integer
from solver.spec.errors import SpecError
from solver.spec.model import ModelSpec
from solver.spec.training import Precision

MS_PER_S = 1000.0
PIPEDREAM_PARAMETER_BYTES = 4  # fp32, see above
_PD_NODE = re.compile(
    r"^(?P<id>\S+) -- (?P<desc>.*) -- forward_compute_time=(?P<fwd>[^,]+), "
    r"backward_compute_time=(?P<bwd>[^,]+), activation_size=(?P<act>\[[^\]]*\]|[^,]+), "
    r"parameter_size=(?P<param>[^ ]+?)(?: -- stage_id=(?P<stage>-?\d+))?$"
)


@dataclass(frozen=True)
class PipeDreamNode:
    node_id: str
    description: str
    forward_ms: float
    backward_ms: float
    activation_bytes: float
    parameter_bytes: float


def _pd_number(path: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecError(path, f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise SpecError(path, f"must be a finite non-negative number, got {text!r}")
    return value


def parse_pipedream_graph(text: str) -> tuple[list[PipeDreamNode], list[tuple[str, str]]]:
    """Nodes (in topological order) and edges of a PipeDream graph.txt.

    Input nodes (description starting with "Input", whose time is data loading) are dropped, as
    PipeDream's optimizer does; ties in the topological order go by the number in the node id,
    so the result is deterministic. Errors name the line: ``pipedream.line[12]``. (One pass
    over the file's lines with a check per field, kept together so every message names its line.)
    """
    nodes: dict[str, PipeDreamNode] = {}
    edges: list[tuple[str, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        path = f"pipedream.line[{number}]"
        if not line.strip():
            continue
        if line.startswith("\t") or (" -- " in line and "=" not in line):
            parts = line.strip().split(" -- ")
            if len(parts) != 2:
                raise SpecError(path, f"an edge is 'nodeA -- nodeB', got {line.strip()!r}")
            edges.append((parts[0], parts[1]))
            continue
        match = _PD_NODE.match(line.strip())
        if not match:
            raise SpecError(
                path,
                "expected 'node -- description -- forward_compute_time=.., backward_compute_time=.., "
                f"activation_size=.., parameter_size=..', got {line.strip()[:120]!r}",
            )
        act = match["act"]
        if act.startswith("["):
            activation = sum(_pd_number(f"{path}.activation_size", x) for x in act[1:-1].split(";") if x.strip())
        else:
            activation = _pd_number(f"{path}.activation_size", act)
        node = PipeDreamNode(
            node_id=match["id"],
            description=match["desc"],
            forward_ms=_pd_number(f"{path}.forward_compute_time", match["fwd"]),
            backward_ms=_pd_number(f"{path}.backward_compute_time", match["bwd"]),
            activation_bytes=activation,
            parameter_bytes=_pd_number(f"{path}.parameter_size", match["param"]),
        )
        if node.node_id in nodes:
            raise SpecError(path, f"node {node.node_id} is defined twice")
        nodes[node.node_id] = node
    for a, b in edges:
        for node_id in (a, b):
            if node_id not in nodes:
                raise SpecError("pipedream.edges", f"edge {a} -- {b} names unknown node {node_id}")
    if not nodes:
        raise SpecError("pipedream", "no nodes found")
    inputs = {n for n, node in nodes.items() if node.description.startswith("Input")}
    keep = [n for n in nodes if n not in inputs]
    inner_edges = [(a, b) for a, b in edges if a not in inputs and b not in inputs]

    def order_key(node_id: str) -> tuple[int, str]:
        digits = re.sub(r"\D", "", node_id)
        return (int(digits) if digits else 0, node_id)

    indegree = {n: 0 for n in keep}
    successors: dict[str, list[str]] = {n: [] for n in keep}
    for a, b in inner_edges:
        indegree[b] += 1
        successors[a].append(b)
    ready = sorted((n for n in keep if indegree[n] == 0), key=order_key)
    ordered: list[str] = []
    while ready:
        current = ready.pop(0)
        ordered.append(current)
        for nxt in successors[current]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
                ready.sort(key=order_key)
    if len(ordered) != len(keep):
        raise SpecError("pipedream.edges", "the graph has a cycle")
    input_bytes = sum(nodes[n].activation_bytes for n in inputs)
    ordered_nodes = [nodes[n] for n in ordered]
    if inputs:
        ordered_nodes.insert(0, replace(nodes[sorted(inputs, key=order_key)[0]], activation_bytes=input_bytes))
    return ordered_nodes, edges


def import_pipedream(
    text: str,
    model: ModelSpec,
    *,
    micro_batch_size: int,
    precision: Precision,
    nodes_per_layer: Sequence[int] | None = None,
    device: str = "unknown (PipeDream import)",
    parameter_bytes_per_value: int = PIPEDREAM_PARAMETER_BYTES,
) -> ProfileDocument:
    """A profile document from a PipeDream graph.txt.

    PipeDream nodes are operators; Partitura layers are embedding, ``model.num_layers``
    transformer layers and head. ``nodes_per_layer`` says how many consecutive nodes (in
    topological order, Input nodes excluded) form each layer: ``model.num_layers + 2`` entries;
    without it every node must be one layer. Per layer: times are summed and converted from ms
    to s; ``activation_bytes`` sums the nodes' outputs (PipeDream's stashed activation);
    ``output_bytes`` is what crosses the boundary to the next layer (every earlier node output
    consumed at or after the next layer); ``checkpoint_bytes`` is the layer's input, i.e. the
    previous boundary (the Input node's output for the first layer); parameter counts are
    ``parameter_size / parameter_bytes_per_value`` (fp32 in PipeDream's profiles). Byte counts
    stay as PipeDream measured them (fp32 activations). The profile is at ``tp_size`` 1 and the
    model's sequence length. (Long: the mapping above, step by step, in the order it is stated.)
    """
    ordered, edges = parse_pipedream_graph(text)
    has_input = bool(ordered) and ordered[0].description.startswith("Input")
    input_bytes = ordered[0].activation_bytes if has_input else 0.0
    body = ordered[1:] if has_input else ordered
    expected = model.num_layers + 2
    if nodes_per_layer is None:
        if len(body) != expected:
            raise SpecError(
                "nodes_per_layer",
                f"the graph has {len(body)} nodes (Input excluded) but the model needs {expected} layers "
                "(embedding, transformer layers, head): give nodes_per_layer",
            )
        nodes_per_layer = [1] * expected
    counts = [check_integer(f"nodes_per_layer[{i}]", c, 1) for i, c in enumerate(nodes_per_layer)]
    if len(counts) != expected:
        raise SpecError("nodes_per_layer", f"needs {expected} entries (embedding, {model.num_layers} layers, head), got {len(counts)}")
    if sum(counts) != len(body):
        raise SpecError("nodes_per_layer", f"covers {sum(counts)} nodes but the graph has {len(body)} (Input excluded)")
    group_of: dict[str, int] = {}
    start = 0
    for group, count in enumerate(counts):
        for node in body[start:start + count]:
            group_of[node.node_id] = group
        start += count
    activation_of = {node.node_id: node.activation_bytes for node in body}
    # boundary[g]: bytes produced in groups <= g and consumed in groups > g.
    crossing: list[set[str]] = [set() for _ in counts]
    for a, b in edges:
        if a in group_of and b in group_of:
            for g in range(group_of[a], group_of[b]):
                crossing[g].add(a)
    layers = []
    start = 0
    for group, count in enumerate(counts):
        members = body[start:start + count]
        start += count
        kind = LayerKind.EMBEDDING if group == 0 else LayerKind.HEAD if group == expected - 1 else LayerKind.TRANSFORMER
        name = "embedding" if kind is LayerKind.EMBEDDING else "head" if kind is LayerKind.HEAD else f"layer.{group - 1}"
        output = sum(activation_of[n] for n in crossing[group]) if crossing[group] else members[-1].activation_bytes
        checkpoint = input_bytes if group == 0 else layers[-1].output_bytes
        parameters = sum(node.parameter_bytes for node in members) / parameter_bytes_per_value
        activation = int(round(sum(node.activation_bytes for node in members)))
        layers.append(
            LayerProfile(
                name=name,
                kind=kind,
                forward_s=sum(node.forward_ms for node in members) / MS_PER_S,
                backward_s=sum(node.backward_ms for node in members) / MS_PER_S,
                parameter_count=int(round(parameters)),
                activation_bytes=activation,
                selective_activation_bytes=activation,
                checkpoint_bytes=int(round(checkpoint)),
                output_bytes=int(round(output)),
                origin=Origin.MEASURED,
            )
        )
    profile = ModelProfile(
        model_name=model.name,
        tp_size=1,
        micro_batch_size=check_integer("micro_batch_size", micro_batch_size, 1),
        seq_length=model.seq_length,
        precision=Precision(precision),
        layers=tuple(layers),
        device=device,
        notes=("imported from PipeDream profiler output (times in ms, fp32 sizes)",),
    )
    return ProfileDocument(model=model, profile=profile, source="pipedream graph.txt")
