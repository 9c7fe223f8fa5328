"""SAM 3's tracker used as SAM 2 (``Sam3TrackerPredictor``) against the official ``Sam3TrackerPredictor`` (CPU shim,
:mod:`tests.sam3_video_fixtures`): the official example ``sam3_for_sam2_video_task_example``'s calls, unchanged but
for the model line and the clip's coordinates, on both, over a 32-frame clip in which shapes enter, cross, leave and
come back; then a reverse pass, a correction on a tracked frame and ``remove_object``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.sam3_video_fixtures import CLIP_SIZE, FRAMES, official_tracker, official_tracker_on_the_cpu

pytest_plugins = ["tests.sam3_video_fixtures"]
torch = pytest.importorskip("torch")

#: Every object's mask on every frame, official vs vitdeploy (float32 on both sides, ONNX Runtime).
MASK_IOU_MIN = 0.99
#: Object score logits, official vs vitdeploy.
SCORE_ABS_MAX = 1e-3
#: A frame's memory score (``eff_iou_score``), official vs vitdeploy.
MEMORY_SCORE_ABS_MAX = 1e-5
#: How far from its threshold a decision of the clip must be (score sign, memory selection) for both sides to be
#: certain to take the same branch: 10x the differences allowed above.
SIGN_MARGIN = 1e-4


def ours(files: dict[str, Path], **settings: Any):
    from vitdeploy.runtime import Sam3TrackerPredictor

    return Sam3TrackerPredictor(files["vision"], files["interactive"], files["memory_encoder"],
                                files["memory_attention"], runtime="onnxruntime", threads=2, **settings)


def example_calls(predictor: Any, video_path: str) -> tuple[list[tuple[str, int, list, np.ndarray, np.ndarray | None]],
                                                            dict[str, Any]]:
    """The official example's calls in its order (a click, a second click, propagation, a negative click on a tracked
    frame, propagation; a box, a box with a click, propagation; two objects, propagation), then a reverse pass from
    the last frame, a correction on a tracked frame with propagation both ways, and ``remove_object``. Returns what
    each call gave: (call, frame, object ids, masks (objects, 1, H, W) as NumPy, scores or None), and the state."""
    height, width = CLIP_SIZE
    got: list[tuple[str, int, list, np.ndarray, np.ndarray | None]] = []

    def keep(call: str, frame_idx: int, obj_ids: list, masks: Any, scores: Any = None) -> None:
        arr = masks.cpu().numpy() if hasattr(masks, "cpu") else np.asarray(masks)
        got.append((call, int(frame_idx), list(obj_ids), np.array(arr, np.float32),
                    None if scores is None else np.array(scores.cpu().numpy() if hasattr(scores, "cpu") else scores)))

    def click(frame_idx: int, obj_id: int, points: list, labels: list, **kwargs: Any) -> None:
        rel_points = [[x / width, y / height] for x, y in points]
        points_tensor = torch.tensor(rel_points, dtype=torch.float32)
        points_labels_tensor = torch.tensor(np.array(labels, np.int32), dtype=torch.int32)
        _, out_obj_ids, low_res_masks, video_res_masks = predictor.add_new_points_or_box(
            inference_state=inference_state, frame_idx=frame_idx, obj_id=obj_id, points=points_tensor,
            labels=points_labels_tensor, **kwargs)
        assert low_res_masks is None  # "not needed by the demo"
        keep("click", frame_idx, out_obj_ids, video_res_masks)

    def propagate(**kwargs: Any) -> None:
        for frame_idx, obj_ids, low_res_masks, video_res_masks, obj_scores in predictor.propagate_in_video(
                inference_state, **kwargs):
            keep("propagate", frame_idx, obj_ids, video_res_masks, obj_scores)

    inference_state = predictor.init_state(video_path=video_path)
    predictor.clear_all_points_in_video(inference_state)
    click(0, 1, [[30, 35]], [1], clear_old_points=False)
    click(0, 1, [[30, 35], [40, 30]], [1, 1], clear_old_points=False)
    propagate(start_frame_idx=0, max_frame_num_to_track=240, reverse=False, propagate_preflight=True)
    click(20, 1, [[60, 70]], [0], clear_old_points=False)  # the example's refinement at frame 150
    propagate(start_frame_idx=0, max_frame_num_to_track=300, reverse=False, propagate_preflight=True)

    predictor.clear_all_points_in_video(inference_state)
    rel_box = np.array([[95 / width, 25 / height, 118 / width, 55 / height]], dtype=np.float32)
    _, ids, _, masks = predictor.add_new_points_or_box(inference_state=inference_state, frame_idx=0, obj_id=4,
                                                       box=rel_box)
    keep("box", 0, ids, masks)
    click(0, 4, [[110, 40]], [1], box=rel_box)
    propagate(start_frame_idx=0, max_frame_num_to_track=300, reverse=False, propagate_preflight=True)

    predictor.clear_all_points_in_video(inference_state)
    click(0, 2, [[30, 35]], [1])
    click(0, 2, [[30, 35], [60, 80]], [1, 0])
    click(0, 3, [[105, 40]], [1])
    click(0, 5, [[85, 65]], [1])
    propagate(start_frame_idx=0, max_frame_num_to_track=300, reverse=False, propagate_preflight=True)

    propagate(start_frame_idx=FRAMES - 1, max_frame_num_to_track=300, reverse=True, propagate_preflight=True)
    click(12, 3, [[60, 40]], [1], clear_old_points=False)  # a tracked frame: a prompted one from now on
    propagate(start_frame_idx=12, max_frame_num_to_track=None, reverse=False, propagate_preflight=True)
    propagate(start_frame_idx=12, max_frame_num_to_track=None, reverse=True, propagate_preflight=True)
    obj_ids, updated = predictor.remove_object(inference_state, 3)
    for frame_idx, masks in updated:
        keep("remove_object", frame_idx, obj_ids, masks)
    propagate(start_frame_idx=0, max_frame_num_to_track=None, reverse=False, propagate_preflight=True)
    return got, inference_state


def run_both(files: dict[str, Path], use_memory_selection: bool = True) -> tuple[list, list, dict, dict]:
    """(the official's answers, vitdeploy's, the official's final state, vitdeploy's)."""
    official = official_tracker(files["checkpoint"], use_memory_selection=use_memory_selection)
    with official_tracker_on_the_cpu(official):
        theirs, their_state = example_calls(official, str(files["clip"]))
    mine, state = example_calls(ours(files, use_memory_selection=use_memory_selection), str(files["clip"]))
    return theirs, mine, their_state, state


def iou(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a > 0, b > 0
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def compare(theirs: list, mine: list) -> dict[str, float]:
    """Every call's answer equal: the same calls, frames and ids; every mask within MASK_IOU_MIN, every score within
    SCORE_ABS_MAX. Returns the worst figures and how many masks were real (not empty)."""
    assert [(c, f, i) for c, f, i, _, _ in theirs] == [(c, f, i) for c, f, i, _, _ in mine]
    worst_iou, worst_score, real = 1.0, 0.0, 0
    for (call, frame_idx, ids, want, want_scores), (_, _, _, masks, scores) in zip(theirs, mine):
        assert masks.shape == want.shape == (len(ids), 1, *CLIP_SIZE), (call, frame_idx)
        for k in range(len(ids)):
            worst_iou = min(worst_iou, iou(want[k], masks[k]))
            real += int(np.any(want[k] > 0))
        if want_scores is not None:
            worst_score = max(worst_score, float(np.abs(want_scores - scores).max()))
    assert worst_iou >= MASK_IOU_MIN
    assert worst_score <= SCORE_ABS_MAX
    return {"iou": worst_iou, "score": worst_score, "real": real, "masks": sum(len(i) for _, _, i, _, _ in mine)}


def test_the_official_example_gives_the_officials_masks_ids_and_scores(sam3_tracker_files: dict[str, Path]) -> None:
    theirs, mine, their_state, state = run_both(sam3_tracker_files)
    figures = compare(theirs, mine)
    assert len(mine) > 7 * FRAMES  # every propagation of the example, both directions, after the removal
    assert figures["real"] > 0.8 * figures["masks"]  # masks with an object in them, not the no-object fill
    scores = np.concatenate([s.ravel() for _, _, _, _, s in mine if s is not None])
    assert (scores > 0).any() and (scores < 0).any()  # present and absent objects: both branches of the heads
    assert np.abs(scores).min() > SIGN_MARGIN  # each present/absent decision far from float32 noise
    # memory selection acted both ways: frames kept for later memory and frames left out, decided with a margin
    memory = {t: out["eff_iou_score"] for t, out in state["output_dict"]["non_cond_frame_outputs"].items()}
    official = {t: float(out["eff_iou_score"])
                for t, out in their_state["output_dict"]["non_cond_frame_outputs"].items()}
    assert memory.keys() == official.keys()
    assert max(abs(memory[t] - official[t]) for t in memory) < MEMORY_SCORE_ABS_MAX
    threshold = 0.01  # mf_threshold
    assert any(v > threshold for v in memory.values()) and any(v <= threshold for v in memory.values())
    assert min(abs(v - threshold) for v in memory.values()) > SIGN_MARGIN


def test_without_memory_selection_as_the_builders_ablation(sam3_tracker_files: dict[str, Path]) -> None:
    theirs, mine, _, _ = run_both(sam3_tracker_files, use_memory_selection=False)
    compare(theirs, mine)


def test_bad_calls_get_one_line_errors(sam3_tracker_files: dict[str, Path], tmp_path: Path) -> None:
    from vitdeploy.errors import InputError

    predictor = ours(sam3_tracker_files)
    state = predictor.init_state(video_path=str(sam3_tracker_files["clip"]))
    for kwargs, says in (
            ({"frame_idx": FRAMES, "points": [[0.5, 0.5]], "labels": [1]}, "not a frame of this video"),
            ({"frame_idx": 0, "points": [[1.5, 0.5]], "labels": [1]},
             "outside the frame: with rel_coordinates=True coordinates are fractions"),
            ({"frame_idx": 0, "points": [[float("nan"), 0.5]], "labels": [1]}, "NaN"),
            ({"frame_idx": 0, "box": [[0.6, 0.5, 0.2, 0.9]]}, "box"),
            ({"frame_idx": 0, "points": [[0.5, 0.5]]}, "together"),
            ({"frame_idx": 0, "points": [[0.5, 0.5]], "labels": [1], "box": [[0.1, 0.1, 0.9, 0.9]],
              "clear_old_points": False}, "cannot add box")):
        with pytest.raises(InputError, match=says) as err:
            predictor.add_new_points_or_box(state, obj_id=1, **kwargs)
        assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="propagate_preflight=True"):
        list(predictor.propagate_in_video(state, 0, None, False))
    predictor.add_new_points_or_box(state, 0, 1, points=[[0.3, 0.4]], labels=[1])
    next(iter(predictor.propagate_in_video(state, 0, 2, False, propagate_preflight=True)))
    with pytest.raises(InputError, match="after tracking starts"):
        predictor.add_new_points_or_box(state, 0, 7, points=[[0.3, 0.4]], labels=[1])
    with pytest.raises(InputError, match="does not exist"):
        predictor.remove_object(state, 9, strict=True)
    with pytest.raises(InputError, match="start_frame_idx"):
        list(predictor.propagate_in_video(state, FRAMES + 3, None, False))


def test_files_of_another_model_or_part_are_refused_before_opening(sam3_tracker_files: dict[str, Path],
                                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.family_exports import family_export
    from vitdeploy.errors import InputError

    files = dict(sam3_tracker_files)
    sam2_encoder = family_export(tmp_path_factory, "sam2_memory_encoder")[0]
    with pytest.raises(InputError, match="not SAM 3's memory encoder.*sam3_memory_encoder"):
        ours({**files, "memory_encoder": sam2_encoder})
    seeded = family_export(tmp_path_factory, "sam3_memory_attention")[0]  # the tests' seed, not the checkpoint
    with pytest.raises(InputError, match="two different SAM 3 models"):
        ours({**files, "memory_attention": seeded})
    with pytest.raises(InputError, match="not SAM 3's interactive decoder"):
        ours({**files, "interactive": files["memory_attention"]})


def test_memory_stays_flat_with_the_same_answers(sam3_tracker_files: dict[str, Path]) -> None:
    """Tracked frames' outputs moved to the session's file one frame behind (``frames_in_memory=1``) give every
    answer of the example's calls byte for byte as when none is moved; at the end, at most that one tracked frame's
    output is in memory per object, the rest in the file."""
    from vitdeploy.runtime.apps.sam2.past_outputs import PastOutput

    kept, kept_state = example_calls(ours(sam3_tracker_files, frames_in_memory=10 * FRAMES),
                                     str(sam3_tracker_files["clip"]))
    moved, state = example_calls(ours(sam3_tracker_files, frames_in_memory=1), str(sam3_tracker_files["clip"]))
    assert [(c, f, i) for c, f, i, _, _ in kept] == [(c, f, i) for c, f, i, _, _ in moved]
    for (_, _, _, a, sa), (_, _, _, b, sb) in zip(kept, moved):
        assert np.array_equal(a, b) and (sa is None or np.array_equal(sa, sb))
    assert "past_outputs" not in kept_state  # nothing moved there
    tracked = state["output_dict"]["non_cond_frame_outputs"]
    resident = [t for t, out in tracked.items() if not isinstance(out, PastOutput)]
    assert len(tracked) >= FRAMES - 2 and len(resident) <= 1
    for per_obj in state["output_dict_per_obj"].values():
        assert sum(not isinstance(o, PastOutput) for o in per_obj["non_cond_frame_outputs"].values()) <= 1
    with pytest.raises(Exception, match="frames_in_memory"):
        ours(sam3_tracker_files, frames_in_memory=0)


def test_the_track_verb_takes_sam3_files(sam3_tracker_files: dict[str, Path], tmp_path: Path) -> None:
    """``vitdeploy track`` on SAM 3's four files: pixels of the video in, the tracker's masks on every frame out (the
    Python predictor called as the official example calls it, fractions of the frame), each object's score; a mask
    prompt is refused in one line, with nothing written."""
    from pycocotools import mask as coco_mask

    from tests.cli_helpers import assert_user_error, run

    files = sam3_tracker_files
    height, width = CLIP_SIZE
    args = ["-e", str(files["vision"]), "-d", str(files["interactive"]), "-m", str(files["memory_encoder"]),
            "-a", str(files["memory_attention"]), "--threads", "2", "-i", str(files["clip"])]
    out = tmp_path / "tracks"
    code, output = run("track", *args, "--point", "0:1:30,35", "--box", "0:2:95,25,118,55", "-o", str(out),
                       "--no-overlay")
    assert code == 0, output
    assert f"tracked 2 object(s) over {FRAMES} frame(s)" in output
    data = json.loads((out / "masks.json").read_text())

    predictor = ours(files)
    state = predictor.init_state(video_path=str(files["clip"]))
    predictor.add_new_points_or_box(state, 0, 1, points=[[30 / width, 35 / height]], labels=[1])
    predictor.add_new_points_or_box(state, 0, 2, box=[95 / width, 25 / height, 118 / width, 55 / height])
    expected = {f: (masks[:, 0] > 0, scores.reshape(-1)) for f, _, _, masks, scores in
                predictor.propagate_in_video(state, 0, None, False, propagate_preflight=True)}
    assert sorted(expected) == list(range(FRAMES)) and len(data["annotations"]) == 2 * FRAMES
    for entry in data["annotations"]:
        masks, scores = expected[entry["frame"]]
        decoded = coco_mask.decode({"size": entry["segmentation"]["size"],
                                    "counts": entry["segmentation"]["counts"].encode()}).astype(bool)
        assert np.array_equal(decoded, masks[entry["object_id"] - 1]), entry["frame"]
        assert entry["object_score"] == pytest.approx(float(scores[entry["object_id"] - 1]), abs=1e-6)

    mask_file = tmp_path / "mask.png"
    from PIL import Image

    Image.fromarray(np.zeros(CLIP_SIZE, np.uint8)).save(mask_file)
    assert_user_error(*run("track", *args, "--mask", f"0:1:{mask_file}", "-o", str(tmp_path / "no")),
                      "--mask prompts are for SAM 2 files")
    assert not (tmp_path / "no").exists()


def tracked(predictor: Any, clip: Path, autocast: bool = False, frames: int = FRAMES // 2):
    """Two objects (a click on the red disc, a box on the blue square, both on frame 0) tracked forward over the first
    ``frames`` frames by either predictor, the official one under BF16 autocast on the CPU where ``autocast`` (as the
    official tracker enters CUDA's for the whole process): a ClipRun of masks and object scores."""
    import contextlib

    from vitdeploy.validation.official_practice import ClipRun

    def value(x: Any) -> np.ndarray:
        return x.float().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)

    height, width = CLIP_SIZE
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    masks, scores = {}, {}
    with torch.inference_mode(), context:
        state = predictor.init_state(video_path=str(clip))
        predictor.add_new_points_or_box(state, 0, 1, points=torch.tensor([[30 / width, 35 / height]]),
                                        labels=torch.tensor([1], dtype=torch.int32))
        predictor.add_new_points_or_box(state, 0, 2, box=np.array([[95 / width, 25 / height, 118 / width, 55 / height]],
                                                                  np.float32))
        for frame_idx, obj_ids, _, video_res_masks, obj_scores in predictor.propagate_in_video(
                state, 0, frames - 1, False, propagate_preflight=True):
            masks[frame_idx] = value(video_res_masks)[:, 0] > 0
            scores.update({(obj, frame_idx): float(s) for obj, s in zip(obj_ids, value(obj_scores).reshape(-1))})
    return ClipRun(masks, scores)


