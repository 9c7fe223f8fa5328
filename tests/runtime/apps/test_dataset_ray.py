"""Dataset jobs on Ray Data (a local 2-CPU cluster): the same bytes as in one process, and a killed actor loses nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.runtime.apps.test_dataset_job import SHAPES, embed_args, make_images, manifest
from tests.sam_tiny import TinySamArtifacts
from vitdeploy.runtime.apps.datasets.job import FAULT_EXIT_WORKER_ONCE, job_config, plan_job, run_in_process, run_job
from vitdeploy.runtime.deploy.loader import OpenOptions

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'vitdeploy[ray]'; the dev extra has it)")

pytestmark = pytest.mark.ray
pytest_plugins = ["tests.sam_tiny_fixtures"]

MASK_OPTIONS = dict(points_per_side=4, pred_iou_thresh=0.1, stability_score_thresh=0.1, stability_score_offset=0.1,
                    output_mode="coco_rle")


def test_a_killed_actor_loses_and_repeats_nothing(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """The first actor to take a shard exits as a killed process would (``os._exit``); Ray restarts it and retries
    the shard, the driver commits every shard once: each image is in the manifest exactly once."""
    paths = make_images(tmp_path / "imgs")
    marker = tmp_path / "killed"
    args = embed_args(tiny_sam_artifacts, tmp_path / "imgs", tmp_path / "out", "--ray", "--workers", "2")
    done = subprocess.run([sys.executable, "-m", "vitdeploy", *args], env={**os.environ, FAULT_EXIT_WORKER_ONCE: str(marker)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert marker.is_file(), "no actor was killed: the test tested nothing"
    assert "on Ray (a local cluster): 2 worker(s) x 1 thread(s)" in done.stdout
    counts = Counter(i["image"] for e in manifest(tmp_path / "out") for i in e["images"])
    assert sorted(counts) == sorted(str(p) for p in paths) and set(counts.values()) == {1}
    whole = tmp_path / "whole"
    plan = plan_job(job_config("embed", {"encoder": str(tiny_sam_artifacts.encoder)},
                               OpenOptions(runtime="onnxruntime", threads=1)), tmp_path / "imgs", whole, shard_size=2)
    run_job(plan, run_in_process(plan))
    assert (tmp_path / "out" / "manifest.jsonl").read_bytes() == (whole / "manifest.jsonl").read_bytes()


@pytest.fixture(scope="module")
def local_ray():
    from vitdeploy.runtime.apps.datasets.on_ray import LOCAL, start_ray, stop_ray

    started = start_ray(LOCAL, 2)
    yield
    if started:
        stop_ray()


@pytest.mark.parametrize("kind", ["embed", "masks", "concepts"])
def test_ray_writes_what_one_process_writes(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path, local_ray, kind: str,
                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    from vitdeploy.runtime.apps.datasets.on_ray import run_on_ray

    make_images(tmp_path / "imgs")
    if kind == "concepts":  # SAM 3: a text prompt over the images, the three tiny files
        pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")
        from tests.sam3_fixtures import sam3_tiny_files

        vision, text, detector = sam3_tiny_files(tmp_path_factory)
        config = job_config(kind, {"vision": str(vision), "text": str(text), "detector": str(detector)},
                            OpenOptions(runtime="onnxruntime", threads=1),
                            {"text": "dog", "confidence_threshold": 0.0, "output_mode": "coco_rle"})
    else:
        files = {"encoder": str(tiny_sam_artifacts.encoder)}
        if kind == "masks":
            files["decoder"] = str(tiny_sam_artifacts.decoder)
        config = job_config(kind, files, OpenOptions(runtime="onnxruntime", threads=1),
                            MASK_OPTIONS if kind == "masks" else {})
    outputs = {}
    for where in ("process", "ray"):
        plan = plan_job(config, tmp_path / "imgs", tmp_path / where, shard_size=2)
        report = run_job(plan, run_in_process(plan) if where == "process" else run_on_ray(plan, workers=2))
        assert (report.done, report.failed, report.shards) == (len(SHAPES), 1, 3)
        outputs[where] = {p.name: p.read_bytes() for p in sorted((tmp_path / where).iterdir()) if not p.name.startswith(".")}
    assert outputs["ray"] == outputs["process"]  # same shards byte for byte, same manifest, same errors
    assert len([n for n in outputs["ray"] if n.endswith((".npz", ".jsonl")) and n[0] in "emc"]) >= 3
    entries = [json.loads(line) for line in outputs["ray"]["manifest.jsonl"].decode().splitlines()]
    assert [e["index"] for e in entries] == [0, 1, 2]



def test_a_decision_for_the_second_file_reaches_the_workers_on_ray(tiny_sam_artifacts: TinySamArtifacts,
                                                                  tmp_path: Path, local_ray,
                                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    """A profile beside the decoder (SAM's masks job, a Ray Serve decoder replica) and beside SAM 3's detector (a
    concepts job) chooses OpenVINO, where this CPU's default for them is the file as written on ONNX Runtime: the
    actors and replicas Ray starts open them so, from the plan the driver made (tests/runtime/deploy/test_plan.py
    holds the same in one process)."""
    import shutil

    pytest.importorskip("openvino")
    from tests.runtime.deploy.test_deployment import _profile
    from vitdeploy.runtime.apps.sam.files import PAIR
    from vitdeploy.runtime.apps.serving.ray_serve import RayServeOptions, plan_for_replicas

    def backends_of_a_job_worker(config: dict) -> dict:  # in a Ray worker process: the runners the job's actor
        # class opens from the config it is sent, by role (nested: Ray sends it by value, not by module name)
        from vitdeploy.runtime.apps.datasets.on_ray import RayShardWorker

        return {role: (runner.backend, runner.deployment.source if runner.deployment else None)
                for role, runner in RayShardWorker(config).worker.runners.items()}

    def backend_of_a_decoder_replica(options) -> tuple:  # in a Ray worker process: what a decoder replica opens
        from vitdeploy.runtime.apps.serving.ray_serve import DecoderReplica

        decoder = DecoderReplica(options).side.predictor.decoder
        return decoder.backend, decoder.deployment.source

    encoder = Path(shutil.copy(tiny_sam_artifacts.encoder, tmp_path / "encoder.onnx"))
    decoder = Path(shutil.copy(tiny_sam_artifacts.decoder, tmp_path / "decoder.onnx"))
    own = PAIR.plan({"encoder": encoder, "decoder": decoder}, OpenOptions()).files[0].deployment
    _profile(decoder, {"runtime": "openvino", "precision": "file", "threads": 1, "settings": {}})
    masks = job_config("masks", {"encoder": str(encoder), "decoder": str(decoder)}, OpenOptions(), MASK_OPTIONS,
                       pooled=True)
    found = ray.get(ray.remote(backends_of_a_job_worker).remote(masks.to_dict()))
    # the encoder keeps the decision this CPU makes for it alone (OpenVINO BF16 where the probe proves it)
    assert found["decoder"] == ("openvino", "profile decoder.profile.json") and found["encoder"] == (own.runtime,
                                                                                                   own.source)
    replicas = RayServeOptions(plan_for_replicas(str(encoder), str(decoder), OpenOptions()))
    assert ray.get(ray.remote(backend_of_a_decoder_replica).remote(replicas)) == ("openvino",
                                                                                  "profile decoder.profile.json")
    import importlib.util

    if importlib.util.find_spec("sam3") is not None:
        from tests.sam3_fixtures import sam3_tiny_files
        from vitdeploy.runtime.apps.sam3.files import CONCEPT

        vision, text, detector = sam3_tiny_files(tmp_path_factory)
        detector = Path(shutil.copy(detector, tmp_path / "detector.onnx"))
        own = {f.role: (f.deployment.runtime, f.deployment.source) for f in CONCEPT.plan(
            {"vision": vision, "text": text, "detector": detector}, OpenOptions()).files}
        _profile(detector, {"runtime": "openvino", "precision": "file", "threads": 1, "settings": {}})
        concepts = job_config("concepts", {"vision": str(vision), "text": str(text), "detector": str(detector)},
                              OpenOptions(), {"text": "dog", "confidence_threshold": 0.0}, pooled=True)
        found = ray.get(ray.remote(backends_of_a_job_worker).remote(concepts.to_dict()))
        assert found["detector"] == ("openvino", "profile detector.profile.json"), found
        assert (found["vision"], found["text"]) == (own["vision"], own["text"]), found

