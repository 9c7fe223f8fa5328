"""vitdeploy.runtime.Sam2VideoPredictor (NumPy + ONNX Runtime on the four exported graphs) against the official
sam2 SAM2VideoPredictor, on a tiny SAM 2.1 whose objects are present and a synthetic 30-frame clip: the same calls,
the same masks on every frame and object, the same object scores, and the same memory kept in the state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.sam2_video_fixtures import FRAMES, official_video_predictor
from vitdeploy.errors import InputError
from vitdeploy.validation.masks import CLIP_MASKS, CLIP_SCORE_ATOL, compare_masks
from vitdeploy.parity import Tolerance, compare

pytest.importorskip("sam2", reason="the official sam2 package is not installed (scripts/test.sh installs it)")
pytest_plugins = ["tests.sam2_video_fixtures"]

#: Object-score logits of every tracked frame, ours vs official (the issue's 1e-3; measured up to 2.1e-6).
SCORE_ATOL = 1e-3
#: The memories both predictors store in bfloat16: the float32 values agree within rounding, so a value on a bfloat16
#: rounding boundary may land one bfloat16 step (at most 2^-7 of the largest value) apart; the rest is fp32-close.
#: Measured over both scenarios below (AMD EPYC Zen 3): relative L2 up to 1.17e-4, max-abs/max up to 4.1e-3.
STORED_BF16 = Tolerance("fp32 stored in bf16", cosine_min=0.99999, rel_l2_max=1e-3, max_abs_rel=2.0 ** -7)
DISC_CLICK = dict(points=[[25, 45]], labels=[1])  # the red disc on frame 0
SQUARE_BOX = [100, 25, 130, 50]  # the blue square on frame 10


def ours_for(files: dict[str, Any], **options: Any):
    from vitdeploy.runtime.apps.sam2.video_predictor import Sam2VideoPredictor

    # hole filling off on both sides: the official predictor skips it without its CUDA extension (as here)
    return Sam2VideoPredictor(files["encoder"], files["decoder"], files["memory_encoder"], files["memory_attention"],
                              threads=2, runtime="onnxruntime", fill_hole_area=0, **options)


@pytest.fixture(scope="module")
def predictors(sam2_video: dict[str, Any]):
    return official_video_predictor(sam2_video["checkpoint"]), ours_for(sam2_video)


def same_masks(theirs: Any, ours: np.ndarray, label: str) -> None:
    """Every object's mask logits (N, 1, H, W): the masks within the fp32 mask budget, the logits within fp32."""
    theirs = np.asarray(theirs.float().numpy() if isinstance(theirs, torch.Tensor) else theirs)
    assert ours.shape == theirs.shape and ours.dtype == np.float32, (label, ours.shape, theirs.shape)
    for obj in range(theirs.shape[0]):
        agreement = compare_masks(theirs[obj, 0] > 0, ours[obj, 0] > 0, "fp32", label=f"{label}/object {obj}")
        assert agreement, agreement.summary()
    close = compare(theirs, ours, "fp32", label=f"{label}/logits")
    assert close, close.summary()


def same_state(theirs: dict[str, Any], ours: dict[str, Any], label: str) -> int:
    """The same frames filed per object (prompted and tracked), each with the same object score and memory."""
    checked = 0
    for obj in range(len(theirs["obj_ids"])):
        for key in ("cond_frame_outputs", "non_cond_frame_outputs"):
            a, b = theirs["output_dict_per_obj"][obj][key], ours["output_dict_per_obj"][obj][key]
            assert sorted(a) == sorted(b), (label, obj, key, sorted(a), sorted(b))
            for t in a:
                score_a = float(a[t]["object_score_logits"].reshape(-1)[0])
                score_b = float(b[t]["object_score_logits"].reshape(-1)[0])
                assert abs(score_a - score_b) <= SCORE_ATOL, (label, obj, key, t, score_a, score_b)
                memory = compare(a[t]["maskmem_features"].float().numpy(), b[t]["maskmem_features"].astype(np.float32),
                                 STORED_BF16, label=f"{label}/object {obj}/frame {t} memory")
                assert memory, memory.summary()
                checked += 1
    return checked


