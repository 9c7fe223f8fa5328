"""One plan per model (vitdeploy/runtime/deploy/plan.py): every file decided once, the plan carried as plain data, and
a decision for any file of the model, the second one included, in the runner of every route that opens it. The
routes that open their files in another process of a Ray cluster are proven on Ray in
tests/runtime/apps/test_dataset_ray.py."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from tests.runtime.deploy.test_deployment import _profile
from tests.sam_tiny import TinySamArtifacts
from vitdeploy.errors import InputError
from vitdeploy.runtime.deploy.deployment import Deployment
from vitdeploy.runtime.deploy.loader import OpenOptions
from vitdeploy.runtime.deploy.plan import ModelPlan, PlannedFile, worker_threads

pytest_plugins = ["tests.sam_tiny_fixtures"]


@pytest.fixture()
def pair(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> tuple[Path, Path]:
    """Copies of the tiny encoder and decoder in their own folder: the profiles these tests write stay beside them."""
    return (Path(shutil.copy(tiny_sam_artifacts.encoder, tmp_path / "encoder.onnx")),
            Path(shutil.copy(tiny_sam_artifacts.decoder, tmp_path / "decoder.onnx")))


def routes(encoder: Path, decoder: Path) -> dict[str, dict]:
    """The runners every route that opens SAM's pair in this process holds, by role: the predictor, the one-process
    server, a dataset worker (its config through the dict it travels as), a Ray Serve encoder and decoder replica
    (their options through pickle, as Ray Serve hands them to the replica)."""
    from vitdeploy.runtime.apps.datasets.job import JobConfig, ShardWorker, job_config
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor
    from vitdeploy.runtime.apps.serving.ray_serve import (DecoderReplica, EncoderReplica, RayServeOptions,
                                                          plan_for_replicas)
    from vitdeploy.runtime.apps.serving.service import SamService

    predictor = SamPredictor(encoder, decoder)
    service = SamService(encoder, decoder)
    config = job_config("masks", {"encoder": str(encoder), "decoder": str(decoder)}, OpenOptions(), pooled=True)
    worker = ShardWorker(JobConfig.from_dict(json.loads(json.dumps(config.to_dict()))))
    options = pickle.loads(pickle.dumps(RayServeOptions(plan_for_replicas(str(encoder), str(decoder), OpenOptions()))))
    return {"SamPredictor": {"encoder": predictor.encoder, "decoder": predictor.decoder},
            "serve": dict(zip(("encoder", "decoder"), service.runners)),
            "segment-all --images worker": worker.runners,
            "serve --ray replicas": {"encoder": EncoderReplica(options).side.runner,
                                     "decoder": DecoderReplica(options).side.predictor.decoder}}


@pytest.mark.parametrize("apart", [True, False])
def test_a_profile_setting_of_the_encoder_reaches_every_route(pair: tuple[Path, Path], apart: bool) -> None:
    """A tuned profile's runner setting (OpenVINO's GELU form, both ways, so neither is this CPU's default by luck) is
    in the encoder's runner of every route, the routes that open the file elsewhere from the plan included."""
    pytest.importorskip("openvino")
    encoder, decoder = pair
    _profile(encoder, {"runtime": "openvino", "precision": "file", "threads": 1, "settings": {"gelu_apart": apart}})
    for route, runners in routes(encoder, decoder).items():
        runner = runners["encoder"]
        assert runner.backend == "openvino" and (runner.gelus_apart > 0) is apart, (route, runner.provider)


def test_a_decision_for_the_decoder_reaches_every_route(pair: tuple[Path, Path]) -> None:
    """The second file is decided too, never run as written by default: a profile beside the decoder (OpenVINO, where
    this CPU's default for a decoder is the file as written on ONNX Runtime) is in the decoder's runner of every route,
    and the encoder keeps its own decision: the one this CPU makes for it without the profile (ONNX Runtime on most
    CPUs, OpenVINO BF16 where the probe proves it)."""
    pytest.importorskip("openvino")
    from vitdeploy.runtime.apps.sam.files import PAIR

    encoder, decoder = pair
    own = PAIR.plan({"encoder": encoder, "decoder": decoder}, OpenOptions()).files[0].deployment
    _profile(decoder, {"runtime": "openvino", "precision": "file", "threads": 1, "settings": {}})
    for route, runners in routes(encoder, decoder).items():
        assert runners["decoder"].backend == "openvino", (route, runners["decoder"].provider)
        assert runners["decoder"].deployment.source == "profile decoder.profile.json", route
        assert (runners["encoder"].backend, runners["encoder"].deployment.source) == (own.runtime, own.source), route


