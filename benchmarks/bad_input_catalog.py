"""The catalog of bad inputs and faults a new user meets (issue 14), re-run through the real CLI.

Every case is one ``vitdeploy`` command in a fresh process, as a user types it, on tiny artifacts this
script makes first (``sam_tiny`` + ``sam_tiny_decoder``, random weights). For each case it records the
exit code, the first line the user reads, whether a traceback leaked, whether an output file was left
behind where none should be, the check the case exists for, and the wall time (median of ``--runs``,
fresh process each run). ``doctor`` is timed the same way. Writes a Markdown table and a JSON report.

Usage:
    .venv/bin/python benchmarks/bad_input_catalog.py --runs 5 --out out/bad_inputs.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "calibration" / "images" / "calib_00_landscape.jpg"


def vitdeploy_command() -> list[str]:
    script = Path(sys.executable).with_name("vitdeploy")
    return [str(script)] if script.exists() else [sys.executable, "-m", "vitdeploy"]


@dataclass
class Case:
    name: str
    args: list[str]
    exit_code: int  # what a correct answer exits with
    says: str  # words the output must contain
    absent: list[str] = field(default_factory=list)  # files that must not exist afterwards
    check: Callable[[Path], str | None] | None = None  # extra check after the run: None when it holds
    setup: Callable[[Path], None] | None = None  # what to put in place before the run
    timed: bool = True  # median of --runs (False: one run, for the cases that do real work)
    issue_item: str = ""
    interrupt: int | None = None  # send this signal once the run's staging folder exists (a killed export)


def run_interrupted(args: list[str], cwd: Path, signum: int) -> tuple[int, str, float]:
    """``run_once``, with ``signum`` sent as soon as the export's staging folder exists (what kill/timeout do)."""
    import signal as _signal

    env = dict(os.environ, PYTHONWARNINGS="ignore::DeprecationWarning", COLUMNS="200")
    start = time.perf_counter()
    proc = subprocess.Popen([*vitdeploy_command(), *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    while not list(cwd.glob(".vitdeploy-export-*")) and proc.poll() is None and time.perf_counter() - start < 300:
        time.sleep(0.05)
    proc.send_signal(_signal.Signals(signum))
    out, _ = proc.communicate()
    return proc.returncode, out.strip(), time.perf_counter() - start


def run_once(args: list[str], cwd: Path) -> tuple[int, str, float]:
    env = dict(os.environ, PYTHONWARNINGS="ignore::DeprecationWarning", COLUMNS="200")
    start = time.perf_counter()
    done = subprocess.run([*vitdeploy_command(), *args], cwd=cwd, capture_output=True, text=True, env=env)
    return done.returncode, (done.stderr + "\n" + done.stdout).strip(), time.perf_counter() - start


def first_line(output: str) -> str:
    """The line a user reads first: the error line where there is one (click's usage errors print the usage
    first), else the first line printed."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return next((line for line in lines if line.lower().startswith("error:")), lines[0] if lines else "")


def make_fixtures(work: Path) -> None:
    """The tiny artifacts and the broken files the cases use."""
    import torch

    def ok(args):
        code, out, _ = run_once(args, work)
        if code != 0:
            raise SystemExit(f"setup failed: vitdeploy {' '.join(args)}\n{out}")

    ok(["export", "-r", "sam_tiny", "--random-weights", "-o", "tiny.onnx"])
    ok(["export", "-r", "sam_tiny_decoder", "--random-weights", "-o", "tiny_decoder.onnx"])
    ok(["export", "-r", "sam_tiny_decoder", "--random-weights", "--seed", "1", "-o", "other_decoder.onnx"])
    # a model whose weights live in a .data file, then the .data file lost
    from vitdeploy.models.sam_encoder import SamEncoderArch, load_sam_image_encoder
    from vitdeploy.onnx_export.sam_encoder import export_sam_image_encoder

    arch = SamEncoderArch(img_size=64, embed_dim=32, depth=2, num_heads=2, out_chans=16, window_size=2, global_attn_indexes=(1,))
    lost = export_sam_image_encoder(load_sam_image_encoder(arch, random_seed=0), work / "lost_data.onnx", external_data=True)
    lost.external_data.unlink()

    (work / "empty.onnx").write_bytes(b"")
    (work / "photo.onnx").write_bytes(IMAGE.read_bytes())  # a JPEG named .onnx
    (work / "notes.jpg").write_text("these are not pixels\n")
    (work / "empty.png").write_bytes(b"")
    (work / "a_file").write_text("x")
    (work / "precious.onnx").write_bytes(b"precious")
    (work / "no_photos").mkdir()
    rng = np.random.default_rng(0)
    (work / "noise.pth").write_bytes(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    torch.save({"w": torch.zeros(2), "f": os.getcwd}, work / "evil.pth")
    torch.save({"w": torch.zeros(3)}, work / "unrelated.pth")
    # an official encoder of another architecture (embed_dim 96 where the recipe says 64)
    wide = SamEncoderArch(img_size=256, patch_size=16, embed_dim=96, depth=4, num_heads=4, out_chans=32, window_size=6,
                          global_attn_indexes=(1, 3))
    torch.save({f"image_encoder.{k}": v for k, v in load_sam_image_encoder(wide, random_seed=0).state_dict().items()},
               work / "wide.pth")
    from safetensors.torch import save_file

    patch8 = SamEncoderArch(img_size=256, patch_size=8, embed_dim=64, depth=4, num_heads=4, out_chans=32, window_size=6,
                            global_attn_indexes=(1, 3))
    save_file({f"image_encoder.{k}": v.contiguous() for k, v in load_sam_image_encoder(patch8, random_seed=0).state_dict().items()},
              str(work / "patch8.safetensors"))
    recipe = (ROOT / "export" / "sam_tiny.toml").read_text().replace("depth = 4", 'depth = "four"')
    (work / "bad_recipe.toml").write_text(recipe)
    # a 16-bit grayscale scan (values 1000..3000) and a portrait phone photo stored sideways (EXIF 6)
    Image.fromarray(np.linspace(1000, 3000, 240 * 320).reshape(240, 320).astype(np.uint16)).save(work / "scan16.png")
    sideways = np.asarray(Image.open(IMAGE).convert("RGB").resize((320, 240)))
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(sideways).save(work / "portrait.jpg", exif=exif, quality=92)
    for i in range(3):
        shutil.copy(IMAGE, work / "no_photos" / f"not_an_image_{i}.txt")
    # issue 36: a 108-megapixel photo, and a PNG of a few dozen bytes whose header claims 10 gigapixels
    y, x = np.mgrid[0:9000, 0:12000]
    Image.fromarray(np.stack([x % 256, y % 256, (x + y) % 256], -1).astype(np.uint8)).save(work / "photo108.jpg", quality=80)
    del x, y
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    (work / "bomb.png").write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0))
                                    + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))
    ok(["build-engine", "tiny.onnx", "-o", "rtx.plan", "--builder", "tensorrt-rtx"])


def plant_live_lock(work: Path) -> None:
    """Another live vitdeploy process writes busy.onnx (this catalog's own pid stands for it)."""
    (work / ".busy.onnx.vitdeploy-lock").write_text(str(os.getpid()))


def no_staging_or_lock(work: Path) -> str | None:
    left = [p.name for p in work.glob(".vitdeploy-*")] + [p.name for p in work.glob("killed*")]
    return None if not left else f"left behind: {left}"


def stale_dirs_removed(work: Path) -> str | None:
    left = list(work.glob(".vitdeploy-export-*"))
    return None if not left else f"left behind: {[p.name for p in left]}"


def plant_stale_export_dir(work: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = work / f".vitdeploy-export-{gone.pid}-killed"
    stale.mkdir(exist_ok=True)
    (stale / "raw.onnx").write_bytes(b"partial")


def mask_is_portrait(work: Path) -> str | None:
    size = Image.open(work / "portrait_mask.png").size
    return None if size == (240, 320) else f"mask is {size}, the displayed photo is 240x320"


def cases() -> list[Case]:
    img = str(IMAGE)
    predict = ["predict", "-e", "tiny.onnx", "-d", "tiny_decoder.onnx"]
    return [
        # the issue's defects
        Case("16-bit grayscale PNG to predict", [*predict, "-i", "scan16.png", "--point", "100,80", "-o", "scan_mask.png", "--force"],
             0, "scaled to 8 bits", timed=False, issue_item="defect 1"),
        Case("two --box options", [*predict, "-i", img, "--box", "1,2,30,40", "--box", "5,6,70,80", "-o", "m.png"],
             2, "2 boxes given", absent=["m.png"], issue_item="defect 2"),
        Case("validate a random-weights export with an unrelated -c", ["validate", "tiny.onnx", "-c", "unrelated.pth"],
             1, "random weights", issue_item="defect 3"),
        Case("-o under /proc", ["export", "-r", "sam_tiny", "--random-weights", "-o", "/proc/m.onnx"],
             1, "cannot create files in '/proc'", issue_item="defect 4, 9"),
        Case("existing output, no --force", ["export", "-r", "sam_tiny", "--random-weights", "-o", "precious.onnx"],
             1, "already exists: pass --force", check=lambda w: None if (w / "precious.onnx").read_bytes() == b"precious" else "overwritten",
             issue_item="defect 5"),
        Case("calibrate --holdout 0 --min-images 1", ["calibrate", "tiny.onnx", "-p", "int8", "-o", "h0.onnx", "--holdout", "0",
                                                     "--min-images", "1", "--max-images", "1"],
             0, "none held out", timed=False, issue_item="defect 6"),
        Case("export after a killed export left .vitdeploy-export-*", ["export", "-r", "sam_tiny", "--random-weights", "-o",
                                                                      "after_kill.onnx", "--force"],
             0, "", check=stale_dirs_removed, setup=plant_stale_export_dir, timed=False, issue_item="defect 7"),
        Case("portrait JPEG (EXIF 6), click in displayed coordinates", [*predict, "-i", "portrait.jpg", "--point", "200,300",
                                                                       "-o", "portrait_mask.png", "--force"],
             0, "", check=mask_is_portrait, timed=False, issue_item="defect 8"),
        Case("zero-byte .onnx to validate", ["validate", "empty.onnx"], 1, "is empty (0 bytes)", issue_item="defect 9"),
        Case("recipe value of the wrong type", ["export", "-r", "bad_recipe.toml", "--random-weights", "-o", "r.onnx"],
             1, "must be an integer", absent=["r.onnx"], issue_item="defect 9"),
        # the issue's misleading words
        Case("random bytes as a .pth", ["export", "-r", "sam_tiny", "-c", "noise.pth", "-o", "n.onnx"],
             1, "corrupt", absent=["n.onnx"], issue_item="words"),
        Case(".safetensors with another patch size", ["export", "-r", "sam_tiny", "-c", "patch8.safetensors", "-o", "p.onnx"],
             1, "patch", absent=["p.onnx"], issue_item="words"),
        Case("-o under a regular file", ["export", "-r", "sam_tiny", "--random-weights", "-o", "a_file/m.onnx"],
             1, "is a file, not a directory", issue_item="words"),
        Case("--device cuda without a GPU", ["validate", "tiny.onnx", "--device", "cuda"], 1, "CUDAExecutionProvider",
             issue_item="words"),
        Case("missing .onnx.data to validate", ["validate", "lost_data.onnx"], 1, "which is missing", issue_item="words"),
        Case("missing .onnx.data to benchmark", ["benchmark", "lost_data.onnx", "--no-eager"], 1, "which is missing",
             issue_item="words"),
        Case("missing .onnx.data to predict", ["predict", "-e", "lost_data.onnx", "-d", "tiny_decoder.onnx", "-i", img,
                                               "--point", "1,1", "-o", "l.png"],
             1, "which is missing", absent=["l.png"], issue_item="words"),
        # everyday mistakes and faults
        Case("unknown recipe", ["export", "-r", "sam_vit_q", "--random-weights", "-o", "x.onnx"], 1, "not found"),
        Case("missing checkpoint", ["export", "-r", "sam_tiny", "-c", "missing.pth", "-o", "x.onnx"], 1, "not found"),
        Case("pickle that would run code", ["export", "-r", "sam_tiny", "-c", "evil.pth", "-o", "e.onnx"],
             1, "run code", absent=["e.onnx"]),
        Case("checkpoint of another architecture", ["export", "-r", "sam_tiny", "-c", "wide.pth", "-o", "w.onnx"],
             1, "", absent=["w.onnx"]),
        Case("input size not a multiple of the patch", ["export", "-r", "sam_tiny", "--random-weights", "--input-size", "250",
                                                       "-o", "s.onnx"],
             1, "16", absent=["s.onnx"]),
        Case("missing ONNX to validate", ["validate", "missing.onnx"], 1, "not found"),
        Case("missing --load-inputs file", ["validate", "tiny.onnx", "--load-inputs", "missing.npz"], 1, "not found"),
        Case("missing --images folder to validate", ["validate", "tiny.onnx", "--images", "no_such_photos"], 1,
             "no_such_photos"),
        Case("decoder given to calibrate from images", ["calibrate", "tiny_decoder.onnx", "-p", "int8", "-o", "d8.onnx"], 1,
             "cannot be calibrated on RGB images", absent=["d8.onnx"]),
        Case("decoder to benchmark without --shapes", ["benchmark", "tiny_decoder.onnx", "--no-eager"], 1, "--shapes"),
        Case("a JPEG named .onnx", ["inspect", "photo.onnx"], 1, "is not a readable ONNX file"),
        Case("text file named .jpg to predict", [*predict, "-i", "notes.jpg", "--point", "1,1", "-o", "t.png"],
             1, "notes.jpg", absent=["t.png"]),
        Case("zero-byte image to predict", [*predict, "-i", "empty.png", "--point", "1,1", "-o", "z.png"],
             1, "empty.png", absent=["z.png"]),
        Case("click outside the image", [*predict, "-i", img, "--point", "5000,80", "-o", "o.png"], 1, "outside",
             absent=["o.png"]),
        Case("decoder from another export (seed 1)", ["predict", "-e", "tiny.onnx", "-d", "other_decoder.onnx", "-i", img,
                                                     "--point", "100,80", "-o", "d.png"],
             1, "", absent=["d.png"]),
        Case("decoder given as the encoder", ["predict", "-e", "tiny_decoder.onnx", "-d", "tiny.onnx", "-i", img,
                                              "--point", "100,80", "-o", "s.png"],
             1, "", absent=["s.png"]),
        Case("calibrate on a folder with no images", ["calibrate", "tiny.onnx", "-p", "int8", "-o", "c.onnx", "-i", "no_photos"],
             1, "image", absent=["c.onnx"]),
        # TensorRT (issue 35): TensorRT-RTX builds here; classic TensorRT and a GPU are missing
        Case("build-engine --builder tensorrt without classic TensorRT", ["build-engine", "tiny.onnx", "-o", "tiny.plan",
                                                                          "--builder", "tensorrt"],
             1, "needs the 'tensorrt' package", absent=["tiny.plan"], issue_item="issue 35"),
        Case("build-engine --timing-cache with TensorRT-RTX", ["build-engine", "tiny.onnx", "-o", "tc.plan", "--builder",
                                                                "tensorrt-rtx", "--timing-cache", "t.cache"],
             1, "--timing-cache has no effect", absent=["tc.plan", "t.cache"], issue_item="issue 35"),
        Case("validate a TensorRT-RTX engine without a GPU", ["validate", "rtx.plan"], 1, "runs only on an NVIDIA GPU",
             issue_item="issue 35"),
        # issue 36: edges a real client hits
        Case("reversed box", [*predict, "-i", img, "--box", "200,150,20,10", "-o", "rev.png"], 1, "x0 <= x1",
             absent=["rev.png"], issue_item="36 defect 3"),
        Case("SIGTERM during export", ["export", "-r", "sam_vit_b", "--random-weights", "--input-size", "512", "-o",
                                       "killed.onnx"],
             143, "stopped by SIGTERM", check=no_staging_or_lock, interrupt=15, timed=False, issue_item="36 defect 4"),
        Case("SIGINT during export", ["export", "-r", "sam_vit_b", "--random-weights", "--input-size", "512", "-o",
                                      "killed.onnx"],
             130, "stopped by SIGINT", check=no_staging_or_lock, interrupt=2, timed=False, issue_item="36 defect 4"),
        Case("export -o -", ["export", "-r", "sam_tiny", "--random-weights", "-o", "-"], 1, "'-' as an output path",
             absent=["-"], issue_item="36 defect 5"),
        Case("doctor --report -", ["doctor", "--report", "-"], 1, "'-' as an output path", absent=["-"],
             issue_item="36 defect 5"),
        Case("108-megapixel JPEG to predict", [*predict, "-i", "photo108.jpg", "--point", "100,100", "-o", "big.png",
                                               "--force"],
             0, "large image: 12000x9000 (108 megapixels)", timed=False, issue_item="36 defect 6"),
        Case("decompression bomb PNG to predict", [*predict, "-i", "bomb.png", "--point", "1,1", "-o", "bomb_mask.png"],
             1, "over this machine's limit", absent=["bomb_mask.png"], issue_item="36 defect 6"),
        Case("another vitdeploy writes the same -o", ["export", "-r", "sam_tiny", "--random-weights", "-o", "busy.onnx"],
             1, "is being written by another vitdeploy process", absent=["busy.onnx"], setup=plant_live_lock,
             issue_item="36 defect 7"),
        Case("doctor", ["doctor"], 0, "vitdeploy"),
    ]


def run_case(case: Case, work: Path, runs: int) -> dict:
    if case.setup is not None:
        case.setup(work)
    times, code, out = [], None, ""
    for _ in range(runs if case.timed else 1):
        if case.interrupt is not None:
            code, out, seconds = run_interrupted(case.args, work, case.interrupt)
        else:
            code, out, seconds = run_once(case.args, work)
        times.append(seconds)
    problems = []
    if code != case.exit_code:
        problems.append(f"exit {code}, expected {case.exit_code}")
    if case.says and case.says.lower() not in out.lower():
        problems.append(f"the output does not say {case.says!r}")
    if "Traceback" in out:
        problems.append("traceback")
    if "a vitdeploy bug" in out:
        problems.append("called a vitdeploy bug")
    problems += [f"{name} was written" for name in case.absent if (work / name).exists()]
    if case.check is not None and (extra := case.check(work)):
        problems.append(extra)
    return {"case": case.name, "issue_item": case.issue_item, "command": "vitdeploy " + " ".join(case.args),
            "exit_code": code, "first_line": first_line(out), "median_s": statistics.median(times), "runs": len(times),
            "ok": not problems, "problems": problems}


def markdown(rows: list[dict]) -> str:
    lines = ["| case | exit | what the user reads first | median s (runs) | as it should be |", "|---|---:|---|---:|---|"]
    for r in rows:
        text = r["first_line"].replace("|", "\\|")[:150]
        lines.append(f"| {r['case']} | {r['exit_code']} | {text} | {r['median_s']:.2f} ({r['runs']}) | "
                     f"{'yes' if r['ok'] else 'NO: ' + '; '.join(r['problems'])} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs per quick case (the median is reported)")
    parser.add_argument("--out", type=Path, help="JSON report")
    parser.add_argument("--only", help="run the cases whose name contains this")
    args = parser.parse_args()
    from vitdeploy.cpu_features import cpu_features

    with tempfile.TemporaryDirectory(prefix="vitdeploy-bad-inputs-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        make_fixtures(work)
        print(f"fixtures made in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        rows = []
        for case in cases():
            if args.only and args.only not in case.name:
                continue
            rows.append(run_case(case, work, args.runs))
            print(f"{'ok ' if rows[-1]['ok'] else 'BAD'} {case.name}: exit {rows[-1]['exit_code']}, "
                  f"{rows[-1]['median_s']:.2f} s: {rows[-1]['first_line'][:110]}", file=sys.stderr)
    print(markdown(rows))
    cpu = cpu_features().summary()
    errors = [r["median_s"] for r in rows if r["exit_code"] != 0]
    timing = f"error answers: median {statistics.median(errors):.2f} s, slowest {max(errors):.2f} s; " if errors else ""
    print(f"\n{sum(r['ok'] for r in rows)} of {len(rows)} cases as they should be; {timing}CPU: {cpu}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": platform.machine(), "cpu": cpu, "runs": args.runs, "cases": rows},
                                       indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
