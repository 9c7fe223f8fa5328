"""``Sam3Processor.set_concept_prompt`` (a text and exemplar boxes in one detector run) against the official call
sequence it replaces (``set_text_prompt``, then ``add_geometric_prompt`` per box: a detector run each), on the same
image state and files, alternated over rounds; the arrays must be equal.

    python benchmarks/bench_sam3_concept_prompt.py --dir DIR   # DIR/sam3.onnx, sam3_text.onnx, sam3_detector.onnx
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--image", default="calib_00_landscape.jpg", help="a bundled image")
    parser.add_argument("--boxes", type=int, default=1, help="exemplar boxes besides the text")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from vitdeploy.precision.calibration_data import bundled_calibration_dir
    from vitdeploy.runtime.apps.sam3.processor import Sam3ImageModel, Sam3Processor
    from vitdeploy.runtime.processing.images import read_image_rgb

    d = args.dir.rstrip("/") + "/"
    model = Sam3ImageModel(d + "sam3.onnx", d + "sam3_text.onnx", d + "sam3_detector.onnx", runtime="onnxruntime",
                           threads=args.threads)
    processor = Sam3Processor(model, confidence_threshold=0.0)
    state = processor.set_image(read_image_rgb(bundled_calibration_dir() / args.image))
    model.encode_text("a person")  # the text's features kept: both ways time the detector runs
    boxes = [[0.3 + 0.1 * k, 0.5, 0.2, 0.3] for k in range(args.boxes)]
    for k in range(args.rounds):
        start = time.perf_counter()
        processor.set_text_prompt(state=state, prompt="a person")
        for box in boxes:
            processor.add_geometric_prompt(box, True, state)
        calls = time.perf_counter() - start
        want = {key: state[key].copy() for key in ("scores", "boxes", "masks_logits")}
        processor.reset_all_prompts(state)
        start = time.perf_counter()
        got = processor.set_concept_prompt(state, "a person", boxes, [True] * len(boxes))
        one = time.perf_counter() - start
        same = all(np.array_equal(want[key], got[key]) for key in want)
        processor.reset_all_prompts(state)
        print(f"round {k}: set_text_prompt + {len(boxes)} add_geometric_prompt {calls * 1e3:.0f} ms, "
              f"set_concept_prompt {one * 1e3:.0f} ms ({one / calls:.3f}x), the same arrays: {same}")


if __name__ == "__main__":
    main()
