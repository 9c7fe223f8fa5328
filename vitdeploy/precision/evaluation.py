"""Run two ONNX graphs on the same feeds with ONNX Runtime and compare every output (the parity API)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx

from vitdeploy.parity import ParityResult, Tolerance, compare

Feeds = dict[str, np.ndarray]
#: ``progress(stage, done, total)``: what the long precision calls report (see vitdeploy.cli.progress).
StageProgress = Callable[[str, int, int], None]


def ort_session(model: onnx.ModelProto, threads: int | None = None):
    """A CPU ONNX Runtime session for an in-memory model (all graph optimizations, quiet logs).

    No memory arena: these sessions run a few feeds and are dropped, so what they allocate goes back
    at once (with an arena, the full-size SAM encoder's FP32 and INT8 evaluation sessions held
    6.4 GB and 9.8 GB). Q/DQ graphs get the settings :class:`vitdeploy.runtime.backends.onnxruntime_runner.OnnxRuntimeRunner`
    gives them (``MatMulAddFusion`` off so they run integer kernels; on CPUs where those saturate,
    the exact ones: :func:`vitdeploy.runtime.backends.ort_settings.int8_kernels`), so what is measured here is
    what a deployment runs.
    """
    from vitdeploy.precision.model_io import inference_session
    from vitdeploy.runtime.backends.ort_settings import OrtSettings

    quantized = any(n.op_type == "QuantizeLinear" for n in model.graph.node)
    settings = OrtSettings(threads=threads, memory_arena=False)
    options = settings.session_options(quantized)
    options.log_severity_level = 3
    return inference_session(model, options, disabled_optimizers=settings.optimizers_to_disable(quantized) or None)


def run_all(session, feeds_list: Sequence[Feeds], progress: StageProgress | None = None,
            stage: str = "running") -> list[dict[str, np.ndarray]]:
    """Outputs of ``session`` for every feed dict (graph output names -> arrays)."""
    names = [o.name for o in session.get_outputs()]
    outputs = []
    if progress:  # the stage starts now
        progress(stage, 0, len(feeds_list))
    for k, feeds in enumerate(feeds_list):
        outputs.append(dict(zip(names, session.run(names, feeds))))
        if progress:
            progress(stage, k + 1, len(feeds_list))
    return outputs


def compare_outputs(
    reference: Sequence[dict[str, np.ndarray]],
    candidate: Sequence[dict[str, np.ndarray]],
    tolerance: Tolerance | str,
    labels: Sequence[str] | None = None,
) -> list[ParityResult]:
    """One ParityResult per feed and output (outputs matched by name)."""
    results = []
    for k, (ref, cand) in enumerate(zip(reference, candidate)):
        label = labels[k] if labels else f"input{k}"
        for name, value in ref.items():
            results.append(compare(value, cand[name], tolerance, label=f"{label}/{name}"))
    return results


def worst_cosine(results: Sequence[ParityResult]) -> float:
    """The lowest cosine among results (1.0 for none); a non-finite output counts as 0."""
    return min((r.cosine if r.nan_count + r.inf_count == 0 else 0.0 for r in results), default=1.0)


def run_faithful(model: onnx.ModelProto, feeds_list: Sequence[Feeds], threads: int | None = None,
                 progress: StageProgress | None = None, stage: str = "running the 16-bit graph") -> list[dict[str, np.ndarray]]:
    """Outputs of ``model`` with every tensor stored in the type the graph declares (FP16 and BF16 alike).

    Why not a plain session: on a CPU, ONNX Runtime runs FP16 ops without an FP16 kernel in FP32 and
    removes the Cast pairs between them, so a chain of such ops never rounds to FP16 and never
    overflows. Measured on the overflow test model: a naive FP16 graph gives finite outputs in one
    plain session and Inf/NaN when every tensor is rounded (what a GPU that stores each layer in FP16
    gives); it has no BF16 arithmetic kernels at all. :func:`vitdeploy.precision.segments.with_half_storage`
    stores every FP16/BF16 tensor in its format in one session (explicit casts around FP32 arithmetic;
    tested against running the graph node by node).
    """
    from vitdeploy.precision.half_storage import with_half_storage
    from vitdeploy.precision.model_io import plain_session

    return run_all(plain_session(with_half_storage(model), threads), feeds_list, progress, stage)
