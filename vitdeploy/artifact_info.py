"""What a vitdeploy artifact is, read without running it: the library call behind ``vitdeploy inspect``.

ONNX files (weights are not loaded): inputs and outputs, opset, size on disk with external weights,
the precision the graph computes in (FP32, FP16 with FP32 islands, INT8 Q/DQ) with the counts that
show it, op counts, and vitdeploy's metadata (family, variant, target, checkpoint, calibration).
TensorRT engines (``.plan``/``.engine``, or any file with a ``.json`` sidecar beside it): the
sidecar (TensorRT version, GPU, precision, profiles, I/O, the ONNX it came from) and whether the
plan's bytes still match the SHA-256 recorded in it. Neither TensorRT nor a GPU is needed.
``polygraphy inspect model`` is the convention this follows; it needs no vitdeploy metadata and
this reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitdeploy.errors import InputError

def _onnx_precision(model: Any) -> dict[str, Any]:
    """Counts that show what the graph computes in: weight types, Cast/QDQ nodes, islands of FP32 compute."""
    import onnx

    from vitdeploy.onnx_graph import cast_to

    weights: dict[str, int] = {}
    for init in model.graph.initializer:
        name = onnx.TensorProto.DataType.Name(init.data_type).lower()
        weights[name] = weights.get(name, 0) + 1
    casts = {"to_fp16": 0, "to_bf16": 0, "to_fp32": 0}
    quantize = dequantize = 0
    for node in model.graph.node:
        to = cast_to(node)
        if to == onnx.TensorProto.FLOAT16:
            casts["to_fp16"] += 1
        elif to == onnx.TensorProto.BFLOAT16:
            casts["to_bf16"] += 1
        elif to == onnx.TensorProto.FLOAT:
            casts["to_fp32"] += 1
        quantize += node.op_type == "QuantizeLinear"
        dequantize += node.op_type == "DequantizeLinear"
    return {"initializers_by_type": dict(sorted(weights.items())), "casts": casts,
            "quantize_linear": quantize, "dequantize_linear": dequantize}


def inspect_onnx(path: str | Path) -> dict[str, Any]:
    """Facts about an ONNX file (see the module docstring); InputError for a missing or invalid file."""
    from vitdeploy.engine.onnx_facts import read_onnx_facts
    from vitdeploy.fileio import external_data_problems, load_onnx_graph
    from vitdeploy.metadata import metadata_problems

    path = Path(path)
    model = load_onnx_graph(path)  # read once: OnnxFacts and the fields it does not keep
    facts = read_onnx_facts(path, model)
    problems = external_data_problems(model, path.parent)
    if facts.metadata:
        problems += [f"metadata: {p}" for p in metadata_problems(facts.metadata, {t.name: t.dims for t in facts.inputs},
                                                                 [t.name for t in facts.outputs])]
    external = [{"file": p.name, "bytes": p.stat().st_size} for p in facts.external_data if p.is_file()]
    meta = facts.metadata
    kept = meta.get("higher_precision_nodes") or []
    return {
        "kind": "onnx",
        "file": str(path),
        "bytes": path.stat().st_size + sum(e["bytes"] for e in external),
        "external_data": external,
        "ir_version": model.ir_version,
        "opsets": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "inputs": [t.to_dict() | {"dims": list(t.dims)} for t in facts.inputs],
        "outputs": [t.to_dict() | {"dims": list(t.dims)} for t in facts.outputs],
        "precision": meta.get("precision", facts.graph_precision),
        "graph_precision": facts.graph_precision,
        "precision_detail": _onnx_precision(model) | ({"nodes_kept_in_higher_precision": len(kept)} if kept else {}),
        "nodes": sum(facts.op_counts.values()),
        "op_counts": facts.op_counts,
        "metadata": meta,
        "vitdeploy_artifact": bool(meta.get("family")),
        "problems": problems,
    }


def inspect_engine(path: str | Path, verify: bool = True) -> dict[str, Any]:
    """A TensorRT engine's sidecar, and (``verify``) whether the plan still matches its recorded SHA-256."""
    from vitdeploy.engine.library import library_of_sidecar
    from vitdeploy.engine.sidecar import read_sidecar, sidecar_path
    from vitdeploy.errors import VitdeployError
    from vitdeploy.fileio import sha256_file

    path = Path(path)
    if not path.is_file():
        raise InputError(f"engine file '{path}' not found: check the path")
    sidecar = read_sidecar(path)
    info: dict[str, Any] = {
        "kind": "tensorrt-engine",
        "file": str(path),
        "bytes": path.stat().st_size,
        "sidecar": str(sidecar_path(path)),
        "precision": sidecar.get("precision"),
        "network": sidecar.get("network"),
        "tensorrt": sidecar.get("tensorrt", {}).get("version"),
        "tensorrt_library": library_of_sidecar(sidecar),
        "gpu": sidecar.get("gpu", {}),
        "layers": {k: v for k, v in (sidecar.get("layers") or {}).items() if k != "list"},
        "profiles": sidecar.get("profiles", []),
        "io": sidecar.get("io", {}),
        "onnx": sidecar.get("onnx", {}),
        "build_options": sidecar.get("build_options", {}),
        "metadata": sidecar.get("metadata", {}),
    }
    from vitdeploy.metadata import metadata_problems

    info["problems"] = [f"metadata: {p}" for p in metadata_problems(sidecar.get("metadata", {}))]
    if verify:
        try:
            recorded = sidecar["plan"]["sha256"]
            info["plan_matches_sidecar"] = sha256_file(path) == recorded
        except (OSError, VitdeployError) as exc:  # unreadable plan: say so, do not fail the listing
            info["plan_matches_sidecar"] = None
            info["plan_check_error"] = str(exc)
        if info["plan_matches_sidecar"] is False:
            info["problems"].append("the plan does not match the SHA-256 in its sidecar (changed or corrupt)")
        elif info["plan_matches_sidecar"] is None:
            info["problems"].append(f"the plan could not be read: {info['plan_check_error']}")
    return info


