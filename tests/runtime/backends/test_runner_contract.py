"""The runner contract (``vitdeploy.runtime.backends.base``), held by every runtime in the registry.

Each registered runtime's runner subclasses ``Runner`` and opens from the registry with ``RunnerOptions``; every
one that can open a file here (ONNX Runtime, OpenVINO; TensorRT needs a GPU) says what its inputs and outputs
are as the graph declares them, runs, times its last run, says what ran, and closes. The CLI's ``--runtime``
choices are the registry's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from vitdeploy.errors import InputError
from vitdeploy.families import ExportOptions
from vitdeploy.pipeline import export_recipe
from vitdeploy.precisions import Precision
from vitdeploy.runtime.backends.base import Runner, RunnerOptions
from vitdeploy.runtime.backends.registry import ONNX_RUNTIMES, RUNTIMES, runtime_for_file

_ONNX_DTYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.INT64: np.int64}


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("contract") / "encoder.onnx"
    export_recipe("sam_tiny", path, ExportOptions(random_seed=0, input_size=128))
    return path


def _usable(name: str) -> None:
    entry = RUNTIMES[name]
    if not entry.reads_onnx:
        pytest.skip(f"{name} runs engine files on an NVIDIA GPU (tests/engine, tests/runtime/backends/test_engine_runner_interface.py)")
    if not entry.installed():
        pytest.skip(f"{name} is not installed here ({entry.install})")


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_every_registered_runner_implements_the_contract(name: str) -> None:
    """Importable without its runtime (the runtime itself is imported when a file is opened)."""
    cls = RUNTIMES[name].runner_class()
    assert issubclass(cls, Runner) and not getattr(cls, "__abstractmethods__", None)
    assert "from_options" in vars(cls), f"{cls.__name__} does not open files: it inherits Runner.from_options"


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_a_runner_says_what_it_takes_runs_times_and_closes(name: str, encoder: Path) -> None:
    _usable(name)
    graph = onnx.load(encoder, load_external_data=False).graph
    with RUNTIMES[name].open(encoder, RunnerOptions(threads=1)) as runner:
        assert runner.input_names == [i.name for i in graph.input]
        assert runner.output_names == [o.name for o in graph.output]
        inputs = runner.input_metadata()
        for value in graph.input:
            meta = inputs[value.name]
            assert list(meta.shape) == [d.dim_value for d in value.type.tensor_type.shape.dim]
            assert meta.dtype == np.dtype(_ONNX_DTYPES[value.type.tensor_type.elem_type])
        assert list(runner.output_metadata()) == runner.output_names
        assert runner.batch_range() == (1, 1)  # a static batch-1 export
        assert runner.precision is Precision.FP32 and runner.backend == name and runner.version and runner.provider
        assert all(isinstance(note, str) for note in runner.notes(threads=1))
        assert runner.last_inference_time() is None
        feeds = {n: np.random.default_rng(0).standard_normal(list(m.shape)).astype(m.dtype) for n, m in inputs.items()}
        outputs = runner.infer(feeds)
        assert list(outputs) == runner.output_names
        assert runner.last_inference_time() is not None and runner.last_inference_time() > 0
        declared = runner.output_metadata()
        for key, array in outputs.items():
            assert array.dtype == declared[key].dtype and np.isfinite(array).all()
        with pytest.raises(InputError, match="missing inputs"):
            runner.run({})
    with pytest.raises(InputError, match="is closed"):
        runner.run(feeds)


def test_options_are_checked_and_refused_where_a_runtime_cannot_honour_them(encoder: Path) -> None:
    with pytest.raises(InputError, match="threads must be at least 1"):
        RunnerOptions(threads=0)
    with pytest.raises(InputError, match="precision policy 'fp8'"):
        RunnerOptions(policy="fp8")
    with pytest.raises(InputError, match="OpenVINO setting"):
        RUNTIMES["onnxruntime"].open(encoder, RunnerOptions(policy="bf16"))
    with pytest.raises(InputError, match="not a setting of onnxruntime"):
        RUNTIMES["onnxruntime"].open(encoder, RunnerOptions(), seven_bit_weights=True)


def test_the_cli_runtime_choices_are_the_registry() -> None:
    from vitdeploy.cli import cli

    for verb in ("validate", "predict", "segment-all"):
        params = {p.name: p for p in cli.commands[verb].params}
        assert tuple(params["runtime"].type.choices) == ("auto", *ONNX_RUNTIMES), verb
    assert {p.name: p for p in cli.commands["predict"].params}["runtime"].default == "auto"
    assert {p.name: p for p in cli.commands["validate"].params}["runtime"].default == "onnxruntime"
    assert set(ONNX_RUNTIMES) == {name for name, entry in RUNTIMES.items() if entry.reads_onnx}


def test_files_find_their_runtime_by_suffix() -> None:
    assert runtime_for_file(Path("m.onnx")).name == "onnxruntime"
    assert runtime_for_file(Path("m.PLAN")).name == "tensorrt"
    assert runtime_for_file(Path("m.pt")) is None


def test_installed_says_whether_a_runtime_module_is_there(monkeypatch) -> None:
    import importlib.util

    assert RUNTIMES["onnxruntime"].installed()  # a core dependency
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openvino" else real(name, *a))
    assert not RUNTIMES["openvino"].installed()
