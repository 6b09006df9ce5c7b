"""``partitura profile``, ``partitura compare-profile``, ``partitura calibrate`` and
``partitura import-pipedream``: the handlers, each taking the parsed namespace and returning an
exit status. Their parsers are declared in ``profiler.commands``. torch is imported only when a
command runs, so the CLI stays usable without the ``profile`` extra.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

from catalog import CatalogError, get_cluster, get_gpu, get_model, list_entries
from profiler.commands import register
from profiler.compare import compare_to_analytic, comparison_table
from profiler.pipedream import import_pipedream
from solver.io.profile_format import model_from_dict, parse_profile_document, profile_document
from solver.spec.errors import SpecError
from solver.spec.hardware import GpuSpec
from solver.spec.training import Precision

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
UPLOAD_TIMEOUT_S = 60.0


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
    return _catalog_gpu(args.gpu, torch_module, device, "pass --peak-tflops and --hbm-gbytes-per-s")


def _catalog_gpu(name: str | None, torch_module, device: str, cpu_hint: str) -> GpuSpec:
    """The catalog GPU ``name``, or the one matched from the CUDA device's name; on a CPU, which
    has no entry, SpecError with ``cpu_hint`` (what the command takes instead)."""
    if name is None:
        if not device.startswith("cuda"):
            raise SpecError("gpu", f"a CPU has no catalog entry: {cpu_hint}")
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


def run_gemm_shapes(args: argparse.Namespace) -> int:
    """Handler of ``partitura gemm-shapes``; prints the table, returns the exit status."""
    try:
        torch_module = _torch(args.threads)
        from profiler.gemm_shapes import layer_gemm_shapes, mamf_shapes, time_gemms, timings_document, timings_table

        model = load_model(args.model)
        device = _default_device(torch_module, args.device)
        gpu = _catalog_gpu(args.gpu, torch_module, device, "pass --gpu to price the GEMMs as that GPU")
        precision = Precision(args.precision)
        seq_length = args.seq_length or model.seq_length
        tokens = args.micro_batch_size * seq_length
        shapes = layer_gemm_shapes(model, args.tp_size, tokens) + mamf_shapes(gpu.name, precision)
        timings = time_gemms(shapes, gpu, precision, device, args.warmup, args.repeats)
    except SpecError as err:
        print(f"error: {err.field}: {err.reason}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(timings_table(timings))
    if args.output:
        context = {
            "model": model.name, "gpu": gpu.name, "device": device, "precision": precision.value,
            "tp_size": args.tp_size, "micro_batch_size": args.micro_batch_size, "seq_length": seq_length,
            "warmup": args.warmup, "repeats": args.repeats,
        }
        _write(timings_document(timings, context), args.output)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m profiler profile|calibrate ...``."""
    parser = argparse.ArgumentParser(prog="partitura")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)
