"""Errors meant for people: the CLI prints ``str(error)`` on one line and exits with code 1."""


class VitdeployError(Exception):
    """Base of every error vitdeploy raises on purpose (user errors, failed checks)."""


class InputError(VitdeployError):
    """A user-supplied value (path, shape, image, option) is unusable."""


class CheckpointError(InputError):
    """A checkpoint is missing, corrupt, unsafe to unpickle, or does not fit the architecture."""


class MissingWeightsError(InputError):
    """An ONNX file's external-data (weights) file is not where the file says."""


class RecipeError(InputError):
    """An export recipe is missing or malformed."""


class ExportError(VitdeployError):
    """Exporting to ONNX failed, or the exported graph failed a check."""


class GraphHygieneError(ExportError):
    """The exported graph holds nodes or dimensions that deployment runtimes handle badly."""


class ParityError(VitdeployError):
    """Measured numbers differ from the reference beyond the named tolerances."""


class PrecisionError(VitdeployError):
    """A precision pass (FP16 / INT8) could not produce a graph within its limits."""


class EngineError(VitdeployError):
    """Building, loading or running a TensorRT engine failed."""


class MissingDependencyError(VitdeployError):
    """An optional runtime (tensorrt, onnxruntime, ...) is not installed."""

    def __init__(self, package: str, purpose: str, install_hint: str | None = None):
        hint = install_hint or f"pip install {package}"
        super().__init__(f"{purpose} needs the '{package}' package, which is not installed: {hint}")
        self.package = package


def first_line(exc: BaseException, *, skip: str | None = None) -> str:
    """The first non-empty line of ``str(exc)`` (lines starting with ``skip`` left out), else the exception's type
    name: what a one-line message quotes of a library's error."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not (skip and ln.strip().startswith(skip))]
    return lines[0] if lines else type(exc).__name__
