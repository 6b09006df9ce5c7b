"""How far the analytic model is from a measurement: per-layer ratios, measured / analytic.

Pure (no torch): it compares a validated profile document with ``solver.cost.analytic``'s profile at
the same configuration on a given cluster (its GPU type supplies the peaks and efficiencies).
"""

from __future__ import annotations

from dataclasses import dataclass

from solver.cost.analytic import analytic_profile
from solver.cost.profile import ProfileShape
from solver.io.profile_format import ProfileDocument
from solver.spec.hardware import ClusterSpec
from solver.spec.training import TrainingSpec

COMPARED_FIELDS = ("forward_s", "backward_s", "activation_bytes", "parameter_count")


@dataclass(frozen=True)
class LayerComparison:
    name: str
    kind: str
    measured: dict[str, float]
    analytic: dict[str, float]

    def ratio(self, field: str) -> float | None:
        """measured / analytic for ``field``; None where the analytic value is 0."""
        base = self.analytic[field]
        return self.measured[field] / base if base else None


def compare_to_analytic(document: ProfileDocument, cluster: ClusterSpec) -> list[LayerComparison]:
    """Per layer, the measured and analytic values of COMPARED_FIELDS at the document's
    configuration (tp_size, micro-batch, sequence length, precision, attention kernel, SP)."""
    profile = document.profile
    training = TrainingSpec(
        global_batch_size=profile.micro_batch_size,
        seq_length=profile.seq_length,
        precision=profile.precision,
        flash_attention=document.flash_attention,
    )
    analytic = analytic_profile(
        document.model, cluster, training, ProfileShape(profile.tp_size, profile.micro_batch_size, document.sequence_parallel)
    )
    rows = []
    for mine, theirs in zip(profile.layers, analytic.layers, strict=True):
        rows.append(
            LayerComparison(
                name=mine.name,
                kind=mine.kind.value,
                measured={f: float(getattr(mine, f)) for f in COMPARED_FIELDS},
                analytic={f: float(getattr(theirs, f)) for f in COMPARED_FIELDS},
            )
        )
    return rows


def comparison_table(rows: list[LayerComparison]) -> str:
    """A plain-text table of measured vs analytic times (ms) and activation bytes (MiB)."""
    lines = [
        f"{'layer':<12} {'fwd ms':>9} {'model':>9} {'bwd ms':>9} {'model':>9} {'act MiB':>9} {'model':>9}  ratios f/b/act"
    ]
    for row in rows:
        ratios = "/".join(
            "-" if row.ratio(f) is None else f"{row.ratio(f):.2f}" for f in ("forward_s", "backward_s", "activation_bytes")
        )
        lines.append(
            f"{row.name:<12} {row.measured['forward_s'] * 1e3:>9.3f} {row.analytic['forward_s'] * 1e3:>9.3f} "
            f"{row.measured['backward_s'] * 1e3:>9.3f} {row.analytic['backward_s'] * 1e3:>9.3f} "
            f"{row.measured['activation_bytes'] / 2**20:>9.2f} {row.analytic['activation_bytes'] / 2**20:>9.2f}  {ratios}"
        )
    return "\n".join(lines)