def run_both(predictors, clip: Path, calls: list[tuple[str, dict[str, Any]]]):
    """The same calls on both predictors: prompts (compared as they return), then propagations (compared per frame)."""
    official, ours = predictors
    with torch.inference_mode():
        theirs_state = official.init_state(str(clip))
    ours_state = ours.init_state(clip)
    frames_seen = 0
    for name, kwargs in calls:
        with torch.inference_mode():
            theirs = getattr(official, name)(theirs_state, **kwargs)
        mine = getattr(ours, name)(ours_state, **kwargs)
        if name == "propagate_in_video":
            theirs, mine = list(theirs), list(mine)
            assert [f for f, _, _ in theirs] == [f for f, _, _ in mine], name
            for (frame, ids_a, masks_a), (_, ids_b, masks_b) in zip(theirs, mine):
                assert list(ids_a) == list(ids_b)
                same_masks(masks_a, masks_b, f"{name}{kwargs}/frame {frame}")
                frames_seen += 1
        else:
            assert theirs[0] == mine[0] and list(theirs[1]) == list(mine[1]), (name, theirs[:2], mine[:2])
            same_masks(theirs[2], mine[2], f"{name}{kwargs}")
    return theirs_state, ours_state, frames_seen


def test_two_objects_on_different_frames_forward_and_reverse(predictors, sam2_video: dict[str, Any]) -> None:
    """The issue's scenario: a click on frame 0 (object 1), a box on frame 10 (object 2), tracked forward from frame 0
    (object 2 also before its prompt, a memory without pointers) and in reverse from the last frame."""
    calls = [("add_new_points_or_box", dict(frame_idx=0, obj_id=1, **DISC_CLICK)),
             ("add_new_points_or_box", dict(frame_idx=10, obj_id=2, box=SQUARE_BOX)),
             ("propagate_in_video", {}),
             ("propagate_in_video", dict(start_frame_idx=FRAMES - 1, reverse=True))]
    theirs, ours, frames = run_both(predictors, sam2_video["clip"], calls)
    assert frames == 2 * FRAMES
    assert same_state(theirs, ours, "two objects") == 2 * FRAMES  # every frame of both objects, each filed once
    present = [float(o["object_score_logits"].reshape(-1)[0]) > 0
               for obj in ours["output_dict_per_obj"].values() for o in obj["non_cond_frame_outputs"].values()]
    assert all(present), "the test model's objects must be present, else the masks are the no-object fill"


def test_corrections_masks_and_frame_ranges(predictors, sam2_video: dict[str, Any]) -> None:
    """A mask prompt, two clicks (the single-mask path), a correction click on a tracked frame (with the previous
    logits as mask prompt), an empty mask (no object), and propagation from a start frame for a frame budget."""
    disc = np.zeros((120, 160), bool)
    disc[36:56, 28:48] = True
    calls = [("add_new_mask", dict(frame_idx=4, obj_id=3, mask=disc)),
             ("add_new_points_or_box", dict(frame_idx=2, obj_id=5, points=[[110, 15], [30, 90]], labels=[1, 0])),
             ("add_new_mask", dict(frame_idx=6, obj_id=7, mask=np.zeros((120, 160), bool))),
             ("propagate_in_video", dict(start_frame_idx=2, max_frame_num_to_track=9)),
             ("add_new_points_or_box", dict(frame_idx=8, obj_id=3, points=[[60, 40]], labels=[1], clear_old_points=False)),
             ("propagate_in_video", dict(start_frame_idx=11, max_frame_num_to_track=5, reverse=True))]
    theirs, ours, frames = run_both(predictors, sam2_video["clip"], calls)
    assert frames == 10 + 6
    assert same_state(theirs, ours, "corrections") > 0


