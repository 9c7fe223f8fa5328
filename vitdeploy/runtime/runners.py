"""Runner interface shared by every backend, and the ONNX Runtime runner (the embedded default)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from vitdeploy.errors import InputError, MissingDependencyError
from vitdeploy.metadata import decode


@runtime_checkable
class Runner(Protocol):
    """What the predictor, ``validate`` and ``benchmark`` need from a backend."""

    name: str
    input_names: list[str]
    output_names: list[str]
    metadata: dict[str, Any]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; ``feeds`` maps input names to arrays, the result maps output names to arrays."""
        ...


def ort_providers(device: str) -> list[str]:
    """ONNX Runtime execution providers for ``cpu``, ``cuda`` or ``tensorrt``, best first."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    wanted = {
        "cpu": ["CPUExecutionProvider"],
        "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
        "tensorrt": ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
    }[device]
    if wanted[0] not in available:
        raise InputError(
            f"ONNX Runtime here has no {wanted[0]} (available: {', '.join(available)}): "
            "install onnxruntime-gpu on a CUDA machine, or use --device cpu"
        )
    return wanted


class OnnxRuntimeRunner:
    """Runs an ONNX file with ONNX Runtime; reads the file's vitdeploy metadata."""

    def __init__(
        self,
        path: str | Path,
        threads: int | None = None,
        device: str = "cpu",
        optimization: str = "all",
        optimized_model_path: str | Path | None = None,
    ):
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - onnxruntime is a core dependency
            raise MissingDependencyError("onnxruntime", "running ONNX models") from exc
        path = Path(path)
        if not path.is_file():
            raise InputError(f"ONNX file '{path}' not found: run 'vitdeploy export' first or check the path")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
            options.inter_op_num_threads = 1
        options.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[optimization]
        if optimized_model_path is not None:
            options.optimized_model_filepath = str(optimized_model_path)
        try:
            self.session = ort.InferenceSession(str(path), options, providers=ort_providers(device))
        except Exception as exc:  # ORT raises its own Fail/InvalidGraph types; all mean "unusable file".
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"ONNX Runtime cannot load '{path}' ({first}): re-export it with 'vitdeploy export'") from exc
        self.path = path
        self.threads = threads
        self.device = device
        self.name = f"onnxruntime-{device}"
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.metadata = decode(self.session.get_modelmeta().custom_metadata_map)

    def input_shapes(self) -> dict[str, list[int | str]]:
        return {i.name: list(i.shape) for i in self.session.get_inputs()}

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise InputError(f"missing inputs {missing} for '{self.path.name}' (it takes {self.input_names})")
        outputs = self.session.run(self.output_names, {n: feeds[n] for n in self.input_names})
        return dict(zip(self.output_names, outputs))
