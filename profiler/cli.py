"""``partitura profile``, ``partitura calibrate`` and ``partitura import-pipedream``.

``register(subparsers)`` adds both commands to the service CLI's argparse sub-parsers; each sets
``handler`` to a callable taking the parsed namespace and returning an exit status. torch is imported
only when a command runs, so the CLI stays usable without the ``profile`` extra.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from catalog import CatalogError, get_cluster, get_gpu, get_model, list_entries
from profiler.compare import compare_to_analytic, comparison_table
from profiler.pipedream import import_pipedream
from solver.io.profile_format import model_from_dict, parse_profile_document, profile_document
from solver.spec.errors import SpecError
from solver.spec.hardware import GpuSpec
from solver.spec.training import Precision

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
UPLOAD_TIMEOUT_S = 60.0


def register(subparsers: Any) -> None:
    """Add the ``profile``, ``calibrate`` and ``import-pipedream`` sub-commands. (Long but flat:
    one argparse declaration per option, read as the commands' reference.)"""
    profile = subparsers.add_parser(
        "profile", help="measure a model's per-layer profile with PyTorch (needs the profile extra)",
        description="Time forward and backward of each layer of a model on this machine and write a "
        "partitura-profile/1 document.",
    )
    profile.add_argument("--model", required=True, help="catalog model name, or a JSON file with a model spec")
    profile.add_argument("--micro-batch-size", type=int, default=1)
    profile.add_argument("--seq-length", type=int, default=None, help="default: the model's sequence length")
    profile.add_argument("--tp-size", type=int, default=1, help="measure one GPU's share of a TP group of this size")
    profile.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    profile.add_argument("--precision", default="bf16", choices=["bf16", "fp16"])
    profile.add_argument("--no-flash-attention", action="store_true", help="materialise attention scores")
    profile.add_argument("--warmup", type=int, default=3)
    profile.add_argument("--repeats", type=int, default=10)
    profile.add_argument("--threads", type=int, default=None, help="CPU threads for torch (CPU runs)")
    profile.add_argument(
        "--statistic", default="median", choices=["median", "min"],
        help="how repeats are summarised (min: for noisy shared hosts)",
    )
    profile.add_argument("--output", "-o", default=None, help="file to write (default: standard output)")
    profile.add_argument("--upload", default=None, metavar="URL", help="POST the profile to URL/v1/profiles")
    profile.add_argument(
        "--compare-cluster", default=None, metavar="CLUSTER",
        help="also print measured vs analytic per layer for this catalog cluster (standard error)",
    )
    profile.set_defaults(handler=run_profile)

    compare = subparsers.add_parser(
        "compare-profile", help="measured vs analytic per layer for a profile document",
        description="Print each layer's measured and analytic forward/backward time and activation bytes.",
    )
    compare.add_argument("profile", help="a partitura-profile/1 document")
    compare.add_argument("--cluster", required=True, help="catalog cluster whose GPU the analytic model assumes")
    compare.set_defaults(handler=run_compare)

    calibrate = subparsers.add_parser(
        "calibrate", help="measure GEMM efficiency and memory bandwidth; write a catalog override",
        description="Run a GEMM sweep and a bandwidth probe on the local device and write the gpus.json "
        "keys (gemm_efficiency, gemm_saturation_dim, hbm_efficiency) for its GPU type.",
    )
    calibrate.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    calibrate.add_argument("--gpu", default=None, help="catalog GPU name (default: matched from the device name)")
    calibrate.add_argument("--peak-tflops", type=float, default=None, help="dense peak, for a device not in the catalog")
    calibrate.add_argument("--hbm-gbytes-per-s", type=float, default=None, help="memory bandwidth, same case")
    calibrate.add_argument("--precision", action="append", choices=["bf16", "fp16"], default=None)
    calibrate.add_argument("--warmup", type=int, default=3)
    calibrate.add_argument("--repeats", type=int, default=10)
    calibrate.add_argument("--threads", type=int, default=None, help="CPU threads for torch (CPU runs)")
    calibrate.add_argument("--output", "-o", default=None, help="file to write (default: standard output)")
    calibrate.set_defaults(handler=run_calibrate)

    pipedream = subparsers.add_parser(
        "import-pipedream", help="convert a PipeDream profiler graph.txt into a profile document",
        description="Group a PipeDream graph's nodes into the model's layers (embedding, transformer layers, "
        "head) and write a partitura-profile/1 document (times converted from ms to s).",
    )
    pipedream.add_argument("graph", help="PipeDream profiler output (graph.txt)")
    pipedream.add_argument("--model", required=True, help="catalog model name, or a JSON file with a model spec")
    pipedream.add_argument("--micro-batch-size", type=int, required=True, help="the batch size PipeDream profiled")
    pipedream.add_argument("--precision", required=True, choices=["bf16", "fp16", "fp8"], help="precision to plan with")
    pipedream.add_argument(
        "--nodes-per-layer", default=None,
        help="comma-separated node counts per layer in topological order (num_layers + 2 entries)",
    )
    pipedream.add_argument("--device", default="unknown (PipeDream import)", help="the GPU PipeDream ran on")
    pipedream.add_argument("--output", "-o", default=None, help="file to write (default: standard output)")
    pipedream.add_argument("--upload", default=None, metavar="URL", help="POST the profile to URL/v1/profiles")
    pipedream.set_defaults(handler=run_import_pipedream)


def load_model(reference: str):
    """A ModelSpec from a catalog name or a JSON file (a model spec, or a document with "model")."""
    path = Path(reference)
    if path.suffix == ".json" or path.exists():
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise SpecError("model", f"no such file: {reference}") from None
        except json.JSONDecodeError as err:
            raise SpecError("model", f"{reference} is not JSON: {err}") from None
        if isinstance(raw, dict) and isinstance(raw.get("model"), dict):
            raw = raw["model"]
        return model_from_dict(raw)

    try:
        return get_model(reference)
    except CatalogError as err:
        raise SpecError("model", str(err)) from None


def _torch(threads: int | None):
    try:
        import torch
    except ImportError:
        raise SpecError("torch", "PyTorch is not installed: pip install 'partitura[profile]'") from None
    if threads is not None:
        if threads < 1:
            raise SpecError("threads", f"must be a positive integer, got {threads}")
        torch.set_num_threads(threads)
    return torch


def _default_device(torch_module, device: str | None) -> str:
    return device or ("cuda" if torch_module.cuda.is_available() else "cpu")


def _write(document: dict, output: str | None) -> None:
    text = json.dumps(document, indent=2) + "\n"
    if output:
        Path(output).write_text(text)
        print(f"wrote {output}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def upload(document: dict, base_url: str) -> dict:
    """POST the document to ``base_url``/v1/profiles; returns the service's JSON reply."""
    url = base_url.rstrip("/") + "/v1/profiles"
    request = urllib.request.Request(
        url, data=json.dumps(document).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=UPLOAD_TIMEOUT_S) as reply:
            return json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as err:
        detail = err.read().decode(errors="replace")[:2000]
        raise RuntimeError(f"upload to {url} failed: HTTP {err.code}: {detail}") from None
    except urllib.error.URLError as err:
        raise RuntimeError(f"upload to {url} failed: {err.reason}") from None


def run_profile(args: argparse.Namespace) -> int:
    """Handler of ``partitura profile``; returns the exit status."""
    try:
        torch_module = _torch(args.threads)
        from profiler.measure import ProfileSettings, profile_model

        model = load_model(args.model)
        settings = ProfileSettings(
            micro_batch_size=args.micro_batch_size,
            seq_length=args.seq_length,
            tp_size=args.tp_size,
            precision=Precision(args.precision),
            device=_default_device(torch_module, args.device),
            flash_attention=not args.no_flash_attention,
            warmup=args.warmup,
            repeats=args.repeats,
            statistic=args.statistic,
        )
        measured = profile_model(model, settings)
        document = profile_document(measured)
        if args.compare_cluster:
            print(_comparison(measured, args.compare_cluster), file=sys.stderr)
    except SpecError as err:
        print(f"error: {err.field}: {err.reason}", file=sys.stderr)
        return EXIT_BAD_INPUT
    _write(document, args.output)
    return _upload_and_report(document, args.upload)


def _comparison(document, cluster_name: str) -> str:

    try:
        cluster = get_cluster(cluster_name)
    except CatalogError as err:
        raise SpecError("cluster", str(err)) from None
    return comparison_table(compare_to_analytic(document, cluster))


def run_compare(args: argparse.Namespace) -> int:
    """Handler of ``partitura compare-profile``; prints the table, returns the exit status."""
    try:
        try:
            raw = json.loads(Path(args.profile).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise SpecError("profile", f"cannot read {args.profile}: {err}") from None
        print(_comparison(parse_profile_document(raw), args.cluster))
    except SpecError as err:
        print(f"error: {err.field}: {err.reason}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def _upload_and_report(document: dict, url: str | None) -> int:
    if not url:
        return 0
    try:
        reply = upload(document, url)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(f"uploaded: profile id {reply.get('id')}", file=sys.stderr)
    return 0


def run_import_pipedream(args: argparse.Namespace) -> int:
    """Handler of ``partitura import-pipedream``; returns the exit status (no torch needed)."""

    try:
        try:
            text = Path(args.graph).read_text()
        except OSError as err:
            raise SpecError("graph", f"cannot read {args.graph}: {err.strerror}") from None
        counts = None
        if args.nodes_per_layer:
            try:
                counts = [int(part) for part in args.nodes_per_layer.split(",")]
            except ValueError:
                raise SpecError("nodes_per_layer", f"expected comma-separated integers, got {args.nodes_per_layer!r}") from None
        document = profile_document(
            import_pipedream(
                text, load_model(args.model), micro_batch_size=args.micro_batch_size,
                precision=Precision(args.precision), nodes_per_layer=counts, device=args.device,
            )
        )
    except SpecError as err:
        print(f"error: {err.field}: {err.reason}", file=sys.stderr)
        return EXIT_BAD_INPUT
    _write(document, args.output)
    return _upload_and_report(document, args.upload)


def match_catalog_gpu(name: str, memory_gib: float | None) -> str:
    """The catalog GPU whose model token (H100, A100, MI300X, ...) appears in the device name;
    among several, the one with the closest memory size. Raises SpecError when none matches."""
    upper = name.upper()
    matches = []
    for entry in list_entries("gpus"):
        tokens = [t for t in entry["display_name"].upper().split() if any(c.isdigit() for c in t) and any(c.isalpha() for c in t)]
        if tokens and tokens[0] in upper:
            matches.append(entry)
    if not matches:
        raise SpecError("gpu", f"no catalog GPU matches {name!r}: pass --gpu, or --peak-tflops and --hbm-gbytes-per-s")
    if memory_gib is None:
        return matches[0]["name"]
    return min(matches, key=lambda e: abs(e["memory_gib"] - memory_gib))["name"]


def _calibration_gpu(args: argparse.Namespace, torch_module, device: str):

    if args.peak_tflops is not None or args.hbm_gbytes_per_s is not None:
        if args.peak_tflops is None or args.hbm_gbytes_per_s is None:
            raise SpecError("peak_tflops", "--peak-tflops and --hbm-gbytes-per-s go together")
        precisions = [Precision(p) for p in (args.precision or ["bf16"])]
        memory = torch_module.cuda.get_device_properties(device).total_memory if device.startswith("cuda") else 2**30
        return GpuSpec(
            name=args.gpu or "custom",
            peak_flops_per_s={p: args.peak_tflops * 1e12 for p in precisions},
            memory_bytes=memory,
            hbm_bytes_per_s=args.hbm_gbytes_per_s * 1e9,
            gemm_efficiency={p: 1.0 for p in precisions},
        )
    name = args.gpu
    if name is None:
        if not device.startswith("cuda"):
            raise SpecError("gpu", "a CPU has no catalog entry: pass --peak-tflops and --hbm-gbytes-per-s")
        properties = torch_module.cuda.get_device_properties(device)
        name = match_catalog_gpu(properties.name, properties.total_memory / 2**30)
    try:
        return get_gpu(name)
    except CatalogError as err:
        raise SpecError("gpu", str(err)) from None


def run_calibrate(args: argparse.Namespace) -> int:
    """Handler of ``partitura calibrate``; returns the exit status."""
    try:
        torch_module = _torch(args.threads)
        from profiler.calibrate import calibrate

        device = _default_device(torch_module, args.device)
        gpu = _calibration_gpu(args, torch_module, device)
        precisions = tuple(Precision(p) for p in args.precision) if args.precision else None
        document = calibrate(gpu, device=device, precisions=precisions, warmup=args.warmup, repeats=args.repeats)
    except SpecError as err:
        print(f"error: {err.field}: {err.reason}", file=sys.stderr)
        return EXIT_BAD_INPUT
    _write(document, args.output)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m profiler profile|calibrate ...``."""
    parser = argparse.ArgumentParser(prog="partitura")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)