def test_remove_object_and_reset_state(predictors, sam2_video: dict[str, Any]) -> None:
    official, ours = predictors
    with torch.inference_mode():
        theirs_state = official.init_state(str(sam2_video["clip"]))
    ours_state = ours.init_state(sam2_video["clip"])
    for predictor, state in ((official, theirs_state), (ours, ours_state)):
        with torch.inference_mode():
            predictor.add_new_points_or_box(state, frame_idx=0, obj_id=1, **DISC_CLICK)
            predictor.add_new_points_or_box(state, frame_idx=3, obj_id=2, box=SQUARE_BOX)
    with torch.inference_mode():
        theirs = official.remove_object(theirs_state, 1)
    mine = ours.remove_object(ours_state, 1)
    assert list(theirs[0]) == list(mine[0]) == [2]
    assert [f for f, _ in theirs[1]] == [f for f, _ in mine[1]] == [0]
    same_masks(theirs[1][0][1], mine[1][0][1], "remove_object")
    with torch.inference_mode():
        theirs = list(official.propagate_in_video(theirs_state, max_frame_num_to_track=3))
    for (frame, _, a), (_, _, b) in zip(theirs, ours.propagate_in_video(ours_state, max_frame_num_to_track=3)):
        same_masks(a, b, f"after remove_object/frame {frame}")
    ours.reset_state(ours_state)
    assert ours_state["obj_ids"] == [] and ours_state["output_dict_per_obj"] == {}
    with pytest.raises(InputError, match="no points, box or mask given for any object"):
        next(ours.propagate_in_video(ours_state))


def test_the_official_example_runs_unchanged(predictors, sam2_video: dict[str, Any]) -> None:
    """The official video notebook's calls and its use of the returned logits, as written there."""
    _, predictor = predictors
    inference_state = predictor.init_state(video_path=str(sam2_video["clip"]))
    predictor.reset_state(inference_state)
    _, out_obj_ids, out_mask_logits = predictor.add_new_points_or_box(
        inference_state=inference_state, frame_idx=0, obj_id=1, points=np.array([[25, 45]], dtype=np.float32),
        labels=np.array([1], np.int32))
    first = (out_mask_logits[0] > 0.0).cpu().numpy()
    assert type(first) is np.ndarray and first.shape == (1, 120, 160) and first.any()
    video_segments = {}
    for out_frame_idx, out_obj_ids, out_mask_logits in predictor.propagate_in_video(inference_state):
        video_segments[out_frame_idx] = {out_obj_id: (out_mask_logits[i] > 0.0).cpu().numpy()
                                         for i, out_obj_id in enumerate(out_obj_ids)}
    assert sorted(video_segments) == list(range(FRAMES)) and all(list(v) == [1] for v in video_segments.values())


def test_bad_calls_get_one_line_errors(predictors, sam2_video: dict[str, Any]) -> None:
    _, ours = predictors
    state = ours.init_state(sam2_video["clip"])
    with pytest.raises(InputError, match=rf"frame_idx {FRAMES} is not a frame of this video: it has {FRAMES} frames, "
                                         rf"0 to {FRAMES - 1}"):
        ours.add_new_points_or_box(state, frame_idx=FRAMES, obj_id=1, **DISC_CLICK)
    with pytest.raises(InputError, match="points and labels must be provided together"):
        ours.add_new_points_or_box(state, frame_idx=0, obj_id=1, points=[[1, 2]])
    with pytest.raises(InputError, match="cannot add box without clearing old points"):
        ours.add_new_points_or_box(state, frame_idx=0, obj_id=1, box=SQUARE_BOX, clear_old_points=False)
    with pytest.raises(InputError, match=r"point \(500, 45\) is outside the 160x120 image: coordinates are pixels"):
        ours.add_new_points_or_box(state, frame_idx=0, obj_id=1, points=[[500, 45]], labels=[1])
    with pytest.raises(InputError, match=r"box \[130.0, 25.0, 100.0, 50.0\] is not x0, y0, x1, y1"):
        ours.add_new_points_or_box(state, frame_idx=0, obj_id=1, box=[130, 25, 100, 50])
    with pytest.raises(InputError, match=r"points holds NaN or infinite values"):
        ours.add_new_points_or_box(state, frame_idx=0, obj_id=1, points=[[0.5, float("nan")]], labels=[1],
                                   normalize_coords=False)
    with pytest.raises(InputError, match=r"mask must be one \(H, W\) mask"):
        ours.add_new_mask(state, frame_idx=0, obj_id=1, mask=np.zeros((1, 120, 160), bool))
    ours.add_new_points_or_box(state, frame_idx=0, obj_id=1, **DISC_CLICK)
    with pytest.raises(InputError, match=r"start_frame_idx -1 is not a frame"):
        next(ours.propagate_in_video(state, start_frame_idx=-1))
    with pytest.raises(InputError, match=r"max_frame_num_to_track must be a whole number of frames, at least 0, or None"):
        next(ours.propagate_in_video(state, max_frame_num_to_track=-1))
    ours.clear_all_prompts_in_frame(state, frame_idx=0, obj_id=9)  # an id never prompted joins, without prompts
    with pytest.raises(InputError, match=r"object id 9 has no points, box or mask on any frame: prompt it"):
        next(ours.propagate_in_video(state))
    with pytest.raises(InputError, match=r"cannot remove object id 4: it was never prompted"):
        ours.remove_object(state, 4, strict=True)


