"""The ONNX Runtime runner (the embedded default): every provider, the CPU forms of folded attention."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.errors import InputError, MissingDependencyError, first_line
from vitdeploy.fileio import raise_if_weights_missing, require_onnx_file
from vitdeploy.metadata import decode
from vitdeploy.runtime.forms.cpu_form import FUSED_KERNEL, check_requested_form, read_cpu_form
from vitdeploy.runtime.forms.openvino_gelu import read_openvino_form
from vitdeploy.metadata import read_onnx_metadata
from vitdeploy.precisions import Precision
from vitdeploy.runtime.backends.base import Runner, RunnerOptions, TensorMeta
from vitdeploy.runtime.backends.ort_settings import OrtSettings, default_memory_pattern, int8_kernels
from vitdeploy.runtime.backends.providers import PROVIDERS, plan_providers
from vitdeploy.runtime.backends.registry import RUNTIMES, FileNeeds
from vitdeploy.targets import target_of

_ORT_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
                    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
                    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def _require_providers(device: str) -> None:
    """InputError naming what to install when this ONNX Runtime lacks the provider ``device`` runs on first."""
    import onnxruntime as ort

    wanted = PROVIDERS.get(device, ["CPUExecutionProvider"])[0]
    available = ort.get_available_providers()
    if wanted not in available:
        raise InputError(f"--device {device} needs ONNX Runtime's {wanted}, which this install lacks (available: "
                         f"{', '.join(available)}): install onnxruntime-gpu on a machine with an NVIDIA GPU, or use --device cpu")


@functools.cache
def _load_gpu_libraries() -> None:
    """Once per process, before the first GPU session: onnxruntime-gpu (>= 1.21) finds CUDA and cuDNN installed as
    nvidia-* pip packages only when asked (its documented ``preload_dlls``); where they are on the loader path or
    torch loaded them already, this changes nothing."""
    import onnxruntime as ort

    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        preload()


def _require_session_on(session: Any, plan_first: str, name: str) -> None:
    """InputError when ONNX Runtime quietly fell back from the GPU provider asked for to the CPU (it only logs that)."""
    ran = session.get_providers()
    if plan_first not in ran:
        raise InputError(f"ONNX Runtime could not start its {plan_first} for {name} and fell back to {', '.join(ran)} "
                         "(its log above names the library it missed, usually CUDA or cuDNN): install the CUDA and cuDNN "
                         "versions this onnxruntime-gpu was built for (pip install 'onnxruntime-gpu[cuda,cudnn]'), "
                         "or use --device cpu")


def _register_kernel(options: Any, library: Path) -> None:
    """Register vitdeploy's custom-op library with the session ``options`` (InputError naming the fix when ONNX Runtime refuses it)."""
    try:
        options.register_custom_ops_library(str(library))
    except Exception as exc:  # ORT raises its own Fail type; any failure means this build does not fit this ONNX Runtime
        raise InputError(f"ONNX Runtime refused the fused attention kernel {library} ({first_line(exc)}): rebuild it "
                         "with 'bash cpp/build.sh' against this onnxruntime, or run with --no-fused-attention") from exc


