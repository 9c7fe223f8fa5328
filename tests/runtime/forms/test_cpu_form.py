"""``vitdeploy optimize``: the runner's CPU form of an ``onnxruntime-cpu`` export written as a file, run as written,
with the official numbers; refused for anything else, and never half-written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner

from cpp_build import cpp_build, toolchain_missing  # noqa: F401 (session fixture)
from tests.conftest import (TINY_ARCHS, WRITTEN_VS_IN_MEMORY_MAX_ABS_REL, assert_matches_official, export_tiny_targets,
                            max_abs_rel, tamper_onehot_tables, tiny_encoder)
from vitdeploy.cli import cli
from vitdeploy.cpu_optimize import write_cpu_form
from vitdeploy.errors import InputError
from vitdeploy.metadata import decode
from vitdeploy.runtime.forms.cpu_form import CPU_FORM_KEY
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
from vitdeploy.parity import compare

ARCH = "padded_windows"  # two 3x3-window blocks (left folded) and one 8x8 global block (unfolded / fused)
SEED = 13


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return export_tiny_targets(tmp_path_factory.mktemp("cpu_form"), ARCH, seed=SEED)


def _inputs() -> list[np.ndarray]:
    size = TINY_ARCHS[ARCH].img_size
    return [torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(s)).numpy() for s in (0, 1)]


def _check_against_official_and_runner(path: Path, reference: OnnxRuntimeRunner) -> OnnxRuntimeRunner:
    """Run ``path`` as written: within the fp32 tolerance of the official model and the reference runner's numbers."""
    runner = OnnxRuntimeRunner(path, threads=2)
    official = tiny_encoder(ARCH, seed=SEED)
    for x in _inputs():
        out = assert_matches_official(official, runner, torch.from_numpy(x), path.name)
        same = reference.run({"image": x})["image_embeddings"]
        assert max_abs_rel(out, same) <= WRITTEN_VS_IN_MEMORY_MAX_ABS_REL
    return runner


