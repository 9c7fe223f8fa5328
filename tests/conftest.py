"""Shared fixtures: tiny seeded SAM encoders with every parameter non-zero."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder

#: Tiny architectures covering the code paths: windowed + global blocks, a token grid that needs
#: window padding (8 tokens, window 3), one that does not (window 4), all-global attention.
TINY_ARCHS = {
    "padded_windows": SamEncoderArch(img_size=64, patch_size=8, embed_dim=32, depth=3, num_heads=2, out_chans=16,
                                     window_size=3, global_attn_indexes=(1,)),
    "even_windows": SamEncoderArch(img_size=64, patch_size=8, embed_dim=32, depth=2, num_heads=4, out_chans=8,
                                   window_size=4, global_attn_indexes=(0,)),
    "all_global": SamEncoderArch(img_size=32, patch_size=4, embed_dim=16, depth=2, num_heads=2, out_chans=8,
                                 window_size=0, global_attn_indexes=()),
}

TINY_RECIPE = """\
[model]
family = "sam_image_encoder"
variant = "tiny"
checkpoint_prefix = "image_encoder."

[architecture]
img_size = 64
patch_size = 8
embed_dim = 32
depth = 3
num_heads = 2
out_chans = 16
window_size = 3
global_attn_indexes = [1]

[export]
output_name = "image_embeddings"
"""


#: A tiny timm ViT recipe (global-average pooled, no class token): the timm family in CLI and runtime tests.
TINY_TIMM_RECIPE = """\
[model]
family = "timm_vit"
variant = "tiny_vit"

[architecture]
img_size = 32
patch_size = 8
embed_dim = 32
depth = 2
num_heads = 2
num_classes = 10
class_token = false
global_pool = "avg"

