"""Options shared by several commands, defined once (Polygraphy's argument groups are the model)."""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from vitdeploy.cpu_features import available_cores
from vitdeploy.errors import VitdeployError
from vitdeploy.precisions import PRECISION_POLICIES
from vitdeploy.runtime.backends.registry import DEFAULT_RUNTIME, ONNX_RUNTIMES
from vitdeploy.runtime.deploy.deployment import AUTO, AUTO_ORDER


class UserError(click.ClickException):
    """A VitdeployError shown as one line with exit code 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def verbose_option(fn: Callable) -> Callable:
    return click.option("--verbose", "-v", is_flag=True, help="Show tracebacks and detailed logs.")(fn)


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived. A BaseException, like KeyboardInterrupt, so no ``except Exception`` swallows it
    and every ``with``/``finally`` on the way out runs: staging folders and temporary files are removed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals_as_interrupts() -> Any:
    """SIGTERM (kill, timeout, docker stop, CI cancellation) and SIGINT (Ctrl-C) raise :class:`Interrupted`
    while a verb runs; the previous handlers come back afterwards. Only the main thread can set handlers:
    elsewhere (a verb called from a worker thread) nothing changes."""
    previous = {}
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, _interrupt)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def handle_errors(fn: Callable) -> Callable:
    """Turn VitdeployError (and unexpected errors) into a one-line message and exit code 1.

    ``--verbose`` (on the command or the group) prints the traceback first. SIGTERM and SIGINT end the
    verb alike: files not yet committed are removed on the way out, one line says so, and the exit code
    is 128 + the signal's number (143, 130), as a shell reports a process ended by that signal.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from vitdeploy.fileio import output_locks

        ctx = click.get_current_context()
        verbose = bool(kwargs.get("verbose")) or bool((ctx.obj or {}).get("verbose"))
        try:
            with _signals_as_interrupts(), output_locks():
                return fn(*args, **kwargs)
        except Interrupted as stop:
            name = signal.Signals(stop.signum).name
            if verbose:
                traceback.print_exc(file=sys.stderr)
            click.echo(f"error: stopped by {name}: outputs not yet complete were removed (those already reported "
                       "as written are whole)", err=True)
            raise SystemExit(128 + stop.signum) from None
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except VitdeployError as exc:
            if verbose:
                traceback.print_exc(file=sys.stderr)
            raise UserError(str(exc)) from exc
        except ImportError as exc:
            from vitdeploy.optional_packages import TORCH_EXTRA_HINT, torch_side_module

            missing = torch_side_module(exc)
            if missing is None:
                raise _unexpected(exc, verbose) from exc
            if verbose:
                traceback.print_exc(file=sys.stderr)
            raise UserError(f"'vitdeploy {ctx.info_name}' needs the '{missing}' package, which is not "
                            f"installed (vitdeploy without its PyTorch side): {TORCH_EXTRA_HINT}") from exc
        except KeyboardInterrupt:
            raise click.exceptions.Abort() from None
        except BrokenPipeError:  # the reader went away (``| head``): stop quietly, as other Unix tools do
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
            raise SystemExit(1) from None
        except Exception as exc:
            from vitdeploy.errors import resource_problem

            problem = resource_problem(exc)  # disk full, out of memory, too many open files: said as such
            if problem is None:
                raise _unexpected(exc, verbose) from exc
            if verbose:
                traceback.print_exc(file=sys.stderr)
            raise UserError(problem) from exc

    return wrapper


def _unexpected(exc: Exception, verbose: bool) -> UserError:
    if verbose:
        traceback.print_exc(file=sys.stderr)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return UserError(f"unexpected {type(exc).__name__}: {first} (a vitdeploy bug: rerun with --verbose and report the traceback)")


def parse_click(text: str, where: str = "") -> tuple[float, float, int]:
    """A click ``X,Y`` or ``X,Y,LABEL`` (pixels; LABEL 1 foreground, the default, or 0 background), or BadParameter
    quoting ``where`` (the whole option value) or ``text``."""
    shown = where or text
    parts = text.split(",")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        x, y = float(parts[0]), float(parts[1])
        label = int(parts[2]) if len(parts) == 3 else 1
    except ValueError:
        raise click.BadParameter(f"'{shown}' is not X,Y or X,Y,LABEL (pixels; LABEL 1 foreground, 0 background)") from None
    if label not in (0, 1):
        raise click.BadParameter(f"'{shown}': LABEL must be 1 (foreground) or 0 (background)")
    return x, y, label