def inspect_artifact(path: str | Path, verify: bool = True) -> dict[str, Any]:
    """:func:`inspect_onnx` for ``.onnx`` files, :func:`inspect_engine` for engines (a file with a sidecar)."""
    from vitdeploy.engine.sidecar import sidecar_path
    from vitdeploy.runtime.backends.registry import ENGINE_SUFFIXES, ONNX_SUFFIXES

    path = Path(path)
    if path.suffix.lower() in ONNX_SUFFIXES:
        return inspect_onnx(path)
    if path.suffix.lower() in ENGINE_SUFFIXES or sidecar_path(path).is_file():
        return inspect_engine(path, verify)
    if path.is_file():
        with open(path, "rb") as handle:
            if handle.read(1) == b"\x08":  # ONNX protobuf starts with field 1 (ir_version)
                return inspect_onnx(path)
    if not path.exists():
        raise InputError(f"'{path}' not found: check the path")
    raise InputError(f"'{path}' is neither an ONNX file nor a TensorRT engine with its .json sidecar: "
                     "give a file written by 'vitdeploy export', 'calibrate' or 'build-engine'")


def _dims(dims: list) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def _cpu_form(meta: dict[str, Any]):
    """The CPU form a file's metadata records (:func:`vitdeploy.runtime.forms.cpu_form.read_cpu_form`); None for other files
    and for an unreadable entry, which ``inspect`` leaves out rather than refusing the file."""
    from vitdeploy.runtime.forms.cpu_form import read_cpu_form

    try:
        return read_cpu_form(meta)
    except InputError:
        return None


def _role(meta: dict[str, Any]) -> list[str]:
    """``  role: ...`` for a file of a known family (what it is for), else nothing."""
    from vitdeploy.families import FAMILIES

    family = FAMILIES.get(str(meta.get("family")))
    return [f"  role: {family.role}"] if family is not None and family.role else []


