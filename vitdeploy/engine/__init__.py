"""Stage 5: ONNX -> TensorRT engine (``.plan``) with a JSON sidecar; version and GPU compatibility checks.

Nothing here imports ``tensorrt`` at import time: the builder imports it inside the function that
needs it, and the sidecar / compatibility logic is plain Python that the runtime (and the C++ side)
can rely on without TensorRT installed.
"""

from vitdeploy.engine.compat import RunningEnvironment, check_engine_compat, version_can_run
from vitdeploy.engine.sidecar import SIDECAR_SCHEMA, read_sidecar, sidecar_path

__all__ = ["SIDECAR_SCHEMA", "RunningEnvironment", "check_engine_compat", "read_sidecar", "sidecar_path", "version_can_run"]