class OnnxRuntimeRunner(Runner):
    """Runs an ONNX file with ONNX Runtime; reads the file's vitdeploy metadata.

    The keyword-only arguments expose ONNX Runtime's session settings (see
    :class:`vitdeploy.runtime.backends.ort_settings.OrtSettings`); left out, ONNX Runtime's defaults apply, but for
    ``memory_pattern``: off on the CPU (:func:`vitdeploy.runtime.backends.ort_settings.default_memory_pattern`).
    With ``io_binding=True`` inputs are bound in place and outputs are written into arrays allocated
    once per runner: the arrays ``run`` returns are then reused by the next ``run`` (copy them to keep them).
    On the CPU, the folded rel-pos attention of an ``onnxruntime-cpu`` or ``tensorrt`` export runs on
    vitdeploy's fused kernel (:mod:`vitdeploy.runtime.forms.relpos_kernel`, a custom-op library built by
    ``bash cpp/build.sh``) where that library is built and the kernel takes a vector path on this CPU
    (``fused_attention=None``, the default; ``True`` insists, ``False`` never uses it); which nodes were
    swapped is in ``fusion``. Otherwise the global blocks take their rel-pos term as an attention bias
    (:mod:`vitdeploy.runtime.forms.folded_attention`: faster than as exported, more memory while it runs);
    ``folded_attention=True`` runs the file's attention as exported. Which nodes were unfolded is
    in ``unfold``; a ``tensorrt`` export's MatMul-Softmax-MatMul chains run as ONNX Runtime's
    ``MultiHeadAttention`` first (``sdpa``; :mod:`vitdeploy.runtime.forms.cpu_attention`, which says why this default).
    ``device`` ``cuda``/``tensorrt`` runs on ONNX Runtime's GPU providers where the graph was verified
    (:mod:`vitdeploy.runtime.backends.providers`; ``allow_unverified`` overrides), in FP32 unless ``tf32``;
    ``provider`` says what ran. ``profile_prefix`` turns ONNX Runtime's profiler on (see :meth:`end_profiling`).
    :meth:`from_options` opens one from the :class:`~vitdeploy.runtime.backends.base.RunnerOptions` every runner takes.
    """

    backend = "onnxruntime"

    @classmethod
    def from_options(cls, path: str | Path, options: RunnerOptions, **settings: Any) -> OnnxRuntimeRunner:
        """A runner with the common ``options`` (threads, device, TF32, spinning; ONNX Runtime runs a file in its own
        precision: a reduced precision policy is refused) and ONNX Runtime's own ``settings`` (keyword arguments of
        ``__init__``: ``fused_attention``, ``folded_attention``, ``allow_unverified``, ...)."""
        if options.policy != "file":
            raise InputError(f"ONNX Runtime runs a file in its own precision; precision policy '{options.policy}' is "
                             "an OpenVINO setting (--runtime openvino), or calibrate the file with 'vitdeploy calibrate'")
        return cls(path, threads=options.threads, device=options.device, tf32=options.tf32, spinning=options.spinning,
                   **settings)

    def __init__(
        self,
        path: str | Path,
        threads: int | None = None,
        device: str = "cpu",
        optimization: str = "all",
        optimized_model_path: str | Path | None = None,
        *,
        memory_arena: bool = True,
        memory_pattern: bool | None = None,
        spinning: bool | None = None,
        io_binding: bool = False,
        session_config: dict[str, str] | None = None,
        disabled_optimizers: tuple[str, ...] | None = None,
        fused_attention: bool | None = None,
        folded_attention: bool = False,
        tf32: bool = False,
        allow_unverified: bool = False,
        profile_prefix: str | Path | None = None,
    ):
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - onnxruntime is a core dependency
            raise MissingDependencyError("onnxruntime", "running ONNX models") from exc
        path = require_onnx_file(path)
        self.settings = OrtSettings(
            threads=threads, optimization=optimization,
            optimized_model_path=str(optimized_model_path) if optimized_model_path is not None else None,
            memory_arena=memory_arena, spinning=spinning, io_binding=io_binding,
            memory_pattern=default_memory_pattern(device) if memory_pattern is None else memory_pattern,
            disabled_optimizers=tuple(disabled_optimizers) if disabled_optimizers is not None else None,
            config=dict(session_config or {}),
            profile_prefix=str(profile_prefix) if profile_prefix is not None else None,
        )
        file_metadata = read_onnx_metadata(path)
        _require_providers(device)  # no GPU here says so before anything is said about the file
        if device != "cpu":
            _load_gpu_libraries()
        refusal = RUNTIMES[self.backend].cpu_refusal(FileNeeds.of(file_metadata, f"'{path.name}'"), path.name) \
            if device == "cpu" else None
        if refusal:
            raise InputError(f"{refusal}, on --device cuda, or as a TensorRT engine ('vitdeploy build-engine'); the "
                             "FP32 file runs here as it is")
        plan = plan_providers(file_metadata, device, tf32=tf32, allow_unverified=allow_unverified, name=f"'{path.name}'")
        quantized = Precision.of(file_metadata).quantized
        options = self.settings.session_options(quantized)
        self.disabled_optimizers = self.settings.optimizers_to_disable(quantized)
        #: Which integer kernels run this file's Q/DQ GEMMs on this CPU (None: not an INT8 graph).
        self.int8_kernels = int8_kernels(overrides=self.settings.config).description if quantized else None
        #: Things a user should know about how this file runs here (printed by the CLI verbs).
        self.warnings: list[str] = []
        source = self._attention_form(path, file_metadata, device, options, fused_attention, folded_attention)
        #: The providers, their math (TF32 or not) and the verification behind them, in one line.
        self.provider = plan.describe()
        self.session = _open_session(ort, path, source, options, plan.providers, self.disabled_optimizers)
        if device != "cpu":
            _require_session_on(self.session, plan.providers_names()[0], f"'{path.name}'")
        self.version = str(ort.__version__)
        self.path = path
        self.threads = threads
        self.device = device
        self.name = f"onnxruntime-{device}"
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        try:
            self.metadata = decode(self.session.get_modelmeta().custom_metadata_map)
        except UnicodeDecodeError as exc:  # ONNX Runtime decodes the strings as UTF-8: a damaged byte stops it
            raise InputError(f"'{path.name}' has metadata that is not UTF-8 text (byte {exc.start} of a value is "
                             f"0x{exc.object[exc.start]:02x}): the file is damaged; export it again") from None
        self._binding = self.session.io_binding() if io_binding else None
        #: Static outputs' arrays, allocated once, that I/O binding writes into.
        self._out_buffers: dict[str, np.ndarray] = {}
        if self._binding is not None:
            for out in self.output_metadata().values():
                if out.dtype is not None and all(isinstance(d, int) and d > 0 for d in out.shape):
                    self._out_buffers[out.name] = np.empty(out.shape, dtype=out.dtype)

    def _attention_form(self, path: Path, file_metadata: dict[str, Any], device: str, options: Any,
                        fused_attention: bool | None, folded_attention: bool) -> str | bytes:
        """The graph the session loads (the path, or a rewritten graph's bytes) with its attention in the form asked
        for or chosen for this CPU (:mod:`vitdeploy.runtime.forms`); sets ``fusion``/``unfold``/``sdpa``/``cpu_form``
        and registers the fused kernel's library with the session ``options`` where nodes run on it."""
        source: str | bytes = str(path)
        self.fusion = None
        self.unfold = None
        #: A ``tensorrt`` export's attention chains run as MultiHeadAttention on the CPU (:mod:`vitdeploy.runtime.forms.folded_sdpa`).
        self.sdpa = None
        if fused_attention and folded_attention:
            raise InputError("fused attention replaces the folded attention: ask for one of the two")
        #: The form a file written by ``vitdeploy optimize`` holds (:mod:`vitdeploy.runtime.forms.cpu_form`); None otherwise.
        self.cpu_form = read_cpu_form(file_metadata, f"'{path.name}'")
        if self.cpu_form is not None:
            check_requested_form(self.cpu_form, path.name, fused_attention=fused_attention,
                                 folded_attention=folded_attention)
            if self.cpu_form.attention == FUSED_KERNEL:
                from vitdeploy.runtime.forms.relpos_kernel import FusionReport, capped_path, require_library

                library = require_library()
                _register_kernel(options, library)
                nodes = list(self.cpu_form.nodes)
                self.fusion = FusionReport(changed=nodes,
                                           paths=dict.fromkeys(nodes, capped_path(self.cpu_form.kernel_path, library)))
            else:
                from vitdeploy.runtime.forms.folded_attention import UnfoldReport

                self.unfold = UnfoldReport(changed=list(self.cpu_form.nodes))
        elif device == "cpu":
            from vitdeploy.runtime.forms.cpu_attention import cpu_attention

            form = cpu_attention(path, target_of(file_metadata), fused_attention=fused_attention,
                                 folded_attention=folded_attention)
            if form.library is not None:
                _register_kernel(options, form.library)
            self.sdpa, self.fusion, self.unfold = form.sdpa, form.fusion, form.unfold
            self.warnings += form.warnings
            if form.source is not None:
                source = form.source
        elif fused_attention:
            raise InputError(f"fused attention is a CPU kernel: use --device cpu (got '{device}')")
        if not isinstance(source, str):
            # A rewritten graph is loaded from memory: external weights are read from the model's folder.
            options.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                             str(path.parent.resolve()))
        return source

    def input_metadata(self) -> dict[str, TensorMeta]:
        return {i.name: TensorMeta(i.name, tuple(i.shape), _numpy_type(i.type)) for i in self.session.get_inputs()}

    def output_metadata(self) -> dict[str, TensorMeta]:
        return {o.name: TensorMeta(o.name, tuple(o.shape), _numpy_type(o.type)) for o in self.session.get_outputs()}

    def notes(self, threads: int | None = None) -> list[str]:
        """Where it runs unless that is the CPU provider, the fused-kernel swap or the unfolded attention, the
        warnings, and why a reduced-precision file may be slow on the CPU."""
        from vitdeploy.runtime.backends.ort_fusions import cpu_precision_note

        notes = [f"runs on {self.provider}"] if self.provider and self.device != "cpu" else []
        fusion, unfold = self.fusion, self.unfold
        if self.cpu_form is not None:  # the file holds the form: nothing was changed at load time
            taken = fusion.taken if fusion is not None else []
            notes.append(f"rel-pos attention as written in the file: {self.cpu_form.summary()}"
                         + (f"; this CPU runs the kernel's {', '.join(taken)} path" if taken else ""))
            fusion = unfold = None
        if self.sdpa is not None and self.sdpa.changed:
            notes.append(f"attention: {self.sdpa.summary()}")
        if fusion is not None:
            notes.append(f"fused rel-pos attention: {fusion.summary()}")
        if unfold is not None and unfold.changed:
            notes.append(f"rel-pos attention: {unfold.summary()} (--folded-attention runs the file's form as written)")
        notes += [f"warning: {warning}" for warning in self.warnings]
        held = read_openvino_form(self.metadata, f"'{self.path.name}'")
        if held is not None:
            notes.append(f"the file holds OpenVINO's GELU form ('vitdeploy optimize --runtime openvino'): ONNX Runtime "
                         f"does not fuse its {held['gelus_apart']} GELU(s); on ONNX Runtime run "
                         f"'{held['source'] or 'the exported file'}'")
        note = cpu_precision_note(self.path, self.precision, threads) if self.device == "cpu" else None
        return notes + ([note] if note else [])

    def end_profiling(self) -> Path:
        """Stop ONNX Runtime's profiler (``profile_prefix`` given) and return its trace: read it with
        :func:`vitdeploy.benchmark.op_profile.read_ort_profile`."""
        if self.settings.profile_prefix is None:
            raise InputError("this runner was opened without profile_prefix: there is no profile to end")
        return Path(self.session.end_profiling())

    def close(self) -> None:
        """Drop the session (ONNX Runtime frees it with the last reference)."""
        super().close()
        self.session = self._binding = None  # type: ignore[assignment]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._binding is not None:
            return self._run_bound(feeds)
        outputs = self.session.run(self.output_names, {n: feeds[n] for n in self.input_names})
        return dict(zip(self.output_names, outputs))

    def _run_bound(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One run through I/O binding: inputs bound in place, static outputs into the runner's own arrays."""
        binding = self._binding
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        kept = []
        for name in self.input_names:
            array = np.ascontiguousarray(feeds[name])
            kept.append(array)  # alive until the run is over
            binding.bind_cpu_input(name, array)
        for name in self.output_names:
            buffer = self._out_buffers.get(name)
            if buffer is None:
                binding.bind_output(name, "cpu")
            else:
                binding.bind_output(name, "cpu", 0, buffer.dtype, list(buffer.shape), buffer.ctypes.data)
        self.session.run_with_iobinding(binding)
        if len(self._out_buffers) == len(self.output_names):
            return {n: self._out_buffers[n] for n in self.output_names}
        copied = dict(zip(self.output_names, binding.copy_outputs_to_cpu()))  # every bound output, in bind order
        return {n: self._out_buffers.get(n, copied[n]) for n in self.output_names}


def _open_session(ort: Any, path: Path, source: str | bytes, options: Any, providers: list[Any],
                  disabled_optimizers: list[str]) -> Any:
    """``onnxruntime.InferenceSession`` of ``source``; InputError naming the fix when ONNX Runtime cannot load it."""
    try:
        return ort.InferenceSession(source, options, providers=providers, disabled_optimizers=disabled_optimizers or None)
    except Exception as exc:  # ORT raises its own Fail/InvalidGraph types; all mean "unusable file".
        first = first_line(exc)
        raise_if_weights_missing(path, exc)
        raise InputError(f"ONNX Runtime cannot load '{path}' ({first}): re-export it with 'vitdeploy export'") from exc


def _numpy_type(ort_type: str) -> np.dtype | None:
    """NumPy dtype of an ONNX Runtime type string such as ``tensor(float)`` (None for one NumPy lacks)."""
    dtype = _ORT_NUMPY_TYPES.get(ort_type)
    return None if dtype is None else np.dtype(dtype)