def test_unfolded_form_is_what_the_runner_runs(exports: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "encoder.cpu.onnx"
    done = CliRunner().invoke(cli, ["optimize", str(exports["onnxruntime-cpu"]), "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert "1 attention node(s) with the rel-pos term as an attention bias" in done.output
    in_memory = OnnxRuntimeRunner(exports["onnxruntime-cpu"], threads=2, fused_attention=False)  # the default without the kernel
    runner = _check_against_official_and_runner(out, in_memory)
    assert runner.cpu_form.attention == "unfolded"
    assert runner.unfold.changed == in_memory.unfold.changed  # the same node, named the same
    model = onnx.load(str(out))
    bias_nodes = [n for n in model.graph.node if n.op_type == "MultiHeadAttention" and len(n.input) == 6 and n.input[5]]
    assert [n.name for n in bias_nodes] == in_memory.unfold.changed
    form = decode({p.key: p.value for p in model.metadata_props})[CPU_FORM_KEY]
    assert form == {"attention": "unfolded", "nodes": in_memory.unfold.changed, "source": "onnxruntime-cpu.onnx"}
    onnx.checker.check_model(model)
    inspected = CliRunner().invoke(cli, ["inspect", str(out)])
    assert "CPU form ('vitdeploy optimize' of onnxruntime-cpu.onnx): unfolded attention in 1 node(s)" in inspected.output


def test_a_form_holds_one_attention_form_only(exports: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "encoder.cpu.onnx"
    write_cpu_form(exports["onnxruntime-cpu"], out)
    with pytest.raises(InputError, match="for the folded form run 'onnxruntime-cpu.onnx'"):
        OnnxRuntimeRunner(out, folded_attention=True)
    with pytest.raises(InputError, match="for the fused kernel run 'onnxruntime-cpu.onnx' with --fused-attention"):
        OnnxRuntimeRunner(out, fused_attention=True)


def test_weights_kept_beside_the_source_are_written_with_the_form(exports: dict[str, Path], tmp_path: Path) -> None:
    """An export whose weights live in an external-data file (as ViT-H's do): the form carries them, in any folder."""
    source_dir, out_dir = tmp_path / "export", tmp_path / "elsewhere"
    source_dir.mkdir()
    out_dir.mkdir()
    model = onnx.load(str(exports["onnxruntime-cpu"]))
    onnx.save_model(model, str(source_dir / "encoder.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="encoder.onnx.data", size_threshold=1024)  # as the exporter writes ViT-H
    # The one-hot tables the check reads are external too: read from the model's folder, not the working directory.
    in_memory = OnnxRuntimeRunner(source_dir / "encoder.onnx", threads=2, fused_attention=False)
    assert in_memory.unfold.changed
    result = write_cpu_form(source_dir / "encoder.onnx", out_dir / "encoder.cpu.onnx")
    assert result.files == [out_dir / "encoder.cpu.onnx"]
    _check_against_official_and_runner(out_dir / "encoder.cpu.onnx", in_memory)


@pytest.mark.parametrize("case, message", [
    ("generic_target", "is not a --target onnxruntime-cpu or tensorrt export (target: generic)"),
    ("already_a_form", "is already a CPU form written by 'vitdeploy optimize'"),
    ("output_is_source", "-o names the exported file"),
    ("output_exists", "already exists: pass --force"),
    ("nothing_to_change", "is worth unfolding (the key table is not the one-hot rel-pos layout)"),
    ("missing_file", "not found"),
])
def test_bad_input_is_one_line_exit_1_and_writes_nothing(exports: dict[str, Path], tmp_path: Path, case: str,
                                                         message: str) -> None:
    source, out = exports["onnxruntime-cpu"], tmp_path / "out.onnx"
    if case == "generic_target":
        source = exports["generic"]
    elif case == "already_a_form":
        source = write_cpu_form(exports["onnxruntime-cpu"], tmp_path / "form.onnx").files[0]
    elif case == "output_is_source":
        out = source
    elif case == "output_exists":
        out.write_bytes(b"keep me")
    elif case == "nothing_to_change":
        model = onnx.load(str(source))
        assert tamper_onehot_tables(model)
        source = tmp_path / "tampered.onnx"
        onnx.save_model(model, str(source))
    elif case == "missing_file":
        source = tmp_path / "nope.onnx"
    before = sorted(p.name for p in tmp_path.iterdir())
    done = CliRunner().invoke(cli, ["optimize", str(source), "-o", str(out)])
    assert done.exit_code == 1, done.output
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, nothing staged left behind
    if case == "output_exists":
        assert out.read_bytes() == b"keep me"


def test_writing_the_form_imports_no_torch(exports: dict[str, Path], tmp_path: Path) -> None:
    """The runtime-only install (no PyTorch) can write and run the form."""
    code = (f"import sys; from vitdeploy.cpu_optimize import write_cpu_form; "
            f"write_cpu_form({str(exports['onnxruntime-cpu'])!r}, {str(tmp_path / 'f.onnx')!r}); "
            f"from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner; OnnxRuntimeRunner({str(tmp_path / 'f.onnx')!r}); "
            "print(json.dumps('torch' in sys.modules))").replace("import sys;", "import sys, json;")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is False


def test_openvino_refuses_the_fused_form_and_runs_the_unfolded_one(exports: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    from vitdeploy.runtime.backends.openvino_runner import OpenVinoRunner

    unfolded = write_cpu_form(exports["onnxruntime-cpu"], tmp_path / "cpu.onnx").files[0]
    x = _inputs()[0]
    out = OpenVinoRunner(unfolded, threads=2).run({"image": x})["image_embeddings"]
    with torch.no_grad():
        ref = tiny_encoder(ARCH, seed=SEED)(torch.from_numpy(x))
    result = compare(ref, out, "fp32", label="openvino unfolded form")
    assert result, result.summary()
    fused = tmp_path / "fused.onnx"
    model = onnx.load(str(unfolded))  # a fused-form file by its metadata: OpenVINO is refused before it reads the graph
    for prop in model.metadata_props:
        if prop.key == "vitdeploy." + CPU_FORM_KEY:
            prop.value = json.dumps({"attention": "fused-kernel", "nodes": [], "source": "onnxruntime-cpu.onnx"})
    onnx.save_model(model, str(fused))
    with pytest.raises(InputError, match="an ONNX Runtime custom op OpenVINO does not have: run it with --runtime onnxruntime"):
        OpenVinoRunner(fused)


needs_toolchain = pytest.mark.skipif(toolchain_missing() is not None, reason=str(toolchain_missing()))


@needs_toolchain
def test_fused_form_is_what_the_runner_runs_with_the_kernel(cpp_build: Path, exports: dict[str, Path],  # noqa: F811
                                                            tmp_path: Path) -> None:
    from vitdeploy.runtime.forms import relpos_kernel

    out = tmp_path / "encoder.fused.onnx"
    done = CliRunner().invoke(cli, ["optimize", str(exports["onnxruntime-cpu"]), "-o", str(out), "--fused-attention"])
    if relpos_kernel.requested_path() == "portable":  # a CPU with neither AVX2 nor AVX-512: nothing takes the kernel
        assert done.exit_code == 1 and "write the unfolded form" in done.output, done.output
        return
    assert done.exit_code == 0, done.output
    in_memory = OnnxRuntimeRunner(exports["onnxruntime-cpu"], threads=2, fused_attention=True)
    runner = _check_against_official_and_runner(out, in_memory)
    assert runner.cpu_form.attention == "fused-kernel"
    assert runner.fusion.changed == in_memory.fusion.changed
    assert runner.cpu_form.kernel_path == in_memory.fusion.paths[in_memory.fusion.changed[0]]
    model = onnx.load(str(out))
    node = next(n for n in model.graph.node if n.op_type == relpos_kernel.OP_TYPE)
    isa = next(a for a in node.attribute if a.name == "isa")
    assert relpos_kernel.PATHS[isa.i] == runner.cpu_form.kernel_path  # the path this CPU took, written as the cap


@needs_toolchain
def test_fused_form_written_on_another_cpu_reports_the_path_this_cpu_takes(cpp_build: Path,  # noqa: F811
                                                                           exports: dict[str, Path], tmp_path: Path) -> None:
    """A fused form written on an AVX-512 machine (isa cap avx512) runs here on the widest path this CPU has: AVX2 on an
    AVX2-only CPU, AVX-512 on an AVX-512 one; the runner says which, and the numbers stay the official ones."""
    from vitdeploy.cpu_features import _read
    from vitdeploy.runtime.forms import relpos_kernel

    if relpos_kernel.requested_path() == "portable":
        pytest.skip("this CPU has neither AVX2 nor AVX-512: no attention takes the fused kernel")
    out = write_cpu_form(exports["onnxruntime-cpu"], tmp_path / "fused.onnx", fused_attention=True).files[0]
    model = onnx.load(str(out))
    for node in model.graph.node:
        if node.op_type == relpos_kernel.OP_TYPE:
            next(a for a in node.attribute if a.name == "isa").i = relpos_kernel.PATHS.index("avx512")
    for prop in model.metadata_props:
        if prop.key == "vitdeploy." + CPU_FORM_KEY:
            prop.value = json.dumps({**json.loads(prop.value), "kernel_path": "avx512"})
    onnx.save_model(model, str(out))
    real = _read("", "/proc/cpuinfo").simd  # the library checks the real CPU, not VITDEPLOY_CPU_MASK
    expected = "avx512" if real == "avx512" else "avx2"
    runner = _check_against_official_and_runner(out, OnnxRuntimeRunner(exports["onnxruntime-cpu"], threads=2,
                                                                       fused_attention=True))
    assert set(runner.fusion.paths.values()) == {expected}