[timm]
output = "logits"
"""


#: The test files with the most summed test time, longest first (seconds by ``--durations=0`` in two workers, AMD EPYC
#: Zen 3, 2026-11-26; 1232 of the suite's 1824 s). ``scripts/test.sh`` runs whole files in pytest-xdist workers in
#: collection order (``--dist loadfile --no-loadscope-reorder``), and these are collected first: started last, a long
#: file leaves one worker running it alone at the end while the others have nothing left to take. (xdist's own order,
#: by number of tests per file, put tests/runtime/apps/test_sam2_video_predictor.py 57th of 71 and tests/test_docs.py
#: 14th. Replaying xdist's hand-out, two files held per worker, with these per-file times: 958 s in its order, 922 s
#: longest first, against 912 s for a perfect split.) Every other file follows in its usual order.
LONGEST_FIRST = (
    "tests/test_arm.py",  # 230 s where its arm64 root exists (qemu; 2026-11-27), else skipped at once
    "tests/test_docs.py",  # 377 s
    "tests/runtime/apps/test_sam2_video_predictor.py",  # 132
    "tests/families/test_family_contract.py",  # 84
    "tests/runtime/apps/test_web_site.py",  # 70 (one process, 2026-12-02, with the tiny SAM 2 and SAM 3 exports)
    "tests/runtime/apps/test_dataset_ray.py",  # 76
    "tests/families/test_sam2_image_encoder.py",  # 67
    "tests/precision/test_sam2_video_precision.py",  # 62
    "tests/runtime/apps/test_sam2_predictor.py",  # 62
    "tests/families/test_timm_hiera.py",  # 61
    "tests/cli/test_cli_edges.py",  # 61
    "tests/onnx_export/test_export_sam_encoder.py",  # 56
    "tests/test_wheel.py",  # 54
    "tests/runtime/apps/test_sam2_mask_generator.py",  # 53
    "tests/engine/test_engine_tensorrt_rtx.py",  # 45
    "tests/runtime/apps/test_serve_ray.py",  # 130 (2026-11-27: a SIGTERM run and a killed cache replica added)
    "tests/runtime/apps/test_sam_service.py",  # 30
    "tests/runtime/apps/test_serve_page.py",  # 27
)


#: The memory one test worker may need at its peak: the largest process of a fresh-clone CI run (ad2a3f6, 2026-11-26,
#: ``/usr/bin/time -v``) peaked at 4.4 GB resident.
WORKER_PEAK_BYTES = 5 * 2**30


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # optional: a run without pytest-xdist has no such hook
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: pytest-xdist's count (one worker per physical core), but no more workers than the memory
    available now holds at :data:`WORKER_PEAK_BYTES` each (a machine with many cores and little memory would
    otherwise run out), and at least one. A count asked for (``PYTEST_XDIST_AUTO_NUM_WORKERS``, or
    ``VITDEPLOY_TEST_WORKERS`` in scripts/test.sh) is taken as it is."""
    import os

    from xdist.plugin import pytest_xdist_auto_num_workers as xdist_count

    from vitdeploy.cpu_features import available_memory

    cores = xdist_count(config)
    available = available_memory()
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or available is None:  # asked for, or not Linux: the count
        return cores
    return max(1, min(cores, available // WORKER_PEAK_BYTES))


def pytest_configure(config: pytest.Config) -> None:
    """In a pytest-xdist worker: torch (and OpenMP in every process the worker starts: the CLI runs, the docs' blocks)
    on this worker's share of the cores, ``OMP_NUM_THREADS``. ``-n auto`` starts one worker per core, and each worker's
    torch took both cores of a 2-core machine: four busy OpenMP threads on two cores. Four torch-heavy test files
    (tests/families/test_sam2_image_encoder.py, tests/runtime/apps/test_sam3_tracker_predictor.py,
    tests/onnx_export/test_export_sam_encoder.py, tests/families/test_timm_hiera.py) took 128-140 s in two workers
    with two threads each, 98-108 s with one (AMD EPYC Zen 4, 2026-12-05, alternated runs). Pinning each worker to its
    core instead (``sched_setaffinity``: ONNX Runtime and OpenVINO on one thread too) took 109-115 s. A thread count
    the user set is kept."""
    import os

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if os.environ.get("PYTEST_XDIST_WORKER") and workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        from vitdeploy.cpu_features import available_cores

        os.environ["OMP_NUM_THREADS"] = str(max(1, available_cores() // workers))
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # this process: torch was imported before


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """:data:`LONGEST_FIRST` first; every other file, and the tests within each file, in their order."""
    root = Path(str(config.rootpath))
    gone = [path for path in LONGEST_FIRST if not (root / path).is_file()]
    if gone:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FIRST names {gone[0]}, which is not there: update the list")
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture(autouse=True, scope="session")
def _cache_folder_of_this_run(tmp_path_factory: pytest.TempPathFactory):
    """OpenVINO's compiled models (VITDEPLOY_CACHE_DIR) go to this run's temporary folder, not the user's cache:
    no test depends on what an earlier run left, and the machine keeps nothing."""
    import os

    os.environ["VITDEPLOY_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "vitdeploy-cache")
    # --runtime auto's first-use probe times runtimes, so on a tiny model its choice can differ between runs: tests of
    # everything else decide by the documented rows, as on a machine with the probe off; tests/runtime/deploy/
    # test_probe.py turns it on and tests it
    os.environ["VITDEPLOY_PROBE"] = "0"
    yield


@pytest.fixture(autouse=True)
def _torch_threads():
    import os

    torch.set_num_threads(min(2, int(os.environ.get("OMP_NUM_THREADS", "2"))))  # a worker's share: pytest_configure


def tiny_encoder(name: str = "padded_windows", seed: int = 0) -> torch.nn.Module:
    return load_sam_image_encoder(TINY_ARCHS[name], random_seed=seed)


@pytest.fixture
def tiny_recipe(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_RECIPE)
    return path


@pytest.fixture
def tiny_checkpoint(tmp_path: Path) -> Path:
    """An official-layout full-SAM checkpoint (image_encoder.* keys plus other modules' keys)."""
    encoder = tiny_encoder(seed=3)
    state = {f"image_encoder.{k}": v for k, v in encoder.state_dict().items()}
    state["mask_decoder.dummy.weight"] = torch.ones(2)
    path = tmp_path / "sam_tiny.pth"
    torch.save(state, path)
    return path


def export_tiny_targets(root: Path, name: str, seed: int, targets: tuple[str, ...] = ("onnxruntime-cpu", "generic"),
                        dynamic_batch: bool = False) -> dict[str, Path]:
    """The seeded tiny encoder ``name`` exported once per attention target into ``root`` (random weights by seed in
    the metadata, so validate rebuilds the eager model from it); target -> file."""
    from vitdeploy.models.recipes import SAM_PIXEL_MEAN, SAM_PIXEL_STD
    from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder, sam_encoder_metadata

    encoder = tiny_encoder(name, seed=seed)
    arch = TINY_ARCHS[name]
    paths = {}
    for target in targets:
        meta = sam_encoder_metadata(variant="tiny", input_size=arch.img_size, pixel_mean=SAM_PIXEL_MEAN,
                                    pixel_std=SAM_PIXEL_STD, architecture=arch.to_dict(), random_seed=seed, target=target,
                                    dynamic_batch=dynamic_batch)
        paths[target] = export_sam_image_encoder(encoder, root / f"{target}.onnx", metadata=meta, target=target,
                                                 dynamic_batch=dynamic_batch).path
    return paths


def tamper_onehot_tables(model) -> int:
    """Put one key of each folded attention's one-hot table in two columns (no longer the folded rel-pos layout),
    in place; the number of tables changed."""
    import onnx

    producers = {o: n for n in model.graph.node for o in n.output}
    tables = set()
    for node in model.graph.node:
        if node.op_type == "MultiHeadAttention":  # key <- Reshape <- Add(Pad(k), one-hot table)
            tables.update(producers[producers[node.input[1]].input[0]].input)
    tampered = 0
    for init in model.graph.initializer:
        if init.name in tables:
            table = onnx.numpy_helper.to_array(init).copy()
            table.reshape(-1, table.shape[-1])[0, -1] = 1.0
            init.CopyFrom(onnx.numpy_helper.from_array(table, init.name))
            tampered += 1
    return tampered


def load_benchmark(name: str):
    """``benchmarks/<name>.py`` imported as a module (the scripts are not a package), registered under ``name``."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


#: A CPU form written by 'vitdeploy optimize' vs the same form made in memory by the runner from the exported file: the
#: same graph, so the same kernels; max-abs error relative to the output scale (initializer order may change summation
#: order: none seen).
WRITTEN_VS_IN_MEMORY_MAX_ABS_REL = 1e-6

#: IR version of the graphs tests build by hand. onnx.helper.make_model writes its own newest IR by default (14 from
#: onnx 1.23.1 on the GPU machine), which ONNX Runtime 1.31 (in the tested set) and TensorRT's parser refuse; 10 is
#: what torch.onnx writes.
IR_VERSION = 10


def max_abs_rel(out, ref) -> float:
    """Max-abs difference of two arrays relative to ``ref``'s scale (its largest magnitude)."""
    import numpy as np

    return float(np.abs(out - ref).max() / np.abs(ref).max())


def assert_matches_official(official: torch.nn.Module, runner, x: torch.Tensor, label: str):
    """The runner's ``image_embeddings`` for image ``x`` within the fp32 tolerance of the eager ``official`` encoder;
    returns them."""
    from vitdeploy.parity import compare

    with torch.no_grad():
        ref = official(x)
    out = runner.run({"image": x.numpy()})["image_embeddings"]
    result = compare(ref, out, "fp32", label=label)
    assert result, result.summary()
    return out
