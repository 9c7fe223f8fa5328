"""``vitdeploy tune``: run every deployment this machine supports on held-out inputs, gate each by its parity budget,
and write the fastest one that passed as the model's deployment profile.

The candidates (:func:`candidates`: the first-use probe's list with tune's grid on top) are runtime x precision
policy x load-time form x threads, limited to
what is installed and what this CPU runs: OpenVINO's BF16 policy only on CPUs with AVX512-BF16 or AMX, its FP16 policy
only on CPUs with FP16 arithmetic (Arm's asimdhp, x86's AVX512-FP16; judged here in full even where the probe's
proven families leave it out), ONNX Runtime's
attention forms only for files whose target folds attention, OpenVINO's GELU form
(:mod:`vitdeploy.runtime.forms.openvino_gelu`) both ways for FP32 files (one way for a file written in that form), and only the runtimes whose CPU runs the file (the
registry's :meth:`~vitdeploy.runtime.backends.registry.RuntimeEntry.cpu_gap`: no ONNX Runtime candidate for a BF16
file, no OpenVINO one for a file holding vitdeploy's fused kernel). The reference is the file as written on ONNX Runtime (FP32 for an FP32 file: what ``vitdeploy
validate`` proves against the official model), or the FP32 file given as ``reference`` (required for a BF16 file). Each candidate is judged
by the budget of the precision it runs at (:data:`~vitdeploy.parity.TOLERANCES`: the file's own, or
``bf16`` for BF16 inference of an FP32 file) on every output, and, for a SAM encoder given its decoder, by the mask
budget (:data:`~vitdeploy.validation.masks.MASK_TOLERANCES`) on the masks of seeded clicks through that decoder,
run as written. Every mask is gated; the masks the official stability score calls stable are reported beside
(random weights make almost no mask stable, so the gate cannot rest on them alone).

Judging a candidate in full costs whole-graph runs (a SAM ViT-B encoder: seconds each), so the candidates are first
ranked by the first-use probe (:mod:`vitdeploy.runtime.deploy.probe`: each one timed on a part of the real graph,
its outputs there held to its budget) and only the fastest ``finalists`` (3 by default) within
:data:`FINALIST_MARGIN` of the leader's time there are judged in full; the probe's ranking is kept in the profile.

The profile (:mod:`vitdeploy.runtime.deploy.profiles` reads it) records the machine, the runtime versions and
the model's SHA-256, so that it is used only where it was measured.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vitdeploy.cpu_features import CpuFeatures, available_cores, cpu_features
from vitdeploy.errors import InputError, VitdeployError
from vitdeploy.metadata import identity_differences, read_onnx_metadata
from vitdeploy.precisions import Precision
from vitdeploy.runtime.backends.registry import DEFAULT_RUNTIME, RUNTIMES, FileNeeds, cpu_runtimes_for
from vitdeploy.runtime.deploy.candidates import Eligible, Form, Grid, eligible
from vitdeploy.runtime.deploy.deployment import Deployment
from vitdeploy.runtime.deploy.identity import machine_fingerprint, model_digest, runtime_versions
from vitdeploy.runtime.deploy.probe import probe
from vitdeploy.runtime.deploy.profiles import PROFILE_FORMAT, profile_path
from vitdeploy.runtime.deploy.timing import timed_runs
from vitdeploy.runtime.forms.openvino_gelu import OPENVINO_FORM_KEY, keep_gelu_apart

#: A candidate the probe timed at more than this many times the leader's time on the part is not judged in full: on
#: the part the ratios came out no wider than on the whole graph (SAM ViT-B@1024 with its decoder, Xeon with AMX, 2
#: cores: OpenVINO bf16 at 1 against 2 threads 1.23x on the part, 1.33x whole; OpenVINO f32 against bf16 2.44x on the
#: part, 3.17x whole), so such a candidate cannot win there.
FINALIST_MARGIN = 1.5


@dataclass(frozen=True)
class TuneOptions:
    """What ``tune`` runs: ``images`` (files or folders; default the bundled set) or, for models that do not take
    images, ``random_inputs`` seeded sets; ``clicks`` per image through ``decoder``; ``runs`` timed runs (at least)
    after ``warmup`` (the parity runs on the input sets count as both); ``threads`` the thread counts to try (default:
    every core this process may use, and the probe's ranking adds the leader at half of them where that can win, as
    the first-use probe does: SMT siblings or a run under :data:`~vitdeploy.runtime.deploy.timing.SHORT_RUN_MS`; with
    ``finalists=0``, no ranking: 1 and every core);
    ``reference`` the FP32 file of the same model that an INT8 or FP16 file is judged against (default: the file
    itself as written); ``finalists`` how many candidates, ranked by the first-use probe on a part of the graph
    (:mod:`vitdeploy.runtime.deploy.probe`), are judged in full at most (only those within
    :data:`FINALIST_MARGIN` of the leader there; 0: every candidate, no probe)."""

    images: tuple[str, ...] = ()
    max_images: int = 4
    random_inputs: int = 2
    decoder: str | None = None
    clicks: int = 5
    runs: int = 3
    warmup: int = 1
    threads: tuple[int, ...] = ()
    runtimes: tuple[str, ...] = ()
    seed: int = 0
    reference: str | None = None
    finalists: int = 3


@dataclass
class Verdict:
    """One candidate's result: its latency (the median of its timed runs: the parity runs after the warm-up, and runs
    on the first input set where they are fewer than ``runs``), its parity against the reference, and whether it
    passed (``reason`` says why not)."""

    deployment: Deployment
    budget: str
    median_ms: float | None = None
    min_ms: float | None = None
    cosine_min: float | None = None
    rel_l2_max: float | None = None
    mask_iou_min: float | None = None
    mask_iou_mean: float | None = None
    stable_iou_min: float | None = None
    masks: int = 0
    stable_masks: int = 0
    passed: bool = False
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "deployment"}
        return {"label": self.deployment.label(), "deployment": self.deployment.to_dict(), **out}


@dataclass
class TuneReport:
    model: Path
    profile: Path
    reference: str
    inputs: list[str]
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def chosen(self) -> Verdict | None:
        passing = [v for v in self.verdicts if v.passed and v.median_ms is not None]
        return min(passing, key=lambda v: v.median_ms) if passing else None


def candidates(metadata: dict[str, Any], options: TuneOptions, installed: Sequence[str] | None = None,
               features: CpuFeatures | None = None) -> list[Deployment]:
    """The deployments to try for a file with ``metadata`` on this machine (see the module docstring): the probe's
    walk (:func:`~vitdeploy.runtime.deploy.candidates.eligible`) with tune's grid on top; ``features``: this CPU's
    unless given."""
    features = features or cpu_features()
    if installed is None:
        installed = [name for name, entry in RUNTIMES.items() if entry.reads_onnx and entry.installed()]
    wanted = options.runtimes or tuple(installed)
    missing = [r for r in wanted if r not in installed]
    if missing:
        raise InputError(f"runtime {', '.join(missing)} is not installed here: {RUNTIMES[missing[0]].install}"
                         if missing[0] in RUNTIMES else f"unknown runtime {missing[0]}")
    needs = FileNeeds.of(metadata)
    gaps = {r: RUNTIMES[r].cpu_gap(needs) for r in wanted}
    if all(gaps.values()):
        able = cpu_runtimes_for(needs)
        raise InputError(f"no candidate: the file {next((g for g in gaps.values() if g), 'has no runtime here')}: tune it on "
                         + (f"--runtime {' or '.join(able)}" if able else "a GPU ('vitdeploy build-engine')"))
    forms: tuple[Form, ...] = ()
    if needs.precision is Precision.FP32 and OPENVINO_FORM_KEY not in metadata:  # OpenVINO's GELU form: the runner
        # takes it where it was measured faster; the other reading is tried too (a file written in the form holds one)
        forms = ((("gelu_apart", not keep_gelu_apart(features, Precision.FP32)),),)
    threads = tuple(sorted(set(options.threads or ((available_cores(),) if options.finalists else (1, available_cores())))))
    grid = Grid(runtimes=tuple(wanted), forms=forms, threads=threads)
    return list(eligible(metadata, features, frozenset(installed), grid=grid).candidates)


def _inputs(model: Path, metadata: dict[str, Any], reference: Any, options: TuneOptions) -> tuple[list[Any], list[np.ndarray]]:
    """(input sets, their images): the images preprocessed as the family does, or seeded random inputs."""
    from vitdeploy.families import family_of
    from vitdeploy.runtime.processing.images import expand_image_paths, read_image_rgb
    from vitdeploy.runtime.processing.input_sets import InputSet

    family = family_of(metadata, f"'{model.name}'")
    try:
        preprocess = family.image_preprocessor(metadata)
    except InputError:
        preprocess = None
    if preprocess is None:
        if options.images:
            raise InputError(f"'{model.name}' ({family.name}) does not take images: drop --images")
        sets = family.random_input_sets(metadata, reference.input_names, reference.input_shapes(), options.random_inputs)
        return sets, []
    if options.images:
        paths = expand_image_paths(options.images)[:options.max_images]
    else:
        from vitdeploy.precision.calibration_data import bundled_calibration_dir

        paths = expand_image_paths([bundled_calibration_dir()])[-options.max_images:]
    images = [read_image_rgb(p) for p in paths]
    return [InputSet(f"image:{p.name}", {reference.input_names[0]: preprocess(img)}, str(p))
            for p, img in zip(paths, images)], images


def _click_masks(predictor: Any, embeddings: list[np.ndarray], images: list[np.ndarray], clicks: int,
                 seed: int) -> list[np.ndarray]:
    """Mask logits (3 per click) of ``predictor``'s decoder on the given image ``embeddings``, for ``clicks`` seeded
    clicks per image (the same clicks for every candidate: the same ``seed``)."""
    from vitdeploy.validation.masks import seeded_clicks

    rng = np.random.default_rng(seed)
    out = []
    for embedding, image in zip(embeddings, images):
        predictor.set_image_embedding(embedding, image.shape[:2])
        for point in seeded_clicks(*image.shape[:2], clicks, rng):
            logits, _, _ = predictor.predict(point_coords=point, point_labels=np.array([1]), multimask_output=True,
                                             return_logits=True)
            out.append(logits)
    return out


def _judge(verdict: Verdict, runner: Any, sets: list[Any], want: list[dict[str, np.ndarray]],
           masks: Callable[[list[dict[str, np.ndarray]]], list[np.ndarray]] | None, want_masks: list[np.ndarray] | None,
           options: TuneOptions, family: str | None = None) -> None:
    """Fill ``verdict``: every output of ``runner`` on ``sets`` against ``want`` (the budget of its precision for
    ``family``: :func:`~vitdeploy.parity.budget_for`), the masks its outputs give (``masks``) against ``want_masks``,
    then its latency."""
    from vitdeploy.validation.latency import stats_from_samples
    from vitdeploy.validation.masks import STABLE_MIN, compare_masks, stability_score
    from vitdeploy.parity import budget_for, compare

    budget = budget_for(verdict.budget, family)
    failures, cosines, rel_l2, outputs, samples = [], [], [], [], []
    for input_set, reference in zip(sets, want):
        start = time.perf_counter()
        got = runner.run(input_set.feeds)
        samples.append((time.perf_counter() - start) * 1e3)
        outputs.append(got)
        for name, value in reference.items():
            result = compare(value, got[name], budget, label=f"{input_set.label} {name}")
            cosines.append(result.cosine)
            rel_l2.append(result.rel_l2)
            failures += [f"{result.label}: {f}" for f in result.failures]
    verdict.cosine_min, verdict.rel_l2_max = min(cosines), max(rel_l2)
    if masks is not None and want_masks is not None:
        ious, stable = [], []
        for ref, cand in zip(want_masks, masks(outputs)):
            parity = compare_masks(ref, cand, verdict.budget)
            ious += parity.iou
            stable += [iou for iou, score in zip(parity.iou, stability_score(ref)) if score >= STABLE_MIN]
            failures += [f"masks: {f}" for f in parity.failures]
        verdict.masks, verdict.stable_masks = len(ious), len(stable)
        verdict.mask_iou_min, verdict.mask_iou_mean = min(ious), float(np.mean(ious))
        verdict.stable_iou_min = min(stable) if stable else None
    # the parity runs are timed runs too (a static graph's time does not depend on its inputs' values): the first
    # 'warmup' of them are not counted, and runs on the first set make up what is missing (SAM ViT-B's 4 image sets
    # gave the 1 warm-up and 3 runs tune timed again afterwards: 4 runs of 4-6 s per finalist saved)
    feeds = sets[0].feeds
    for _ in range(options.warmup - len(samples)):
        runner.run(feeds)
    timed = samples[options.warmup:]
    timed += timed_runs(lambda: runner.run(feeds), options.runs - len(timed))
    stats = stats_from_samples(verdict.deployment.label(), timed, options.warmup)
    verdict.median_ms, verdict.min_ms = stats.median_ms, stats.min_ms
    verdict.passed = not failures
    verdict.reason = "" if not failures else f"{len(failures)} check(s) over budget '{verdict.budget}', first: {failures[0]}"


def tune(model: str | Path, options: TuneOptions = TuneOptions(), output: str | Path | None = None,
         echo: Callable[[str], None] = print) -> TuneReport:
    """Run every candidate on ``model`` (module docstring) and write the profile to ``output`` (default: beside
    the model, :func:`~vitdeploy.runtime.deploy.profiles.profile_path`). The profile is written whole or not at
    all; a run where no candidate passes writes none and raises."""
    from vitdeploy.fileio import atomic_write_bytes
    from vitdeploy.runtime.deploy.loader import open_runner

    model = Path(model)
    if model.suffix.lower() != ".onnx":
        raise InputError(f"'{model.name}' is not an ONNX model: tune chooses how an .onnx file runs on the CPU "
                         "(a TensorRT engine's math was fixed when it was built)")
    output = Path(output) if output else profile_path(model)
    metadata = read_onnx_metadata(model)
    gap = RUNTIMES[DEFAULT_RUNTIME].cpu_gap(FileNeeds.of(metadata, f"'{model.name}'"))
    if gap and not options.reference:
        raise InputError(f"'{model.name}' {gap}, where the reference runs: pass --reference with the FP32 file it was "
                         "made from")
    reference_path = Path(options.reference) if options.reference else model
    reference = open_runner(reference_path, threads=available_cores(), runtime=DEFAULT_RUNTIME)
    if options.reference:
        _require_same_model(model, metadata, reference_path, reference)
    budget_of_file = Precision.of(metadata).value
    sets, images = _inputs(model, metadata, reference, options)
    described = f"{reference_path.name} ({Precision.of(reference.metadata)}) as written on {reference.provider or reference.name}"
    echo(f"reference: {described}; {len(sets)} input set(s)")
    if not options.reference and Precision.of(metadata).reduced:
        echo(f"note: {model.name} is {budget_of_file} and is judged against itself: pass --reference with the FP32 "
             "file it was made from to judge every candidate against FP32")
    want = [reference.run(s.feeds) for s in sets]
    masks: Callable[[list[dict[str, np.ndarray]]], list[np.ndarray]] | None = None
    want_masks = None
    if options.decoder:
        if not images:  # (a file that is no SAM encoder is refused by SamPredictor, below)
            raise InputError("--decoder needs images")
        from vitdeploy.runtime.apps.sam.predictor import SamPredictor

        predictor = SamPredictor(reference, open_runner(options.decoder, threads=available_cores(), runtime=DEFAULT_RUNTIME))

        def through_decoder(outputs: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
            """The masks of the embeddings a candidate computed (no second encoder run)."""
            embeddings = [out[predictor.encoder_output] for out in outputs]
            return _click_masks(predictor, embeddings, images, options.clicks, options.seed)

        masks = through_decoder
        want_masks = masks(want)
        echo(f"masks: {options.clicks} seeded click(s) per image x 3 through {Path(options.decoder).name} as written")
    report = TuneReport(model, output, described,
                        [Path(s.source).name if s.source else s.label for s in sets])
    found = candidates(metadata, options)
    ranking = None
    # ranked by the probe where there are more candidates than finalists, and wherever its threads step chooses the
    # thread counts (none asked for)
    if options.finalists and (len(found) > options.finalists or not options.threads):
        ranking = probe(model, metadata, candidates=Eligible(tuple(found)), require_choice=False, rank=True,
                        fewer_threads=not options.threads)  # the threads step, where no thread counts were asked
        echo(f"probe: {ranking.summary()}")
        held = [t for t in ranking.ranking() if not t.reason]
        lead = held[0].best_ms if held and held[0].best_ms is not None else None
        found = [t.deployment for t in held if lead is None or t.best_ms is not None and t.best_ms <= FINALIST_MARGIN * lead]
        found = found[:options.finalists]
        if not found:
            raise InputError(f"no candidate passed its parity budget on '{model.name}', not even on the probe's part "
                             "(see the line above); no profile written")
        echo(f"judging the {len(found)} fastest in full: {', '.join(f'{d.label()} {d.threads} thr' for d in found)}")
    for index, deployment in enumerate(found, 1):
        budget = budget_of_file if deployment.precision == "file" else deployment.precision
        verdict = Verdict(deployment, budget)
        try:
            runner = open_runner(model, threads=deployment.threads, runtime=deployment.runtime,
                                 precision=deployment.precision, **dict(deployment.settings))
            try:
                _judge(verdict, runner, sets, want, masks, want_masks, options, metadata.get("family"))
            finally:
                runner.close()
        except VitdeployError as exc:
            verdict.reason = f"could not run: {exc}"
        report.verdicts.append(verdict)
        echo(f"[{index}/{len(found)}] {_line(verdict)}")
    chosen = report.chosen
    if chosen is None:
        raise InputError(f"no candidate passed its parity budget on '{model.name}' (see the lines above); no profile written")
    profile = {
        "format": PROFILE_FORMAT, "model": model.name, "model_sha256": model_digest(model),
        "machine": machine_fingerprint(), "cpu": cpu_features().summary(), "runtime_versions": runtime_versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "reference": report.reference,
        "reference_sha256": model_digest(reference_path) if options.reference else None, "inputs": report.inputs,
        "decoder": Path(options.decoder).name if options.decoder else None,
        "clicks_per_image": options.clicks if options.decoder else 0, "runs": options.runs, "warmup": options.warmup,
        "chosen": chosen.deployment.to_dict(), "chosen_label": chosen.deployment.label(),
        "candidates": [v.to_dict() for v in sorted(report.verdicts, key=_order)],
        "probe": None if ranking is None else {"part": ranking.part, "seconds": round(ranking.seconds, 2),
                                               "timings": [t.to_dict() for t in ranking.ranking()]},
    }
    atomic_write_bytes(output, (json.dumps(profile, indent=2) + "\n").encode())
    return report


def _require_same_model(model: Path, metadata: dict[str, Any], reference_path: Path, reference: Any) -> None:
    """InputError unless ``reference`` is an FP32 file of the model ``model`` holds, with its inputs and outputs."""
    ref_meta = reference.metadata
    if Precision.of(ref_meta) is not Precision.FP32:
        raise InputError(f"--reference '{reference_path.name}' is {Precision.of(ref_meta)}: give the FP32 file "
                         f"'{model.name}' was made from")
    differences = identity_differences(ref_meta, metadata)
    if differences:
        raise InputError(f"--reference '{reference_path.name}' is another model than '{model.name}' "
                         f"({'; '.join(differences)}): give the FP32 file '{model.name}' was made from")
    from vitdeploy.engine.onnx_facts import read_onnx_facts

    def static(dims: Any) -> list[int]:  # a dynamic axis (a name, or -1/0) as -1 on both sides
        return [d if isinstance(d, int) and d > 0 else -1 for d in dims]

    facts = read_onnx_facts(model)
    ours = ([(t.name, static(t.dims)) for t in facts.inputs], [t.name for t in facts.outputs])
    shapes = reference.input_shapes()
    theirs = ([(n, static(shapes[n])) for n in reference.input_names], list(reference.output_names))
    if ours != theirs:
        raise InputError(f"--reference '{reference_path.name}' takes or gives other tensors than '{model.name}' "
                         f"({theirs} vs {ours}): give the FP32 file '{model.name}' was made from")


def _order(verdict: Verdict) -> tuple:
    """Passing first, then fastest: the profile's candidates list reads as a ranking."""
    return (not verdict.passed, verdict.median_ms if verdict.median_ms is not None else float("inf"))