def parse_box(text: str, where: str = "") -> tuple[float, float, float, float]:
    """A box ``X0,Y0,X1,Y1`` (pixels), or BadParameter quoting ``where`` (the whole option value) or ``text``."""
    try:
        box = tuple(float(v) for v in text.split(","))
    except ValueError:
        box = ()
    if len(box) != 4:
        raise click.BadParameter(f"'{where or text}' is not X0,Y0,X1,Y1 (pixels)")
    return box  # type: ignore[return-value]


def graph_records(graphs: Callable[[], Sequence[str]]) -> Callable:
    """The callback of a repeatable ``--record-inputs GRAPH:FILE`` option -> ``{graph: file}``; ``graphs()`` names the
    graphs the verb runs (imported when the option is used)."""
    def parse(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
        known = tuple(graphs())
        records = {}
        for text in values:
            graph, _, path = text.partition(":")
            if graph not in known or not path:
                raise click.BadParameter(f"'{text}' is not GRAPH:FILE with GRAPH one of {', '.join(known)}")
            records[graph] = path
        return records

    return parse


def model_source_options(fn: Callable) -> Callable:
    """--recipe, --checkpoint, --random-weights, --seed: where the eager model comes from."""
    options = [
        click.option("--recipe", "-r", "recipes", multiple=True, default=("sam_vit_b",), show_default=True,
                     help="Recipe name under export/ (sam_vit_b|l|h, sam_vit_b|l|h_decoder, timm_vit_base_patch16_224, ...) "
                          "or a path to a .toml file. Repeat it, with one -o each in the same order, to export several "
                          "parts in one run (one checkpoint read once)."),
        click.option("--checkpoint", "-c", type=click.Path(dir_okay=False, path_type=str), default=None,
                     help="Weights: full SAM checkpoint, encoder-only state dict (.pth) or .safetensors."),
        click.option("--random-weights", is_flag=True,
                     help="Use seeded random weights instead of a checkpoint (demos and tests only)."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed for --random-weights."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def sam_pair_options(fn: Callable) -> Callable:
    """--encoder/-e and --decoder/-d: the exported SAM image encoder and prompt encoder + mask decoder."""
    fn = click.option("--decoder", "-d", required=True, type=click.Path(dir_okay=False, path_type=str),
                      help="Exported SAM (or SAM 2) prompt encoder + mask decoder (.onnx, or a TensorRT engine).")(fn)
    return click.option("--encoder", "-e", required=True, type=click.Path(dir_okay=False, path_type=str),
                        help="Exported SAM (or SAM 2) image encoder (.onnx, or a TensorRT engine).")(fn)


def _threads(fn: Callable, what: str) -> Callable:
    return click.option("--threads", type=click.IntRange(min=1), default=None,
                        callback=lambda _ctx, _param, value: value or available_cores(),
                        help=f"Threads for {what}. [default: all cores this process may use]")(fn)


def threads_option(fn: Callable) -> Callable:
    """--threads for verbs that run ONNX Runtime and eager PyTorch; default: every core this process may use."""
    return _threads(fn, "ONNX Runtime (or OpenVINO) and eager PyTorch (the same count: a fair comparison)")


def runtime_threads_option(fn: Callable) -> Callable:
    """--threads for verbs that run only the exported model (no PyTorch): None when not given, so a deployment
    profile's threads apply (``--runtime auto``), else every core this process may use."""
    return click.option("--threads", type=click.IntRange(min=1), default=None,
                        help="Threads for ONNX Runtime or OpenVINO (TensorRT runs on the GPU and ignores it). [default: "
                             "the deployment profile's with --runtime auto, else all cores this process may use]")(fn)


def fused_attention_option(fn: Callable) -> Callable:
    """--fused-attention and --folded-attention: how ONNX Runtime runs the folded attention of an onnxruntime-cpu or
    tensorrt export."""
    fn = click.option("--folded-attention", is_flag=True,
                      help="ONNX models on the CPU: run --target onnxruntime-cpu/tensorrt attention as exported (for "
                           "onnxruntime-cpu the least memory; by default the global blocks take the rel-pos term as an "
                           "attention bias, faster, and tensorrt's attention runs as ONNX Runtime's MultiHeadAttention).")(fn)
    return click.option("--fused-attention/--no-fused-attention", default=None,
                        help="ONNX models on the CPU: run --target onnxruntime-cpu/tensorrt attention on vitdeploy's fused "
                             "rel-pos kernel (custom-op library built by 'bash cpp/build.sh'). [default: the kernel where "
                             "it is built and takes a vector path on this CPU (AVX2 or AVX-512), else the attention bias]")(fn)


def force_option(fn: Callable) -> Callable:
    return click.option("--force", "-f", is_flag=True,
                        help="Replace output files that already exist (default: refuse before doing any work).")(fn)


def report_option(fn: Callable) -> Callable:
    return click.option("--report", type=click.Path(dir_okay=False, path_type=str), default=None,
                        help="Write a machine-readable JSON report here.")(fn)


def ort_device_options(choices: tuple[str, ...], help_text: str = "ONNX Runtime execution provider for .onnx files.",
                       allow_unverified: bool = True) -> Callable:
    """--device, --tf32 and (``allow_unverified``) --allow-unverified: where ONNX files run and with what math
    (see vitdeploy.runtime.backends.providers)."""

    def decorate(fn: Callable) -> Callable:
        if allow_unverified:
            fn = click.option("--allow-unverified", is_flag=True,
                              help="Run a graph on a GPU provider where vitdeploy has not verified it (then check it "
                                   "with 'vitdeploy validate').")(fn)
        fn = click.option("--tf32", is_flag=True,
                          help="CUDA: let FP32 GEMMs and convolutions use TF32 (faster, ~1e-3 relative error). "
                               "Default: exact FP32.")(fn)
        return click.option("--device", type=click.Choice(list(choices)), default="cpu", show_default=True,
                            help=help_text)(fn)

    return decorate


#: ``--runtime`` choices: ``auto``, then the runtimes that open ONNX files, from the registry (it imports no runtime).
AUTO_RUNTIME_CHOICES = (AUTO, *ONNX_RUNTIMES)
_OPENVINO_HELP = "openvino: OpenVINO on the CPU, FP32 unless --inference-precision bf16 (pip install 'vitdeploy[openvino]')."
_AUTO_HELP = f"auto: {AUTO_ORDER}."


_INFERENCE_PRECISION = click.option(
    "--inference-precision", type=click.Choice(PRECISION_POLICIES), default=None,
    help="file: the file's own math (an FP32 file in FP32). bf16: BF16 inference of the FP32 layers where the runtime "
         "can (--runtime openvino on CPUs with AMX or AVX512-BF16), judged by the 'bf16' parity budget; SAM's mask "
         "decoder stays in its file's precision. fp16: FP16 inference (--runtime openvino on Arm CPUs with FP16 arithmetic "
         "or x86 CPUs with AVX512-FP16), judged by the 'fp16' budget: proven for SAM image encoders, timm ViTs and SAM 2's memory graphs, where auto's probe times it. "
         "[default: file; with --runtime auto, its choice]")


def runtime_option(fn: Callable, default: str = DEFAULT_RUNTIME) -> Callable:
    """--runtime: which runtime runs ONNX files (``auto`` among the choices); --inference-precision: the precision
    policy (``RunnerOptions``; None when not given)."""
    fn = _INFERENCE_PRECISION(fn)
    return click.option("--runtime", type=click.Choice(AUTO_RUNTIME_CHOICES), default=default, show_default=True,
                        help=f"Runtime for .onnx files. {_AUTO_HELP} {_OPENVINO_HELP}")(fn)


def auto_runtime_option(fn: Callable) -> Callable:
    """--runtime defaulting to ``auto``: for the verbs that deploy (predict, segment-all), the fastest proven path."""
    return runtime_option(fn, default=AUTO)


def runtimes_option(fn: Callable) -> Callable:
    """--runtime, repeatable (``benchmark``: each ONNX file on each runtime), as the ``runtimes`` tuple; --inference-precision."""
    fn = _INFERENCE_PRECISION(fn)
    return click.option("--runtime", "runtimes", multiple=True, type=click.Choice(AUTO_RUNTIME_CHOICES),
                        help=f"Runtime(s) for .onnx files (repeatable: each file is timed on each; default onnxruntime). "
                             f"{_AUTO_HELP} {_OPENVINO_HELP}")(fn)


def threads_for(runtime: str, threads: int | None) -> int | None:
    """The threads a runtime-only verb opens its files with (:func:`vitdeploy.runtime.deploy.plan.verb_threads`)."""
    from vitdeploy.runtime.deploy.plan import verb_threads

    return verb_threads(runtime, threads)


def echo_deployments(*runners: Any) -> None:
    """One line per runner that ``--runtime auto`` opened: what it chose and why (stderr, beside the notes)."""
    for runner in runners:
        chosen = getattr(runner, "deployment", None)
        if chosen is not None:
            name = Path(runner.path).name if runner.path else runner.name
            click.echo(f"note: {name} runs as {chosen.describe()}", err=True)
