"""The torch-free runtime on one machine, on files exported elsewhere: what scripts/arm-check.sh runs on x86-64 and on
aarch64 (under qemu), so the two answers can be compared (tests/test_arm.py).

    python scripts/runtime_check.py FILES OUT.npz

FILES holds the tiny models exported on x86-64 (scripts/arm-check.sh writes them): sam_enc.onnx, sam_dec.onnx and
SAM 2's v_enc.onnx, v_dec.onnx, v_menc.onnx, v_matt.onnx. OUT.npz gets, for each part, its arrays (masks, scores,
embeddings) and a JSON record (the machine, the versions, each part's seconds, the bad-input answers). Only the
runtime install is needed (onnxruntime, numpy, pillow, onnx, click): nothing here imports torch.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ({"point_coords": [[100, 80]], "point_labels": [1], "multimask_output": True},
           {"point_coords": [[60, 50], [200, 150]], "point_labels": [1, 0], "multimask_output": False},
           {"box": [40, 30, 260, 200], "multimask_output": False})


def sam_predictor(files: Path, image: np.ndarray, out: dict) -> None:
    from vitdeploy.runtime import SamPredictor

    predictor = SamPredictor(str(files / "sam_enc.onnx"), str(files / "sam_dec.onnx"), runtime="onnxruntime", threads=1)
    predictor.set_image(image)
    out["sam_embedding"] = predictor.get_image_embedding()
    for k, prompt in enumerate(PROMPTS):
        masks, scores, _ = predictor.predict(
            np.array(prompt["point_coords"], float) if "point_coords" in prompt else None,
            np.array(prompt["point_labels"]) if "point_labels" in prompt else None,
            np.array(prompt["box"], float) if "box" in prompt else None, multimask_output=prompt["multimask_output"])
        out[f"sam_masks_{k}"], out[f"sam_scores_{k}"] = masks, scores


def openvino(files: Path, image: np.ndarray, out: dict, record: dict) -> None:
    """OpenVINO's CPU plugin (its Arm plugin on aarch64): the SAM predictor with the encoder on it in f32 and the decoder
    on ONNX Runtime; the decoder on both runtimes on the same seeded inputs (their outputs' cosine); what the first-use
    probe decides for the decoder; and what an FP16 policy does to the encoder (its read-back precision, or its error
    in one line)."""
    from vitdeploy.metadata import read_onnx_metadata
    from vitdeploy.parity import compare
    from vitdeploy.runtime import SamPredictor, open_runner
    from vitdeploy.runtime.deploy.probe import probe

    predictor = SamPredictor(open_runner(str(files / "sam_enc.onnx"), runtime="openvino", threads=1),
                             open_runner(str(files / "sam_dec.onnx"), runtime="onnxruntime", threads=1))
    predictor.set_image(image)
    out["openvino_embedding"] = predictor.get_image_embedding()
    masks, scores, _ = predictor.predict(np.array(PROMPTS[0]["point_coords"], float), np.array(PROMPTS[0]["point_labels"]),
                                         multimask_output=True)
    out["openvino_masks"], out["openvino_scores"] = masks, scores
    decoders = [open_runner(str(files / "sam_dec.onnx"), runtime=name, threads=1) for name in ("onnxruntime", "openvino")]
    rng = np.random.default_rng(0)
    feeds = {"image_embeddings": rng.standard_normal(out["openvino_embedding"].shape).astype(np.float32),
             "point_coords": np.array([[[10.0, 20.0], [40.0, 30.0]]], np.float32),
             "point_labels": np.array([[1.0, 0.0]], np.float32),
             "mask_input": np.zeros((1, 1, 64, 64), np.float32), "has_mask_input": np.zeros((1,), np.float32)}
    ran = [runner.run(feeds) for runner in decoders]
    record["openvino_decoder_cosine"] = {name: compare(ran[0][name], ran[1][name]).cosine for name in ran[0]}
    decided = probe(files / "sam_dec.onnx", read_onnx_metadata(files / "sam_dec.onnx"), threads=1, isolate=True)
    record["decoder_probe"] = {"chosen": decided.chosen.label(), "timings": [t.to_dict() for t in decided.timings]}
    try:
        fp16 = SamPredictor(str(files / "sam_enc.onnx"), str(files / "sam_dec.onnx"), runtime="openvino", threads=1,
                            inference_precision="fp16")
        fp16.set_image(image)
        out["openvino_fp16_embedding"] = fp16.get_image_embedding()
        record["openvino_fp16"] = f"ran in {fp16.encoder.inference_precision}"
    except Exception as exc:  # noqa: BLE001 - the plugin's own answer is the finding
        record["openvino_fp16"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"


def mask_generator(files: Path, image: np.ndarray, out: dict) -> None:
    from vitdeploy.runtime import SamAutomaticMaskGenerator, SamPredictor

    predictor = SamPredictor(str(files / "sam_enc.onnx"), str(files / "sam_dec.onnx"), runtime="onnxruntime", threads=1)
    # thresholds off: random weights give no mask the official thresholds keep, and the masks are what is compared
    records = SamAutomaticMaskGenerator(predictor, points_per_side=4, pred_iou_thresh=0.0, stability_score_thresh=0.0,
                                        box_nms_thresh=1.0).generate(image)
    out["amg_masks"] = np.stack([r["segmentation"] for r in records]) if records else np.zeros((0, *image.shape[:2]), bool)
    out["amg_iou"] = np.array([r["predicted_iou"] for r in records], np.float32)


def video(files: Path, out: dict) -> None:
    from PIL import Image, ImageDraw

    from vitdeploy.runtime import Sam2VideoPredictor

    with tempfile.TemporaryDirectory() as clip:
        for t in range(3):  # three frames: the prompted one and two tracked (each is ~2 min of four graphs under qemu)
            frame = Image.new("RGB", (160, 120), (90, 110, 80))
            ImageDraw.Draw(frame).ellipse([10 + 16 * t, 40, 50 + 16 * t, 80], fill=(220, 40, 40))
            frame.save(f"{clip}/{t:05d}.png")
        # fill_hole_area=0: hole filling needs SciPy, which the runtime install does not hold (the same arithmetic on both)
        predictor = Sam2VideoPredictor(*(str(files / f"v_{n}.onnx") for n in ("enc", "dec", "menc", "matt")),
                                       runtime="onnxruntime", threads=1, fill_hole_area=0)
        state = predictor.init_state(video_path=clip)
        predictor.add_new_points_or_box(inference_state=state, frame_idx=0, obj_id=1,
                                        points=np.array([[30, 60]], np.float32), labels=np.array([1], np.int32))
        logits = {}
        for frame_idx, _, mask_logits in predictor.propagate_in_video(state):
            logits[frame_idx] = np.asarray(mask_logits)
    out["video_masks"] = np.stack([logits[k] > 0 for k in sorted(logits)])
    out["video_logits"] = np.stack([logits[k] for k in sorted(logits)]).astype(np.float32)


def dataset_job(files: Path, out: dict) -> None:
    with tempfile.TemporaryDirectory() as folder:
        # 2 of the bundled 16, one per shard: each image is ~16 s of ONNX Runtime under qemu
        images = sorted((ROOT / "calibration" / "images").glob("calib_*"))[:2]
        Path(folder, "images.txt").write_text("".join(f"{p}\n" for p in images))
        done = subprocess.run([sys.executable, "-m", "vitdeploy", "embed", "-e", str(files / "sam_enc.onnx"),
                               "--images", f"{folder}/images.txt", "--out-dir", f"{folder}/job",
                               "--shard-size", "1", "--threads", "1", "--runtime", "onnxruntime"],
                              capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"embed exited {done.returncode}: {done.stderr[-500:]}")
        shards = sorted(Path(folder, "job").glob("embeddings-*.npz"))
        out["job_embeddings"] = np.concatenate([np.load(s)["embedding"] for s in shards])
        out["job_images"] = np.array([str(p) for s in shards for p in np.load(s)["image"]])


def bad_inputs(files: Path, record: dict) -> None:
    """Each verb's answer to a bad input: exit code and the one line it printed (the same on every machine)."""
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "photo.jpg").write_text("not an image")
        cases = {"not an image": ["predict", "-e", str(files / "sam_enc.onnx"), "-d", str(files / "sam_dec.onnx"),
                                  "-i", f"{folder}/photo.jpg", "--point", "1,1", "-o", f"{folder}/m.png"],
                 "missing model": ["predict", "-e", f"{folder}/none.onnx", "-d", str(files / "sam_dec.onnx"),
                                   "-i", str(ROOT / "calibration" / "images" / "calib_00_landscape.jpg"),
                                   "--point", "1,1", "-o", f"{folder}/m.png"],
                 "decoder as encoder": ["predict", "-e", str(files / "sam_dec.onnx"), "-d", str(files / "sam_dec.onnx"),
                                        "-i", str(ROOT / "calibration" / "images" / "calib_00_landscape.jpg"),
                                        "--point", "1,1", "-o", f"{folder}/m.png"]}
        answers = {}
        for name, args in cases.items():
            done = subprocess.run([sys.executable, "-m", "vitdeploy", *args], capture_output=True, text=True, timeout=600)
            # vitdeploy's own line (the runtime's native warnings, e.g. ONNX Runtime's cpuinfo under qemu, left aside)
            ours = [line for line in done.stderr.splitlines() if line.startswith("error:")]
            answers[name] = {"exit": done.returncode, "error": ours[-1].replace(folder, "TMP") if ours else None,
                             "traceback": "Traceback" in done.stderr,
                             "wrote": sorted(p.name for p in Path(folder).iterdir() if p.name != "photo.jpg")}
        record["bad_inputs"] = answers


