"""timm ViT-B/16 (224) and the SAM ViT-B prompt encoder + mask decoder (random weights): eager PyTorch vs
ONNX Runtime on vitdeploy's exports, one run, same thread count, contenders alternated round by round.

Contenders:
  vit_base_patch16_224    eager timm (fused attention, timm's default)   vs  ORT on the rewritten export
  SAM decoder, per prompt eager official PromptEncoder + MaskDecoder      vs  ORT on the decoder graph
                          (one click + padding point, all mask tokens; the embedding is given)
  SAM predict, per prompt official SamPredictor.predict                   vs  vitdeploy.runtime.SamPredictor.predict
                          (decoder + mask upscaling to a 1500x2250 original; the embedding is given), beside
                          the official export script's graph on ORT (SamOnnxModel: decoder + upscaling in
                          the graph, thresholded after) and vitdeploy's decoder graph alone (low-res masks)
                          then the two graphs once more, each alone under ONNX Runtime's profiler, and
                          each alone vs the two alternated, ONNX Runtime's thread spinning on and off
                          (does one session's spinning pool slow the other?)

Usage:
    .venv/bin/python benchmarks/bench_timm_and_decoder.py --threads 2 --rounds 10 --out out/bench_timm_decoder.json
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from benchmarks.options import write_report
from vitdeploy.metadata import tool_versions
from vitdeploy.runtime.backends.onnxruntime_runner import OnnxRuntimeRunner
from vitdeploy.validation.latency import stats_from_samples
from vitdeploy.validation.masks import compare_masks
from vitdeploy.parity import compare

ORIGINAL_SIZE = (1500, 2250)


def alternate(contenders: dict[str, Callable[[], object]], rounds: int, warmup: int, label: str) -> dict[str, list[float]]:
    for _ in range(warmup):
        for fn in contenders.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) * 1000)
    print(f"{label}: " + ", ".join(f"{n} median {np.median(s):.1f} ms" for n, s in samples.items()), flush=True)
    return samples


def eager_and_exported(recipe: str, path: Path, threads: int):
    """(the recipe's eager model with seeded weights, its export to ``path``, the export's seconds, an ONNX Runtime
    runner of it)."""
    from vitdeploy.pipeline import export_from_recipe, load_eager_from_recipe

    _, _, model = load_eager_from_recipe(recipe, None, True, 0)
    t0 = time.perf_counter()
    result = export_from_recipe(recipe, path, random_weights=True, seed=0)
    return model, result, time.perf_counter() - t0, OnnxRuntimeRunner(result.path, threads=threads)


def bench_timm(tmp: Path, threads: int, rounds: int, warmup: int) -> dict:
    model, result, export_s, ort = eager_and_exported("timm_vit_base_patch16_224", tmp / "vit_b16.onnx", threads)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    xt = torch.from_numpy(x)

    def eager() -> np.ndarray:
        with torch.inference_mode():
            return model(xt).numpy()

    contenders = {"eager timm": eager, "ORT vitdeploy export": lambda: ort.run({"image": x})["logits"]}
    parity = compare(eager(), contenders["ORT vitdeploy export"](), "fp32", label="logits")
    samples = alternate(contenders, rounds, warmup, "vit_base_patch16_224")
    return {"export_seconds": export_s, "parity": parity.to_dict(), **_rows(samples, "eager timm")}


def bench_decoder(tmp: Path, threads: int, rounds: int, warmup: int) -> dict:
    from segment_anything import SamPredictor as OfficialPredictor
    from segment_anything.modeling import Sam

    from vitdeploy.models.recipes import load_recipe
    from vitdeploy.models.sam_encoder import SamEncoderArch, build_sam_image_encoder
    from vitdeploy.onnx_export.sam_encoder import sam_encoder_metadata
    from vitdeploy.runtime.processing.preprocess import preprocess_shape
    from vitdeploy.runtime.apps.sam.predictor import SamPredictor

    decoder, result, export_s, ort = eager_and_exported("sam_vit_b_decoder", tmp / "sam_vit_b_decoder.onnx", threads)
    pe, md = decoder.prompt_encoder, decoder.mask_decoder
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((1, 256, 64, 64)).astype(np.float32)
    click = np.array([[[400.0, 300.0]]], dtype=np.float32)
    feeds = {"image_embeddings": emb, "point_coords": np.concatenate([click, np.zeros((1, 1, 2), np.float32)], 1),
             "point_labels": np.array([[1.0, -1.0]], np.float32), "mask_input": np.zeros((1, 1, 256, 256), np.float32),
             "has_mask_input": np.zeros(1, np.float32)}
    emb_t, click_t, label_t = torch.from_numpy(emb), torch.from_numpy(click), torch.tensor([[1]])

    def eager_decoder() -> np.ndarray:
        with torch.inference_mode():
            sparse, dense = pe(points=(click_t, label_t), boxes=None, masks=None)
            masks, _ = md.predict_masks(emb_t, pe.get_dense_pe(), sparse, dense)
            return masks.numpy()

    graph = {"eager official decoder": eager_decoder, "ORT decoder graph": lambda: ort.run(feeds)["low_res_masks"]}
    parity = compare(eager_decoder(), graph["ORT decoder graph"](), "fp32", label="low_res_masks")
    samples = alternate(graph, rounds, warmup, "SAM decoder per prompt")

    # End to end per prompt from a given embedding: the official predictor vs ours (the encoder is not run).
    arch = SamEncoderArch.from_recipe(load_recipe("sam_vit_b"))
    sam = Sam(build_sam_image_encoder(arch), pe, md).eval()
    official = OfficialPredictor(sam)
    official.features, official.original_size = emb_t, ORIGINAL_SIZE
    official.input_size = preprocess_shape(*ORIGINAL_SIZE, 1024)
    official.is_image_set = True
    enc_meta = sam_encoder_metadata(variant="vit_b", input_size=1024, pixel_mean=sam.pixel_mean.flatten().tolist(),
                                    pixel_std=sam.pixel_std.flatten().tolist(), architecture=arch.to_dict(), random_seed=0)

    class _EncoderStandIn:  # metadata only: the embedding is given, the encoder never runs
        name, input_names, output_names, metadata = "given-embedding", ["image"], ["image_embeddings"], enc_meta

        def run(self, feeds):  # pragma: no cover - never called
            raise RuntimeError("not used")

    ours = SamPredictor(_EncoderStandIn(), ort)
    ours.set_image_embedding(emb, ORIGINAL_SIZE)
    point = dict(point_coords=np.array([[600.0, 660.0]]), point_labels=np.array([1]))
    ref = official.predict(multimask_output=True, **point)
    out = ours.predict(multimask_output=True, **point)
    masks = compare_masks(ref[0], out[0], "fp32", label="masks 1500x2250")
    # The official export script's graph (segment_anything/utils/onnx.py SamOnnxModel, exported as
    # scripts/export_onnx_model.py does): decoder + upscaling to orig_im_size in one graph, mask logits out.
    official_graph = export_official_decoder_graph(sam, tmp / "official_sam_decoder.onnx")
    official_ort = OnnxRuntimeRunner(official_graph, threads=threads)
    # The official notebook's feeds: the click in the 1024 frame plus the padding point, and orig_im_size.
    coords = official.transform.apply_coords(point["point_coords"], ORIGINAL_SIZE).astype(np.float32)
    official_feeds = {**feeds, "point_coords": np.concatenate([coords[None], np.zeros((1, 1, 2), np.float32)], 1),
                      "orig_im_size": np.array(ORIGINAL_SIZE, np.float32)}
    our_feeds = {**feeds, "point_coords": official_feeds["point_coords"]}
    official_out = official_ort.run(official_feeds)
    graph_parity = compare(official_out["low_res_masks"], ort.run(our_feeds)["low_res_masks"],
                           "fp32", label="low_res_masks vs the official export's graph")
    # Not single-mask: the official graph returns all 4 mask tokens; SamPredictor's multimask output is tokens 1..3.
    graph_masks = compare_masks((official_out["masks"] > sam.mask_threshold)[0, 1:], out[0], "fp32",
                                label="masks vs the official export's graph")
    e2e = {"official SamPredictor.predict": lambda: official.predict(multimask_output=True, **point),
           "vitdeploy SamPredictor.predict": lambda: ours.predict(multimask_output=True, **point),
           "official export graph on ORT (+ threshold)":
               lambda: official_ort.run(official_feeds)["masks"] > sam.mask_threshold,
           "vitdeploy decoder graph on ORT (low-res only)": lambda: ort.run(our_feeds)["low_res_masks"]}
    e2e_samples = alternate(e2e, rounds, warmup, f"predict per prompt, {ORIGINAL_SIZE[1]}x{ORIGINAL_SIZE[0]} original")
    # The two graphs again, each alone (not alternated) under ONNX Runtime's profiler: where each one's time goes.
    profiles = profile_one_after_the_other({"official export graph": (official_graph, official_feeds),
                                            "vitdeploy decoder graph": (result.path, our_feeds)}, threads, rounds, tmp)
    contention = graphs_alone_and_alternated({"official export graph": (official_graph, official_feeds),
                                              "vitdeploy decoder graph": (result.path, our_feeds)}, threads, rounds, warmup)
    return {"graph_profiles": profiles, "graph_contention": contention, "export_seconds": export_s, "parity": parity.to_dict(), "mask_parity": masks.to_dict(),
            "official_graph_parity": graph_parity.to_dict(), "official_graph_mask_parity": graph_masks.to_dict(),
            **_rows(samples, "eager official decoder"),
            "predict": _rows(e2e_samples, "official SamPredictor.predict")}


def profile_one_after_the_other(graphs: dict[str, tuple[Path, dict[str, np.ndarray]]], threads: int, runs: int,
                                tmp: Path) -> dict[str, dict]:
    """Each graph in its own runner, run ``runs`` times after a first run with ONNX Runtime's profiler on, one graph
    after the other; the steady state's kernel time by kind (vitdeploy.benchmark.op_profile)."""
    from vitdeploy.benchmark.op_profile import read_ort_profile, weight_nodes

    out = {}
    for label, (path, feeds) in graphs.items():
        optimized = tmp / f"profiled_{Path(path).name}"
        runner = OnnxRuntimeRunner(path, threads=threads, optimized_model_path=optimized,
                                   profile_prefix=tmp / f"profile_{Path(path).stem}")
        for _ in range(1 + runs):
            runner.run(feeds)
        steady = read_ort_profile(runner.end_profiling(), weight_nodes(optimized)).to_dict()["steady"]
        top = ", ".join(f"{op} {ms:.1f}" for op, ms in list(steady["by_op"].items())[:4])
        print(f"{label}, alone under the profiler: {steady['run_ms']:.1f} ms per run ({top})", flush=True)
        out[label] = steady
    return out