def tracked(predictor: Any, clip: Path, autocast: bool = False):
    """The two objects of the clip tests (a click on frame 0, a box on frame 10) tracked through ``clip`` by either
    predictor, the official one under BF16 autocast where ``autocast``: a ClipRun of masks and scores."""
    import contextlib

    from vitdeploy.validation.official_practice import ClipRun

    def value(x: Any) -> np.ndarray:
        return x.float().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)

    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with torch.inference_mode(), context:
        state = predictor.init_state(str(clip))
        predictor.add_new_points_or_box(state, frame_idx=0, obj_id=1, **DISC_CLICK)
        predictor.add_new_points_or_box(state, frame_idx=10, obj_id=2, box=SQUARE_BOX)
        masks = {frame: value(logits)[:, 0] > 0 for frame, _, logits in predictor.propagate_in_video(state)}
    scores = {(obj, t): float(value(o["object_score_logits"]).reshape(-1)[0])
              for obj, per in state["output_dict_per_obj"].items()
              for key in ("cond_frame_outputs", "non_cond_frame_outputs") for t, o in per[key].items()}
    return ClipRun(masks, scores)


def test_the_image_encoder_in_bf16_tracks_no_further_from_fp32_than_the_officials_own_bf16(predictors,
                                                                                          sam2_video: dict[str, Any]):
    """The proof behind BF16 for SAM 2's image encoder (``proven_policies``): the SAM 2 notebooks run the whole
    predictor under BF16 autocast, and the image encoder and memory attention in BF16 on OpenVINO (what ``auto`` may
    choose on a CPU with BF16 units) track the two objects no further from the FP32 clip than the official predictor
    under its own BF16 autocast tracks from the official FP32 clip: each distance (worst and mean frame's 1 - IoU,
    object scores) within the margin of the official's, or within the fixed clip budget. Full size (hiera-t, 30 frames,
    benchmarks/bf16_video_agreement.py --variants official official-bf16 image_encoder): worst frame's IoU 0.9748
    against the official BF16's own 0.9625, scores within 4.3e-3 against 1.2e-2."""
    pytest.importorskip("openvino")
    from vitdeploy.runtime.apps.sam2.video_predictor import Sam2VideoPredictor
    from vitdeploy.runtime.deploy.loader import OpenOptions, open_runner
    from vitdeploy.runtime_facts import official_precision
    from vitdeploy.validation.official_practice import judge_clip

    official, fp32 = predictors
    reduced = {graph: open_runner(sam2_video[graph], OpenOptions(runtime="openvino", policy="bf16", threads=2))
               for graph in ("encoder", "memory_attention")}
    if any(runner.inference_precision != "bf16" for runner in reduced.values()):
        pytest.skip("OpenVINO runs no BF16 on this CPU (no BF16 units): the policy is not offered here")
    assert reduced["encoder"].heads_in_5d == 2  # without the form OpenVINO's BF16 embedding is 18x the official's
    deployed = Sam2VideoPredictor(reduced["encoder"], fp32.decoder, fp32.memory_encoder, reduced["memory_attention"],
                                  fill_hole_area=0)
    clip = sam2_video["clip"]
    practice = judge_clip(tracked(official, clip), tracked(official, clip, autocast=True), tracked(fp32, clip),
                          tracked(deployed, clip), margin=official_precision("sam2_image_encoder").margin)
    assert practice, practice.summary()
    assert practice.official.worst > 0 and practice.deployed.worst > 0, practice.summary()  # BF16 moved both


