"""SAM 3's concept prompts over HTTP against the same prompts in process: what a request costs on a server.

Starts ``vitdeploy serve`` (one process, ``--runtime``, ``--threads``) on SAM 3's four files and times, over real HTTP
on 127.0.0.1, for one bundled image: the upload (the vision encoder for clicks), a click, the first concept prompt
of the image (the vision encoder again, Sam3Processor's transform, + text encoder + detector), a second text, a text
with an exemplar box, and the first text again (its features kept). Then the same concept prompts through
``Sam3Processor`` in this process on the same files and runtime (``set_image`` once, ``set_concept_prompt`` each),
side by side. The server's peak RSS is read from /proc.

    python benchmarks/bench_serve_concepts.py --dir DIR   # DIR/sam3.onnx, sam3_text.onnx, sam3_detector.onnx,
                                                           # sam3_interactive.onnx (vitdeploy export -r sam3 ...)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

PROMPTS = ({"text": "yellow school bus"}, {"text": "a person"},
           {"text": "a person", "boxes": [[60, 40, 250, 200]]}, {"text": "yellow school bus"})


def _post(url: str, body: bytes | dict) -> tuple[float, dict]:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    start = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=600) as answer:
        parsed = json.load(answer)
    return (time.perf_counter() - start) * 1e3, parsed


def _peak_rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+)", text).group(1)) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--image", default="calib_00_landscape.jpg", help="a bundled image")
    parser.add_argument("--runtime", default="onnxruntime")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from vitdeploy.precision.calibration_data import bundled_calibration_dir

    d = Path(args.dir)
    image_path = bundled_calibration_dir() / args.image
    command = [sys.executable, "-m", "vitdeploy", "serve", "-e", str(d / "sam3.onnx"), "-d", str(d / "sam3_interactive.onnx"),
               "--text-encoder", str(d / "sam3_text.onnx"), "--detector", str(d / "sam3_detector.onnx"), "--port", "0",
               "--runtime", args.runtime, "--threads", str(args.threads)]
    start = time.perf_counter()
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rows: list[tuple[str, float, str]] = []
    try:
        port = None
        for line in server.stdout:  # type: ignore[union-attr]
            found = re.search(r"127\.0\.0\.1:(\d+)", line)
            if found and "serving" in line:
                port = int(found.group(1))
                break
        if port is None:
            raise SystemExit("the server did not start")
        rows.append(("server start (open 4 files)", (time.perf_counter() - start) * 1e3, ""))
        base = f"http://127.0.0.1:{port}"
        ms, created = _post(f"{base}/v1/embeddings", image_path.read_bytes())
        rows.append(("POST /v1/embeddings (vision encoder, clicks' transform)", ms, ""))
        height, width = created["height"], created["width"]
        ms, answer = _post(f"{base}/v1/embeddings/{created['id']}/masks", {"points": [[width // 2, height // 2]]})
        rows.append(("POST masks, one click", ms, f"{len(answer['results'][0]['masks'])} masks"))
        http: list[float] = []
        for k, prompt in enumerate(PROMPTS):
            ms, answer = _post(f"{base}/v1/embeddings/{created['id']}/concepts", {**prompt, "confidence_threshold": 0.0})
            http.append(ms)
            what = "first concept prompt (+ vision encoder again)" if k == 0 else "concept prompt"
            rows.append((f"POST concepts {json.dumps(prompt)} - {what}", ms, f"{len(answer['instances'])} instances"))
        rss = _peak_rss_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=60)

    from vitdeploy.runtime.apps.sam3.concept import ConceptPrompt, prompt_instances
    from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor
    from vitdeploy.runtime.processing.images import read_image_rgb

    model = Sam3ImageModel(d / "sam3.onnx", d / "sam3_text.onnx", d / "sam3_detector.onnx", runtime=args.runtime,
                           threads=args.threads)
    processor = Sam3Processor(model, confidence_threshold=0.0)
    picture = read_image_rgb(image_path)
    start = time.perf_counter()
    state = processor.set_image(picture)
    rows.append(("in process: Sam3Processor.set_image", (time.perf_counter() - start) * 1e3, ""))
    for k, prompt in enumerate(PROMPTS):
        concept = ConceptPrompt(prompt["text"], tuple(tuple(b) for b in prompt.get("boxes", ())),
                                (True,) * len(prompt.get("boxes", ())))
        start = time.perf_counter()
        prompt_instances(processor, state, concept)
        ms = (time.perf_counter() - start) * 1e3
        rows.append((f"in process: set_concept_prompt {json.dumps(prompt)}", ms,
                     f"HTTP/in-process {http[k] / ms:.2f}x" if k else "HTTP includes the vision encoder"))
    print(f"{'what':<92} {'ms':>9}  note")
    for what, ms, note in rows:
        print(f"{what:<92} {ms:>9.1f}  {note}")
    print(f"server peak RSS {rss:.0f} MB; {args.runtime}, {args.threads} thread(s), image {args.image}")


if __name__ == "__main__":
    main()