def main() -> int:
    files, target = Path(sys.argv[1]), Path(sys.argv[2])
    import onnxruntime

    from vitdeploy.cpu_features import cpu_features
    from vitdeploy.runtime import read_image_rgb

    image = read_image_rgb(str(ROOT / "calibration" / "images" / "calib_00_landscape.jpg"))
    record = {"machine": platform.machine(), "python": platform.python_version(), "onnxruntime": onnxruntime.__version__,
              "numpy": np.__version__, "cpu": cpu_features().summary(), "seconds": {}, "errors": {}}
    arrays: dict = {}
    parts = {"sam_predictor": lambda: sam_predictor(files, image, arrays),
             "openvino": lambda: openvino(files, image, arrays, record),
             "mask_generator": lambda: mask_generator(files, image, arrays),
             "video": lambda: video(files, arrays), "dataset_job": lambda: dataset_job(files, arrays),
             "bad_inputs": lambda: bad_inputs(files, record)}
    only = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else set(parts)
    for name, run in parts.items():
        if name not in only:
            continue
        start = time.perf_counter()
        try:
            run()
        except Exception as exc:  # recorded and compared: a part that fails on one machine is a finding
            record["errors"][name] = f"{type(exc).__name__}: {exc}"
        record["seconds"][name] = round(time.perf_counter() - start, 1)
        print(f"{name}: {record['seconds'][name]} s" + (f" ({record['errors'][name]})" if name in record["errors"] else ""),
              flush=True)
    np.savez_compressed(target, record=np.array(json.dumps(record)), **arrays)
    return 1 if record["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