def test_the_plan_is_plain_data_that_round_trips(pair: tuple[Path, Path]) -> None:
    """Every file of a plan decided, with why; its dict form is JSON, and reads back to the same plan; a damaged
    one is refused in one line."""
    from vitdeploy.runtime.apps.sam.files import PAIR

    encoder, decoder = pair
    plan = PAIR.plan({"encoder": encoder, "decoder": decoder}, OpenOptions(threads=1))
    assert plan.roles == ("encoder", "decoder") and all(f.chosen for f in plan.files)
    assert all(f.deployment.threads == 1 and f.deployment.source for f in plan.files), plan
    again = ModelPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan
    assert [line.split(" runs as ")[0] for line in plan.lines()] == ["encoder.onnx", "decoder.onnx"]
    with pytest.raises(InputError, match="not a vitdeploy model plan"):
        ModelPlan.from_dict({"files": []})
    with pytest.raises(InputError, match="planned file is damaged"):
        ModelPlan.from_dict({**plan.to_dict(), "files": [{"role": 1}]})
    asked = PAIR.plan({"encoder": encoder, "decoder": decoder}, OpenOptions(runtime="onnxruntime", policy="file"))
    assert [f.chosen for f in asked.files] == [False, False]  # asked, not chosen: the runners say no deployment


def test_threads_per_worker_follow_one_rule(pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker of a pool (a Ray actor, a Ray Serve replica) runs one thread unless asked, and its files are decided
    for that count, not for the driver's cores; in one process the deployment decides (None)."""
    from vitdeploy.runtime.apps.datasets.job import job_config
    from vitdeploy.runtime.deploy import loader

    assert (worker_threads(None, True), worker_threads(3, True), worker_threads(None, False)) == (1, 3, None)
    asked: list[int | None] = []

    def resolve(model, precision=None, threads=None, device="cpu", profile=None):
        asked.append(threads)
        return Deployment("onnxruntime", threads=threads or 2, source="fake")

    monkeypatch.setattr(loader, "resolve", resolve)
    encoder, decoder = pair
    files = {"encoder": str(encoder), "decoder": str(decoder)}
    job_config("masks", files, OpenOptions(), pooled=True)
    job_config("masks", files, OpenOptions(threads=3), pooled=True)
    job_config("masks", files, OpenOptions())
    assert asked == [1, 1, 3, 3, None, None]  # encoder and decoder each, per job


def test_a_wrong_pair_is_refused_before_any_file_is_decided(tiny_sam_artifacts: TinySamArtifacts,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The set's check runs on the files' metadata before any file is decided (a probe) or opened, in every route."""
    from vitdeploy.runtime.apps.datasets.job import job_config
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor
    from vitdeploy.runtime.apps.serving.ray_serve import plan_for_replicas
    from vitdeploy.runtime.apps.serving.service import SamService
    from vitdeploy.runtime.deploy import loader

    def decided(*args, **kwargs):
        raise AssertionError("a file was decided before the pair was checked")

    monkeypatch.setattr(loader, "resolve", decided)
    encoder = str(tiny_sam_artifacts.encoder)
    for make in (lambda: SamPredictor(encoder, encoder), lambda: SamService(encoder, encoder),
                 lambda: job_config("masks", {"encoder": encoder, "decoder": encoder}, OpenOptions()),
                 lambda: plan_for_replicas(encoder, encoder, OpenOptions())):
        with pytest.raises(InputError, match="not a SAM mask decoder"):
            make()


def test_a_planned_file_is_held_to_what_a_profile_may_hold() -> None:
    """A worker's copy of a plan is not trusted further than a profile: a runtime it does not know is refused."""
    good = PlannedFile("encoder", "e.onnx", Deployment("onnxruntime", threads=1)).to_dict()
    assert PlannedFile.from_dict(good).deployment.runtime == "onnxruntime"
    with pytest.raises(InputError, match="damaged"):
        PlannedFile.from_dict({**good, "deployment": {"runtime": "nope"}})