def _line(v: Verdict) -> str:
    timing = f"{v.median_ms:9.1f} ms" if v.median_ms is not None else "        - ms"
    parity = f"cosine {v.cosine_min:.6f}" if v.cosine_min is not None else ""
    if v.mask_iou_min is not None:
        stable = f", stable {v.stable_iou_min:.4f} ({v.stable_masks})" if v.stable_iou_min is not None else ", 0 stable"
        parity += f", mask IoU min {v.mask_iou_min:.4f} over {v.masks}{stable}"
    verdict = "pass" if v.passed else f"FAIL ({v.reason})"
    return f"{v.deployment.label():42s} {v.deployment.threads} thr {timing}  {parity}  [{v.budget}] {verdict}"


def summary_lines(report: TuneReport) -> list[str]:
    """The ranking, fastest passing first, and the choice."""
    lines = [_line(v) for v in sorted(report.verdicts, key=_order)]
    chosen = report.chosen
    if chosen is not None:
        lines.append(f"chosen: {chosen.deployment.label()}, {chosen.deployment.threads} thread(s), {chosen.median_ms:.1f} ms "
                     f"-> {report.profile}")
    return lines


__all__ = ["FINALIST_MARGIN", "TuneOptions", "TuneReport", "Verdict", "candidates", "summary_lines", "tune"]
