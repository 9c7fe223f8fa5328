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


#: What a library's out-of-memory error says when it is not a MemoryError (ONNX Runtime's arena, OpenVINO, C++ new).
_OUT_OF_MEMORY_WORDS = ("bad_alloc", "failed to allocate memory", "out of memory", "cannot allocate memory")


def resource_problem(exc: BaseException) -> str | None:
    """The one line for an error that means this machine ran out of something (disk space, memory, open files),
    naming the resource and the fix; None for any other error. The verbs' outputs are written atomically, so what
    was not complete is gone and a rerun starts clean (a dataset job resumes after its last whole shard)."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        where = f" writing '{exc.filename}'" if exc.filename else ""
        return (f"no space left on the device{where}: free space there or write elsewhere (-o / --out-dir), then run "
                "the same command again (outputs not yet complete were removed; a dataset job resumes)")
    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
        return ("too many open files: raise this shell's limit ('ulimit -n 4096') or use fewer workers, then run the "
                "same command again")
    if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM) or (
            not isinstance(exc, OSError) and any(w in str(exc).lower() for w in _OUT_OF_MEMORY_WORDS)):
        return ("out of memory: close other programs, or ask for less at once (fewer --threads or workers, a smaller "
                "--input-size or batch, smaller images), then run the same command again")
    return None

