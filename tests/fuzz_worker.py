"""The fuzz test's worker: seeded mutations of vitdeploy's files through the real CLI verbs, in one process.

Run by tests/test_fuzz.py as ``python tests/fuzz_worker.py WORKDIR SEED COUNTS_JSON``. Before each case it
appends the case's name to WORKDIR/progress.txt, so a death by signal or a hang names the case that caused
it; after each case it appends a JSON line (case, exit code, the first error line, whether a traceback or "a
vitdeploy bug" appeared) to WORKDIR/results.jsonl.
"""

from __future__ import annotations

import io
import json
import random
import sys
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vitdeploy.cli import cli  # noqa: E402

IMAGE = ROOT / "calibration" / "images" / "calib_00_landscape.jpg"
JUNK_VALUES = [None, "", "x", -1, 0, 1e308, [], {}, [1], [1, 2], ["a", "b", "c"], True, "[1, 2", {"a": 1}, "nan", 2**70]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=True)
    text = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        text += f"\nTraceback (uncaught {type(result.exception).__name__}: {result.exception})"
    return result.exit_code, text


def flip_bytes(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    kind = rng.random()
    if kind < 0.2:
        return bytes(out[: rng.randrange(1, len(out))])  # truncated
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def set_metadata(source: Path, target: Path, key: str, value: object) -> None:
    import onnx

    model = onnx.load(str(source), load_external_data=False)
    props = {p.key: p.value for p in model.metadata_props}
    props[f"vitdeploy.{key}"] = value if isinstance(value, str) else json.dumps(value)
    del model.metadata_props[:]
    for k, v in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    onnx.save(model, str(target))


def main() -> None:
    work, seed, counts = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    rng = random.Random(seed)
    progress = open(work / "progress.txt", "a", buffering=1)
    results = open(work / "results.jsonl", "a", buffering=1)
    enc, dec, plan = work / "enc.onnx", work / "dec.onnx", work / "enc.plan"
    predict = ["predict", "-e", None, "-d", str(dec), "-i", str(IMAGE), "--point", "20,20", "-o", str(work / "m.png"), "--force"]

    def case(name: str, *args: str) -> None:
        progress.write(name + "\n")
        code, text = invoke(*args)
        errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
        results.write(json.dumps({"case": name, "exit": code, "error": errors[0] if errors else "",
                                  "traceback": "Traceback" in text, "bug": "a vitdeploy bug" in text}) + "\n")

    enc_bytes, plan_bytes, side_text = enc.read_bytes(), plan.read_bytes(), Path(str(plan) + ".json").read_text()
    image_bytes = IMAGE.read_bytes()
    verbs = {"inspect": lambda p: ("inspect", str(p)),
             "validate": lambda p: ("validate", str(p), "--runs", "0", "--random-inputs", "1"),
             "predict": lambda p: tuple(str(p) if a is None else a for a in predict)}
    for i in range(counts["onnx"]):  # byte-flipped and truncated ONNX files
        path = work / f"flip_{i}.onnx"
        path.write_bytes(flip_bytes(enc_bytes, rng))
        verb = ("inspect", "validate", "predict")[i % 3]
        case(f"onnx flip {i} -> {verb}", *verbs[verb](path))
    for i in range(counts["metadata"]):  # metadata values of the wrong type or contradicting the graph
        path = work / f"meta_{i}.onnx"
        key = rng.choice(["family", "variant", "input_size", "pixel_mean", "pixel_std", "precision", "architecture",
                          "random_weights", "random_seed", "input_name", "output_name", "target"])
        value = rng.choice(JUNK_VALUES + [[128, 128], [64], "fp64", "sam_mask_decoder"])
        set_metadata(enc, path, key, value)
        verb = ("inspect", "validate", "predict")[i % 3]
        case(f"metadata {key}={json.dumps(value)} -> {verb}", *verbs[verb](path))
    for i in range(counts["sidecar"]):  # sidecars with fields removed or of another type, and plans flipped
        target = work / f"side_{i}.plan"
        data = json.loads(side_text)
        section = rng.choice(["plan", "tensorrt", "gpu", "metadata", "precision", "io", "profiles", "schema", "layers"])
        if rng.random() < 0.3:
            data.pop(section, None)
        elif isinstance(data.get(section), dict) and data[section] and rng.random() < 0.6:
            data[section][rng.choice(list(data[section]))] = rng.choice(JUNK_VALUES)
        else:
            data[section] = rng.choice(JUNK_VALUES)
        text = json.dumps(data) if rng.random() < 0.9 else side_text[: rng.randrange(len(side_text))]
        target.write_bytes(flip_bytes(plan_bytes, rng) if rng.random() < 0.3 else plan_bytes)
        Path(str(target) + ".json").write_text(text)
        case(f"sidecar {section} -> inspect", "inspect", str(target))
    for i in range(counts["image"]):  # damaged images through predict
        path = work / f"img_{i}{rng.choice(['.jpg', '.png'])}"
        if path.suffix == ".png":
            from PIL import Image

            buffer = io.BytesIO()
            Image.open(IMAGE).convert("RGB").resize((96, 64)).save(buffer, format="PNG")
            data = buffer.getvalue()
        else:
            data = image_bytes
        path.write_bytes(flip_bytes(data, rng))
        args = list(verbs["predict"](enc))
        args[args.index("-i") + 1] = str(path)
        case(f"image flip {i} ({path.suffix}) -> predict", *args)
    fuzz_profiles(work, rng, counts.get("profile", 0), case, list(verbs["predict"](enc)))
    sam2 = json.loads((work / "sam2.json").read_text()) if (work / "sam2.json").is_file() else None
    if sam2:
        fuzz_sam2(work, rng, counts.get("sam2", 0), counts.get("frames", 0), case, sam2)
    fuzz_image_lists(work, rng, counts.get("list", 0), case, enc)
    progress.write("DONE\n")


def fuzz_profiles(work: Path, rng: random.Random, count: int, case, predict: list[str]) -> None:
    """Deployment profiles beside a copy of the encoder, one field removed or of another type, through predict."""
    import shutil

    from vitdeploy.runtime.deploy.identity import machine_fingerprint, model_digest, runtime_versions
    from vitdeploy.runtime.deploy.profiles import PROFILE_FORMAT, profile_path

    chosen = {"runtime": "onnxruntime", "precision": "file", "threads": 1, "settings": {}}
    for i in range(count):
        folder = work / f"profile_{i}"
        folder.mkdir(exist_ok=True)
        model = Path(shutil.copy(work / "enc.onnx", folder / "enc.onnx"))
        data = {"format": PROFILE_FORMAT, "model_sha256": model_digest(model), "machine": machine_fingerprint(),
                "runtime_versions": runtime_versions(), "chosen": dict(chosen),
                "candidates": [{"deployment": dict(chosen), "passed": True, "ms": 10.0}]}
        where = rng.choice(["format", "model_sha256", "machine", "runtime_versions", "chosen", "candidates",
                            "chosen.runtime", "chosen.precision", "chosen.threads", "chosen.settings", "machine.flags",
                            "machine.cores", "candidates.passed"])
        value = rng.choice(JUNK_VALUES + [256, "openvino", "bf16", {"gelu_apart": "yes"}, {"session_config": {}}])
        head, _, tail = where.partition(".")
        if tail == "passed":
            data["candidates"][0]["passed"] = value
        elif tail:
            data[head][tail] = value
        elif rng.random() < 0.3:
            data.pop(head)
        else:
            data[head] = value
        text = json.dumps(data)
        profile_path(model).write_text(text if rng.random() < 0.9 else text[: rng.randrange(len(text))])
        args = list(predict)
        args[args.index("-e") + 1] = str(model)
        case(f"profile {where}={json.dumps(value)[:40]} -> predict", *args)


def fuzz_sam2(work: Path, rng: random.Random, count: int, frame_count: int, case, files: dict[str, str]) -> None:
    """SAM 2 decoders with metadata values of the wrong type, and damaged frame folders, through track."""
    import shutil

    import numpy as np
    from PIL import Image

    clip = work / "clip"
    clip.mkdir(exist_ok=True)
    pixels = np.random.default_rng(rng.randrange(2**32))
    for t in range(3):
        Image.fromarray(pixels.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(clip / f"{t:05d}.jpg")

    def track(name: str, decoder: str, frames: Path) -> None:
        case(name, "track", "-e", files["encoder"], "-d", decoder, "-m", files["memory_encoder"], "-a",
             files["memory_attention"], "-i", str(frames), "--point", "0:1:20,20", "-o", str(work / "tracks"), "--force",
             "--no-overlay", "--max-frames", "1", "--direction", "forward", "--threads", "1")

    for i in range(count):
        path = work / f"sam2_dec_{i}.onnx"
        key = rng.choice(["dynamic_multimask_via_stability", "dynamic_multimask_stability_delta",
                          "dynamic_multimask_stability_thresh", "mask_input_size", "image_embedding_size", "embed_dim",
                          "input_size", "pixel_mean", "family", "architecture"])
        value = rng.choice(JUNK_VALUES + [[8, 8], [1024, 1024], "sam_mask_decoder"])
        set_metadata(Path(files["decoder"]), path, key, value)
        track(f"sam2 decoder {key}={json.dumps(value)[:40]} -> track", str(path), clip)
    for i in range(frame_count):
        frames = work / f"frames_{i}"
        shutil.rmtree(frames, ignore_errors=True)
        shutil.copytree(clip, frames)
        kind = rng.choice(["gap", "name", "dir", "empty", "size", "flip", "none", "link"])
        victim = frames / "00001.jpg"
        if kind == "gap":
            victim.unlink()
        elif kind == "name":
            victim.rename(frames / "frame_a.jpg")
        elif kind == "dir":
            victim.unlink()
            victim.mkdir()
        elif kind == "empty":
            victim.write_bytes(b"")
        elif kind == "size":
            Image.new("RGB", (20, 30)).save(victim)
        elif kind == "flip":
            victim.write_bytes(flip_bytes(victim.read_bytes(), rng))
        elif kind == "none":
            for f in frames.iterdir():
                f.unlink()
        else:
            victim.unlink()
            victim.symlink_to(frames / "no_such.jpg")
        track(f"frames {kind} {i} -> track", files["decoder"], frames)


def fuzz_image_lists(work: Path, rng: random.Random, count: int, case, enc: Path) -> None:
    """Image lists (.txt) holding missing files, folders, devices, blank and binary lines, through embed."""
    good = str(IMAGE)
    junk = ["", "   ", "/dev/zero", "/dev/null", str(work), str(work / "missing.jpg"), "\x00\xff", "a" * 5000, good + "x",
            "#" + good, str(work / "enc.onnx"), "~/nothing.png", "*.jpg"]
    for i in range(count):
        lines = [good] + [rng.choice(junk) for _ in range(rng.randint(1, 4))]
        rng.shuffle(lines)
        listing = work / f"list_{i}.txt"
        listing.write_text("\n".join(lines) + "\n", errors="surrogateescape")
        case(f"list {i} -> embed", "embed", "-e", str(enc), "--images", str(listing), "--out-dir", str(work / f"emb_{i}"),
             "--threads", "1", "--runtime", "onnxruntime")


if __name__ == "__main__":
    main()