def describe(info: dict[str, Any]) -> list[str]:
    """Human-readable lines for an :func:`inspect_artifact` result."""
    from vitdeploy.engine.library import RTX

    lines = []
    size = f"{info['bytes'] / 1e6:.1f} MB"
    if info["kind"] == "onnx":
        extra = f" (weights in {', '.join(e['file'] for e in info['external_data'])})" if info["external_data"] else ""
        opsets = ", ".join(f"{d} {v}" for d, v in info["opsets"].items())
        lines.append(f"{info['file']}: ONNX, {size}{extra}, IR {info['ir_version']}, opset {opsets}, "
                     f"producer {info['producer'] or '?'}")
        meta = info["metadata"]
        if info["vitdeploy_artifact"]:
            origin = f"checkpoint {meta.get('checkpoint')}" if meta.get("checkpoint") else (
                f"random weights (seed {meta.get('random_seed')})" if meta.get("random_weights") else "unknown weights")
            lines.append(f"  model: {meta.get('family')} {meta.get('variant')}, input size {meta.get('input_size')}, "
                         f"target {meta.get('target', 'generic')}, {origin}")
            lines.extend(_role(meta))
            form = _cpu_form(meta)
            if form is not None:
                path = f", {form.kernel_path} kernel path" if form.kernel_path else ""
                lines.append(f"  CPU form ('vitdeploy optimize' of {form.source or '?'}): {form.attention} "
                             f"attention in {len(form.nodes)} node(s){path}; ONNX Runtime on the CPU only")
        else:
            lines.append("  model: no vitdeploy metadata (not written by vitdeploy)")
        detail = info["precision_detail"]
        words = [f"initializers {', '.join(f'{k} {v}' for k, v in detail['initializers_by_type'].items())}"]
        casts = detail["casts"]
        if any(casts.values()):
            low = "BF16" if casts["to_bf16"] else "FP16"
            words.append(f"Cast to {low} {casts['to_' + low.lower()]}, to FP32 {casts['to_fp32']}")
        if detail["quantize_linear"] or detail["dequantize_linear"]:
            words.append(f"QuantizeLinear {detail['quantize_linear']}, DequantizeLinear {detail['dequantize_linear']}")
        if "nodes_kept_in_higher_precision" in detail:
            words.append(f"{detail['nodes_kept_in_higher_precision']} node(s) kept in higher precision")
        if meta.get("calibration_images"):
            words.append(f"calibrated on {meta['calibration_images']} image(s), {meta.get('calibration_method', '?')}")
        lines.append(f"  precision: {info['precision']} ({'; '.join(words)})")
        for title, tensors in (("inputs", info["inputs"]), ("outputs", info["outputs"])):
            lines.append(f"  {title}:")
            lines.extend(f"    {t['name']}: {t['dtype']} {_dims(t['dims'])}" for t in tensors)
        top = sorted(info["op_counts"].items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append(f"  nodes: {info['nodes']} ({', '.join(f'{op} {n}' for op, n in top)})")
    else:
        gpu = info["gpu"]
        if info.get("tensorrt_library") == RTX:
            targets = ", ".join(str(t) for t in gpu.get("targets") or []) or "?"
            lines.append(f"{info['file']}: TensorRT-RTX engine, {size}, TensorRT-RTX {info['tensorrt']}, built ahead of "
                         f"time for compute capability {targets} (JIT-compiled on the GPU at load)")
        else:
            lines.append(f"{info['file']}: TensorRT engine, {size}, TensorRT {info['tensorrt']}, built for "
                         f"{gpu.get('name', '?')} (compute capability {gpu.get('compute_capability', '?')})")
        lines.append(f"  precision: {info['precision']} ({info['network'] or 'network kind not recorded'})")
        meta = info["metadata"]
        if meta.get("family"):
            lines.append(f"  model: {meta.get('family')} {meta.get('variant')}, input size {meta.get('input_size')}")
            lines.extend(_role(meta))
        onnx_src = info["onnx"]
        lines.append(f"  built from: {onnx_src.get('file', '?')} (sha256 {str(onnx_src.get('sha256', '?'))[:12]}...)")
        for direction in ("inputs", "outputs"):
            tensors = info["io"].get(direction, [])
            if tensors:
                lines.append(f"  {direction}:")
                lines.extend(f"    {t.get('name')}: {t.get('dtype')} {_dims(t.get('shape', []))}" for t in tensors)
        layers = info.get("layers") or {}
        if layers.get("by_precision"):
            counts = ", ".join(f"{n} {p}" for p, n in layers["by_precision"].items())
            kinds = ", ".join(f"{k} {n}" for k, n in layers.get("by_type_and_precision", {}).items())
            lines.append(f"  engine layers (the builder's layer list): {layers.get('count')}: {counts} ({kinds})")
        for k, profile in enumerate(info["profiles"]):
            shown = "; ".join(f"{name} min {v.get('min')} opt {v.get('opt')} max {v.get('max')}" for name, v in profile.items())
            lines.append(f"  profile {k}: {shown}")
        if "plan_matches_sidecar" in info:
            state = {True: "matches the sidecar's SHA-256", False: "does NOT match the sidecar's SHA-256 (changed or "
                     "corrupt: rebuild it with 'vitdeploy build-engine')", None: f"could not be read: "
                     f"{info.get('plan_check_error')}"}[info["plan_matches_sidecar"]]
            lines.append(f"  plan file {state}")
    for problem in info.get("problems", []):
        lines.append(f"  PROBLEM: {problem}")
    return lines


__all__ = ["describe", "inspect_artifact", "inspect_engine", "inspect_onnx"]