def graphs_alone_and_alternated(graphs: dict[str, tuple[Path, dict[str, np.ndarray]]], threads: int, rounds: int,
                                warmup: int) -> dict[str, dict[str, float]]:
    """Whether alternating two ONNX Runtime sessions slows each: every graph timed alone, then the graphs
    alternated, with ONNX Runtime's default thread spinning and with spinning off (fresh runners each time).

    Why: alternated with the official graph, the vitdeploy graph took longer than alternated with eager
    PyTorch; the guess was one session's spinning intra-op threads taking the cores from the other.
    """
    def runners(spinning: bool | None) -> dict[str, Callable[[], object]]:
        out = {}
        for label, (path, feeds) in graphs.items():
            runner = OnnxRuntimeRunner(path, threads=threads, spinning=spinning)
            out[label] = (lambda r=runner, f=feeds: r.run(f))
        return out

    medians: dict[str, dict[str, float]] = {}
    for spinning, name in ((None, "spinning on (default)"), (False, "spinning off")):
        fns = runners(spinning)
        for label, fn in fns.items():
            alone = alternate({label: fn}, rounds, warmup, f"{label} alone, {name}")
            medians.setdefault(label, {})[f"alone, {name}"] = float(np.median(alone[label]))
        both = alternate(fns, rounds, warmup, f"graphs alternated, {name}")
        for label, samples in both.items():
            medians[label][f"alternated, {name}"] = float(np.median(samples))
    return medians