@pytest.mark.parametrize("policy, graphs", [("bf16", ("memory_attention",)),
                                            ("fp16", ("memory_attention", "memory_encoder"))])
def test_reduced_memory_graphs_keep_the_clips_masks(predictors, sam2_video: dict[str, Any], policy: str,
                                                    graphs: tuple[str, ...]) -> None:
    """The proof behind a reduced policy for SAM 2's memory graphs (``proven_policies`` in runtime_facts.json): the
    issue's two objects tracked with ``graphs`` on OpenVINO at ``policy``, the other graphs as written, against all four
    as written: every frame's masks within the clip budget, the object scores within 1e-2, every object still present.
    Full size: ``benchmarks/bf16_video_agreement.py`` (hiera-t, 30 frames: the memory attention in BF16 worst IoU
    0.9959, scores within 2.8e-4, the memory encoder in BF16 too missed, 0.988; both in FP16 (``--policy fp16``, on an
    AVX512-FP16 Xeon) 0.99956 and 1.3e-4, hiera-b+ 0.99909 and 1.2e-4). On a CPU without the policy's units OpenVINO
    runs what it has (its runner says so), and this holds trivially."""
    pytest.importorskip("openvino")
    from vitdeploy.runtime.apps.sam2.video_predictor import Sam2VideoPredictor
    from vitdeploy.runtime.deploy.loader import OpenOptions, open_runner
    from vitdeploy.runtime_facts import PROVEN_POLICIES

    _, fp32 = predictors
    reduced = {graph: open_runner(sam2_video[graph], OpenOptions(runtime="openvino", policy=policy, threads=2))
               for graph in graphs}
    other = Sam2VideoPredictor(fp32.image_encoder, fp32.decoder, reduced.get("memory_encoder", fp32.memory_encoder),
                               reduced["memory_attention"], fill_hole_area=0)
    results = []
    for predictor in (fp32, other):
        state = predictor.init_state(sam2_video["clip"])
        predictor.add_new_points_or_box(state, frame_idx=0, obj_id=1, **DISC_CLICK)
        predictor.add_new_points_or_box(state, frame_idx=10, obj_id=2, box=SQUARE_BOX)
        masks = {frame: logits > 0 for frame, _, logits in predictor.propagate_in_video(state)}
        scores = {(obj, t): float(o["object_score_logits"].reshape(-1)[0])
                  for obj, per in state["output_dict_per_obj"].items() for key in ("cond_frame_outputs",
                                                                                 "non_cond_frame_outputs")
                  for t, o in per[key].items()}
        results.append((masks, scores))
    (masks_a, scores_a), (masks_b, scores_b) = results
    assert sorted(masks_a) == sorted(masks_b) == list(range(FRAMES))
    for t in masks_a:  # the clip budget (CLIP_MASKS): every frame's masks, object by object
        agreement = compare_masks(masks_a[t], masks_b[t], CLIP_MASKS, label=f"frame {t}")
        assert agreement, agreement.summary()
    assert scores_a.keys() == scores_b.keys()
    assert max(abs(scores_a[k] - scores_b[k]) for k in scores_a) <= CLIP_SCORE_ATOL
    assert all(v > 0 for v in scores_b.values()), "the objects must stay present, else the masks are the fill"
    if any(r.inference_precision == PROVEN_POLICIES[policy]["openvino_precision"] for r in reduced.values()):
        assert any(not np.array_equal(masks_a[t], masks_b[t]) for t in masks_a) or scores_a != scores_b, \
            f"{policy} ran, so something must differ from FP32: the comparison would prove nothing otherwise"
