"""An OpenVINO load-time form: each GELU kept apart from the GEMM before it, on CPUs where that GEMM is MLAS.

OpenVINO's CPU plugin fuses an activation into the FullyConnected before it. On an x86 CPU without AVX-512
its f32 FullyConnected runs MLAS's SGEMM only without such a post-op; with one it runs oneDNN's
``brgemm_avx2_f32``, which is slower there. Measured on AMD EPYC Zen 3 (AVX2, no AVX-512), OpenVINO 2026.4.1,
2 threads, f32:

* one ``Linear(768, 3072)`` on ViT-B's 4096 tokens: 154 ms alone (``gemm_mlas_f32``), 209-212 ms with the
  exported erf GELU after it (fused, ``brgemm_avx2_f32``), 156 ms with the GELU kept apart (MLAS, the GELU in
  a 9 ms snippet);
* the same MLP layer, alternated in one process, kept apart / fused: 0.754 (4096 tokens, SAM ViT-B@1024), 0.701
  (197 tokens, ViT-B/16), 0.912 (DeiT-S, 384 -> 1536), 0.945 (Hiera-T's first stage, 96 -> 384), medians of 20-40 pairs;
* SAM ViT-B@1024, vitdeploy's ``generic`` file: 8188 against 8531 ms (8 alternated pairs in one process, 7 faster; every
  FullyConnected then runs MLAS), outputs within relative L2 1.3e-6 of each other; in a benchmark run, vitdeploy's
  default with it 7656 ms against 8508 ms without and 9271 ms for OpenVINO's default on the plain export.

How it is kept apart, in the ``openvino.Model`` after ``Core.read_model`` (the file is not changed): the scalar
``sqrt(2)`` that the exported GELU divides by (``x / sqrt(2)`` into ``Erf``) becomes the same value repeated
per channel. OpenVINO's GELU fusion does not match that (seen with OpenVINO 2026.4.1; a test fails when a version
fuses it again), so the chain stays Divide/Erf/Add/Multiply, which the plugin runs as one snippet; the GEMM then has
two consumers and no post-op. The numbers are the same division by the same constant; what differs is OpenVINO's own
GELU kernel (its erf) against its Erf kernel: the test suite holds both forms to the official model within the
``fp32`` budget.

Only GELUs fed by a GEMM (``MatMul``, or ``MatMul`` + bias ``Add``) are touched, only in FP32 files, and only on
x86 CPUs with AVX2 and without AVX-512 (:func:`keep_gelu_apart`): elsewhere (AVX-512, AMX in BF16, INT8 GEMMs) the
fused kernel was not measured slower, and there the plugin's own choice stands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitdeploy.cpu_features import CpuFeatures
from vitdeploy.errors import InputError
from vitdeploy.precisions import Precision
from vitdeploy.runtime_facts import OPENVINO_GELU_APART

if TYPE_CHECKING:
    import onnx

#: What the runner's ``provider`` line says when the form applied (after the count).
DESCRIPTION = "GELU(s) kept apart from their GEMM (OpenVINO runs such GEMMs on MLAS)"

#: vitdeploy metadata key of a file written by ``vitdeploy optimize --runtime openvino`` (a JSON object:
#: ``{"gelus_apart": N, "source": "<the exported file's name>"}``).
OPENVINO_FORM_KEY = "openvino_form"


def read_openvino_form(metadata: dict[str, Any], name: str = "the file") -> dict[str, Any] | None:
    """The OpenVINO form a file's decoded vitdeploy metadata records (``gelus_apart``, ``source``); None for any other
    file, InputError for an unreadable entry."""
    raw = metadata.get(OPENVINO_FORM_KEY)
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("gelus_apart"), int):
        raise InputError(f"{name} has an unreadable '{OPENVINO_FORM_KEY}' metadata entry ({raw!r}): write it again with "
                         "'vitdeploy optimize --runtime openvino' from the exported file")
    return {"gelus_apart": raw["gelus_apart"], "source": str(raw.get("source", ""))}


def keep_gelu_apart(features: CpuFeatures, file_precision: Precision) -> bool:
    """Whether the form pays on this CPU for a file of ``file_precision`` (module docstring: where it was measured)."""
    where = OPENVINO_GELU_APART  # the data file the C++ library reads too (vitdeploy/data/runtime_facts.json)
    return (features.x86 and all(features.has(f) for f in where["flags"])
            and not any(features.has(f) for f in where["without"]) and file_precision.value in where["file_precisions"])


def _fed_by_gemm(node: Any) -> bool:
    """``node`` is a MatMul, or an Add of a MatMul and a constant (the bias)."""
    kind = node.get_type_name()
    if kind == "MatMul":
        return True
    if kind != "Add":
        return False
    inputs = [node.input_value(i).get_node().get_type_name() for i in range(node.get_input_size())]
    return "MatMul" in inputs and "Constant" in inputs


def gelu_apart_from_gemms(model: Any, rewrite: bool = True) -> int:
    """Rewrite ``model`` (an ``openvino.Model``) in place as the module docstring says (``rewrite``); returns how many
    GELUs fed by a GEMM run apart from it: those rewritten here and those the file already holds apart (written by
    :func:`gelu_apart_in_onnx`). A GELU whose scale is not a scalar constant, or whose channel count is not static, is
    left as it is."""
    import numpy as np
    from openvino import opset13

    count = changed = 0
    for erf in model.get_ordered_ops():
        if erf.get_type_name() != "Erf":
            continue
        scale = erf.input_value(0).get_node()  # x / sqrt(2) (or x * 1/sqrt(2))
        if scale.get_type_name() not in ("Divide", "Multiply"):
            continue
        constant = scale.input_value(1).get_node()
        source = scale.input_value(0)
        if constant.get_type_name() != "Constant" or not _fed_by_gemm(source.get_node()):
            continue
        value, shape = constant.get_data(), source.get_partial_shape()
        channels = shape[-1] if shape.rank.is_static and shape.rank.get_length() > 0 else None
        if channels is None or not channels.is_static:
            continue
        if value.size > 1 and value.size == channels.get_length():  # apart as the file holds it
            count += 1
        elif value.size == 1 and rewrite:
            per_channel = opset13.constant(np.full(channels.get_length(), value.reshape(()), dtype=value.dtype))
            scale.input(1).replace_source_output(per_channel.output(0))
            count += 1
            changed += 1
    if changed:
        model.validate_nodes_and_infer_types()
    return count


def gelu_apart_in_onnx(model: onnx.ModelProto) -> int:
    """The same form written into an ONNX graph, in place, so that OpenVINO reading the file as it stands (an
    application's own ``Core.read_model``) keeps each GELU apart (``vitdeploy optimize --runtime openvino``): the scalar
    divisor of each ``Div``/``Mul`` into ``Erf`` whose input comes from a ``MatMul`` (or ``MatMul`` + bias ``Add``)
    with a constant weight becomes a per-channel initializer of the same value. Returns how many it rewrote.

    OpenVINO's ONNX reader keeps such a constant per channel (seen with 2026.4.1: the chains stay apart in the
    compiled model, which a test checks). ONNX Runtime's own GELU fusion needs the scalar, so it runs these chains
    unfused: the file is for OpenVINO.
    """
    import numpy as np
    from onnx import numpy_helper

    initializers = {t.name: t for t in model.graph.initializer}
    constants = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant" and n.attribute}
    producers = {out: n for n in model.graph.node for out in n.output}

    def weight_columns(node: Any) -> int | None:
        """The output channels of a MatMul with a constant 2-D-or-more weight; None for anything else."""
        if node is None or node.op_type != "MatMul" or node.input[1] not in initializers:
            return None
        dims = initializers[node.input[1]].dims
        return int(dims[-1]) if len(dims) >= 2 else None

    def channels_of(name: str) -> int | None:
        node = producers.get(name)
        if node is not None and node.op_type == "Add":
            gemms = [weight_columns(producers.get(i)) for i in node.input]
            biases = [i for i in node.input if i in initializers]
            columns = next((c for c in gemms if c is not None), None)
            return columns if biases and columns is not None else None
        return weight_columns(node)

    def scalar(name: str) -> np.ndarray | None:
        if name in initializers:
            value = numpy_helper.to_array(initializers[name])
        elif name in constants and constants[name].attribute[0].name == "value":
            value = numpy_helper.to_array(constants[name].attribute[0].t)
        else:
            return None
        return value if value.size == 1 else None

    count, replaced = 0, set()
    for erf in model.graph.node:
        scale = producers.get(erf.input[0]) if erf.op_type == "Erf" else None
        if scale is None or scale.op_type not in ("Div", "Mul") or len(scale.input) != 2:
            continue
        value, channels = scalar(scale.input[1]), channels_of(scale.input[0])
        if value is None or channels is None:
            continue
        name = f"{scale.name or scale.output[0]}/per_channel_divisor"
        model.graph.initializer.append(numpy_helper.from_array(np.full(channels, value.reshape(()), value.dtype), name))
        replaced.add(scale.input[1])
        scale.input[1] = name
        count += 1
    # the scalars no node reads any more (the exporter shares one sqrt(2) between GELUs): not left in the file
    used = {name for node in model.graph.node for name in node.input} | {o.name for o in model.graph.output}
    unused = replaced - used
    kept = [t for t in model.graph.initializer if t.name not in unused]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    for node in [n for n in model.graph.node if n.op_type == "Constant" and n.output[0] in unused]:
        model.graph.node.remove(node)
    return count


__all__ = ["DESCRIPTION", "OPENVINO_FORM_KEY", "gelu_apart_from_gemms", "gelu_apart_in_onnx", "keep_gelu_apart",
           "read_openvino_form"]