def export_official_decoder_graph(sam, path: Path) -> Path:
    """``segment_anything``'s ``scripts/export_onnx_model.py`` with its defaults (multimask output, no extra
    metrics): ``SamOnnxModel`` through the TorchScript exporter, opset 17, a dynamic number of points."""
    from segment_anything.utils.onnx import SamOnnxModel

    model = SamOnnxModel(model=sam, return_single_mask=False).eval()
    size = sam.prompt_encoder.image_embedding_size
    dummy = {
        "image_embeddings": torch.randn(1, sam.prompt_encoder.embed_dim, *size, dtype=torch.float),
        "point_coords": torch.randint(low=0, high=1024, size=(1, 5, 2), dtype=torch.float),
        "point_labels": torch.randint(low=0, high=4, size=(1, 5), dtype=torch.float),
        "mask_input": torch.randn(1, 1, *[4 * x for x in size], dtype=torch.float),
        "has_mask_input": torch.tensor([1], dtype=torch.float),
        "orig_im_size": torch.tensor([1500, 2250], dtype=torch.float),
    }
    with torch.no_grad():
        torch.onnx.export(model, tuple(dummy.values()), str(path), export_params=True, opset_version=17,
                          do_constant_folding=True, input_names=list(dummy), dynamo=False,
                          output_names=["masks", "iou_predictions", "low_res_masks"],
                          dynamic_axes={"point_coords": {1: "num_points"}, "point_labels": {1: "num_points"}})
    return path