def _bf16_units() -> bool:
    from vitdeploy.cpu_features import cpu_features

    return bool(cpu_features().policy_units("bf16"))


@pytest.mark.skipif(not _bf16_units(), reason="this CPU has no BF16 units: the probe offers no BF16 here")
def test_the_tracker_graphs_proven_for_bf16_track_no_further_from_fp32_than_the_officials_own_bf16(
        sam3_tracker_files_present: dict[str, Path]) -> None:
    """The proof behind BF16 for SAM 3's tracker graphs (``proven_policies``; issue 74 item 5): the graphs whose
    families the data file names proven for BF16 on OpenVINO in BF16 (what ``auto`` may choose on a CPU with BF16
    units), the others as written, track two objects no further from vitdeploy's FP32 clip than the official tracker
    under its own BF16 autocast tracks from the official FP32 clip (``judge_clip``: the worst and the mean frame's
    1 - IoU and the object scores each within the margin of the official's, or within the fixed clip budget). Measured
    on an AMD EPYC Zen 4 (AVX512-BF16, no AMX): the official's worst/mean 1 - IoU 0.0286/0.0144 and scores within
    5.9e-3; the vision encoder and memory attention in BF16 0.0235/0.0125 and 8.7e-3 (the memory attention alone
    0.0020/0.0010 and 4.3e-4; the memory encoder too, 0.0246/0.0127 and 9.1e-3, yet it misses per output). Full size:
    ``benchmarks/bench_sam3_video.py --contenders official official-bf16 vitdeploy-fp32 vitdeploy-bf16``."""
    pytest.importorskip("openvino")
    from vitdeploy.runtime import Sam3TrackerPredictor
    from vitdeploy.runtime.deploy.loader import OpenOptions, open_runner
    from vitdeploy.runtime_facts import PROVEN_POLICIES, official_precision
    from vitdeploy.validation.official_practice import judge_clip

    files = sam3_tracker_files_present
    roles = ("vision", "interactive", "memory_encoder", "memory_attention")
    fp32 = {role: open_runner(files[role], OpenOptions(runtime="onnxruntime", threads=2)) for role in roles}
    proven = [role for role in roles if fp32[role].metadata["family"] in PROVEN_POLICIES["bf16"]["families"]]
    assert proven == ["vision", "memory_attention"]  # the interactive decoder and memory encoder keep their math
    reduced = {role: open_runner(files[role], OpenOptions(runtime="openvino", policy="bf16", threads=2))
               for role in proven}
    if any(runner.inference_precision != "bf16" for runner in reduced.values()):
        pytest.skip("OpenVINO runs no BF16 on this CPU: the policy is not offered here")
    official = official_tracker(files["checkpoint"])
    with official_tracker_on_the_cpu(official):
        want, want_bf16 = tracked(official, files["clip"]), tracked(official, files["clip"], autocast=True)
    deployed_fp32 = tracked(Sam3TrackerPredictor(*(fp32[r] for r in roles)), files["clip"])
    deployed = tracked(Sam3TrackerPredictor(*(reduced.get(r, fp32[r]) for r in roles)), files["clip"])
    assert min(want.scores.values()) > 0.1  # every object firmly present on every frame: judged by its masks
    practice = judge_clip(want, want_bf16, deployed_fp32, deployed,
                          margin=official_precision("sam3_memory_attention").margin)
    assert practice, practice.summary()
    assert practice.official.worst > 0 and practice.deployed.worst > 0, practice.summary()  # BF16 moved both