def _rows(samples: dict[str, list[float]], baseline: str) -> dict:
    stats = {name: stats_from_samples(name, s, 0) for name, s in samples.items()}
    base = stats[baseline].median_ms
    return {"rows": [{"contender": n, "median_ms": st.median_ms, "p90_ms": st.p90_ms, "ratio_to_eager": st.median_ms / base}
                     for n, st in stats.items()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10, help="timed runs per contender (alternated)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="vitdeploy-bench-"))
    print(f"exports go to {tmp}", flush=True)
    report = {"threads": args.threads, "rounds": args.rounds, "machine": platform.machine(),
              "processor": platform.processor(), "versions": tool_versions(),
              "timm_vit_base_patch16_224": bench_timm(tmp, args.threads, args.rounds, args.warmup),
              "sam_vit_b_decoder": bench_decoder(tmp, args.threads, args.rounds, args.warmup)}
    print(f"\n{args.threads} threads, {args.rounds} alternated rounds after {args.warmup} warm-up, "
          f"{platform.processor() or platform.machine()}")
    print(f"{'contender':<36} {'median ms':>10} {'p90 ms':>10} {'x eager':>8}")
    for section in (report["timm_vit_base_patch16_224"], report["sam_vit_b_decoder"], report["sam_vit_b_decoder"]["predict"]):
        for row in section["rows"]:
            print(f"{row['contender']:<36} {row['median_ms']:>10.2f} {row['p90_ms']:>10.2f} {row['ratio_to_eager']:>8.3f}")
    vit, dec = report["timm_vit_base_patch16_224"]["parity"], report["sam_vit_b_decoder"]
    print(f"parity: vit logits cosine {vit['cosine']:.8f} rel L2 {vit['rel_l2']:.2e}; decoder low-res masks cosine "
          f"{dec['parity']['cosine']:.8f} rel L2 {dec['parity']['rel_l2']:.2e}; 1500x2250 masks min IoU "
          f"{min(dec['mask_parity']['iou']):.5f}; vs the official export's graph: low-res cosine "
          f"{dec['official_graph_parity']['cosine']:.8f}, 1500x2250 masks min IoU {min(dec['official_graph_mask_parity']['iou']):.5f}")
    for label, medians in dec["graph_contention"].items():
        print(f"{label}: " + ", ".join(f"{setting} {ms:.1f} ms" for setting, ms in medians.items()))
    write_report(args.out, report)


if __name__ == "__main__":
    main()
