"""``vitdeploy tune`` on the tiny SAM: every candidate's verdict, the profile it writes, and that profile's use by
``predict`` and ``SamPredictor`` (``--runtime auto``). The profile's matching rules: tests/runtime/deploy/test_deployment.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.sam_tiny import SEED, TinySamArtifacts, sample_image, tiny_official_sam
from vitdeploy.cli import cli
from vitdeploy.cpu_features import CpuFeatures, cpu_features
from vitdeploy.errors import InputError
from vitdeploy.runtime import SamPredictor
from vitdeploy.runtime.deploy.cpu_rows import cpu_default
from vitdeploy.runtime.deploy.deployment import Deployment
from vitdeploy.runtime.deploy.identity import model_digest
from vitdeploy.runtime.deploy.profiles import profile_path
from vitdeploy.runtime_facts import PROVEN_POLICIES
from vitdeploy.tune import FINALIST_MARGIN, TuneOptions, candidates, tune
from vitdeploy.validation.masks import MASK_TOLERANCES
from vitdeploy.parity import TOLERANCES, compare

pytest_plugins = ["tests.sam_tiny_fixtures"]

#: the reduced precision policies this CPU has units for (BF16: AMX or AVX512-BF16; FP16: asimdhp or AVX512-FP16)
REDUCED = sum(bool(cpu_features().policy_units(policy)) for policy in PROVEN_POLICIES)


@pytest.fixture()
def pair(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> tuple[Path, Path]:
    """Copies of the tiny encoder and decoder: each test's profile stays beside its own copy."""
    return (Path(shutil.copy(tiny_sam_artifacts.encoder, tmp_path / "encoder.onnx")),
            Path(shutil.copy(tiny_sam_artifacts.decoder, tmp_path / "decoder.onnx")))


def test_tune_judges_every_candidate_and_writes_the_fastest_passing(pair: tuple[Path, Path]) -> None:
    encoder, decoder = pair
    lines: list[str] = []
    report = tune(encoder, TuneOptions(decoder=str(decoder), max_images=2, clicks=3, runs=2, threads=(1, 2),
                                       finalists=0), echo=lines.append)
    # ONNX Runtime (the generic file has one attention form) and OpenVINO FP32 with its GELU form each way, BF16 and
    # FP16 where this CPU has their units; 2 thread counts
    assert len(report.verdicts) == (3 + REDUCED) * 2 == len(lines) - 2
    for v in report.verdicts:
        tolerance, masks = TOLERANCES[v.budget], MASK_TOLERANCES[v.budget]
        assert v.median_ms is not None and v.median_ms > 0 and v.masks == 2 * 3 * 3
        within = v.cosine_min >= tolerance.cosine_min and v.rel_l2_max <= tolerance.rel_l2_max and v.mask_iou_min >= masks.iou_min
        assert v.passed == (within and not v.reason), v.to_dict()  # (max-abs is judged too; a failure names it)
        assert v.budget == ("fp32" if v.deployment.precision == "file" else v.deployment.precision)  # bf16, fp16
        if v.deployment.precision == "file":  # the same FP32 math, reordered: passes
            assert v.passed and v.cosine_min > 0.99999
    profile = json.loads(profile_path(encoder).read_text())
    chosen = report.chosen
    assert profile["chosen"] == chosen.deployment.to_dict()
    assert chosen.median_ms == min(v.median_ms for v in report.verdicts if v.passed)
    assert [c["passed"] for c in profile["candidates"]] == sorted((c["passed"] for c in profile["candidates"]), reverse=True)
    assert profile["machine"]["cores"] >= 1 and profile["runtime_versions"]["onnxruntime"]
    assert profile["inputs"] == [Path(p).name for p in profile["inputs"]]  # names, not this machine's paths


def test_tune_judges_in_full_only_the_fastest_the_probe_ranked(pair: tuple[Path, Path]) -> None:
    """Every candidate is ranked by the probe on a part of the graph; the ``finalists`` fastest that held their budget
    there are judged in full, in that order, and the profile keeps the probe's ranking."""
    encoder, decoder = pair
    lines: list[str] = []
    report = tune(encoder, TuneOptions(decoder=str(decoder), max_images=2, clicks=3, runs=2, threads=(1, 2),
                                       finalists=2), echo=lines.append)
    assert lines[2].startswith("probe: probed on this CPU in"), lines
    profile = json.loads(profile_path(encoder).read_text())
    ranked = profile["probe"]["timings"]
    assert len(ranked) == (3 + REDUCED) * 2  # every candidate tune has, ranked
    held = [t for t in ranked if not t["reason"]]
    lead = held[0]["best_ms"]
    near = [t["deployment"] for t in held if t["best_ms"] is not None and t["best_ms"] <= FINALIST_MARGIN * lead]
    assert [v.deployment.to_dict() for v in report.verdicts] == near[:2]
    held = [t["deployment"] for t in held]
    assert profile["chosen"] == report.chosen.deployment.to_dict() and report.chosen.passed
    assert profile["chosen"] in held[:2]


def test_without_thread_counts_the_probe_ranks_every_core_and_its_threads_step_the_rest(pair: tuple[Path, Path],
                                                                                     monkeypatch) -> None:
    """No --threads: the candidates run on every core this process may use, and the probe's threads step adds the
    leader at half of them only where that can win (SMT siblings, or a run under SHORT_RUN_MS: the tiny model's), as
    on first use; a 1-thread twin of every candidate is not timed."""
    from vitdeploy.cpu_features import available_cores
    from vitdeploy.runtime.deploy import timing as probe_module

    encoder, _ = pair
    cores = available_cores()
    if cores < 2:
        pytest.skip("one core: there is no fewer threads to try")
    tune(encoder, TuneOptions(max_images=1, runs=1), echo=lambda _line: None)
    timings = json.loads(profile_path(encoder).read_text())["probe"]["timings"]
    fewer = [t["deployment"] for t in timings if t["deployment"]["threads"] != cores]
    leader = min((t for t in timings if t["deployment"]["threads"] == cores and t["best_ms"] is not None
                  and not t["reason"]), key=lambda t: t["best_ms"])
    assert len(timings) > 1 and all(t["deployment"]["threads"] in (cores, cores // 2) for t in timings), timings
    if leader["best_ms"] < probe_module.SHORT_RUN_MS or probe_module._shares_cores():
        assert fewer == [{**leader["deployment"], "threads": cores // 2}], fewer
    else:
        assert fewer == [], fewer


def test_candidates_follow_the_file_the_cpu_and_the_runtimes() -> None:
    both, options = ["onnxruntime", "openvino"], TuneOptions(threads=(2,))
    avx2 = CpuFeatures("AMD EPYC", "x86_64", frozenset({"avx2", "fma"}))  # where OpenVINO keeps GELUs apart by default
    zen4 = CpuFeatures("AMD EPYC", "x86_64", frozenset({"avx2", "fma", "avx512f", "avx512_bf16"}))
    generic = [d.label() for d in candidates({"precision": "fp32", "target": "generic"}, options, both, features=zen4)]
    assert generic == ["onnxruntime file", "openvino file", "openvino file gelu_apart=True", "openvino bf16"]
    # FP16 arithmetic: tune judges OpenVINO's FP16 on any file of a CPU with the units (the first-use probe offers it
    # only to the families its budget is proven for)
    for cpu in (CpuFeatures("Cortex-A76", "aarch64", frozenset({"fp", "asimd", "fphp", "asimdhp", "asimddp"})),
                CpuFeatures("Intel Xeon", "x86_64", frozenset({"avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16"}))):
        labels = [d.label() for d in candidates({"precision": "fp32", "target": "generic"}, options, both, features=cpu)]
        assert labels[-1] == "openvino fp16" and ("openvino bf16" in labels) == cpu.x86, labels
    folded = [d.label() for d in candidates({"precision": "fp32", "target": "onnxruntime-cpu"}, options, both,
                                            features=avx2)]
    assert folded == ["onnxruntime file", "onnxruntime file fused_attention=False", "onnxruntime file folded_attention=True",
                      "openvino file", "openvino file gelu_apart=False"]
    # a file written in OpenVINO's GELU form holds one reading: no gelu_apart candidate
    openvino_form = {"precision": "fp32", "target": "generic", "openvino_form": {"gelus_apart": 2, "source": "e.onnx"}}
    assert [d.label() for d in candidates(openvino_form, options, both, features=avx2)] == [
        "onnxruntime file", "openvino file"]
    int8 = candidates({"precision": "int8", "target": "tensorrt"}, TuneOptions(threads=(1, 2)), both, features=zen4)
    assert not any(d.precision == "bf16" for d in int8) and {d.threads for d in int8} == {1, 2} and len(int8) == 8
    with pytest.raises(Exception, match="openvino is not installed here"):
        candidates({"precision": "fp32"}, TuneOptions(runtimes=("openvino",)), ["onnxruntime"], features=zen4)
    # only the runtimes whose CPU runs the file (the registry's capability): a fused-kernel file has no OpenVINO
    # candidate, a BF16 file no ONNX Runtime one; none left is one line naming the runtime that runs it
    fused = {"precision": "fp32", "cpu_form": {"attention": "fused-kernel", "nodes": ["a"], "source": "e.onnx"}}
    assert [d.label() for d in candidates(fused, options, both, features=zen4)] == ["onnxruntime file"]
    assert [d.label() for d in candidates({"precision": "bf16"}, options, both, features=zen4)] == ["openvino file"]
    with pytest.raises(InputError, match="no candidate: the file runs vitdeploy's fused attention kernel, an ONNX "
                       "Runtime custom op OpenVINO does not have: tune it on --runtime onnxruntime"):
        candidates(fused, TuneOptions(runtimes=("openvino",)), both, features=zen4)


def test_an_int8_file_is_judged_against_the_fp32_file_it_was_made_from(pair: tuple[Path, Path], tmp_path: Path) -> None:
    """``tune INT8 --reference FP32``: every candidate (ONNX Runtime and OpenVINO's integer kernels) is gated by the
    ``int8`` budget against the FP32 file's embeddings, not against the INT8 file's own numbers."""
    encoder, decoder = pair
    int8 = tmp_path / "encoder.int8.onnx"
    made = CliRunner().invoke(cli, ["calibrate", str(encoder), "-p", "int8", "-o", str(int8), "--no-eager",
                                    "--min-images", "2", "--max-images", "5", "--holdout", "1"])
    assert made.exit_code == 0, made.output
    # (no --decoder: the tiny random decoder's masks sit on their threshold, and INT8 flips some past the int8 mask
    # budget, so no candidate would pass and no profile be written; the mask gate is the FP32 test's above)
    result = CliRunner().invoke(cli, ["tune", str(int8), "-r", str(encoder), "--max-images", "2", "--runs", "1",
                                      "--threads", "1"])
    assert result.exit_code == 0, result.output
    profile = json.loads(profile_path(int8).read_text())
    assert profile["reference"].startswith("encoder.onnx (fp32) as written") and "judged against itself" not in result.output
    assert profile["reference_sha256"] == model_digest(encoder)
    tolerance = TOLERANCES["int8"]
    runtimes = {c["deployment"]["runtime"] for c in profile["candidates"]}
    assert runtimes == {"onnxruntime", "openvino"} and all(c["budget"] == "int8" for c in profile["candidates"])
    for c in profile["candidates"]:
        assert c["cosine_min"] < 0.99999  # INT8 against FP32: a self-reference would give 1 on ONNX Runtime
        within = c["cosine_min"] >= tolerance.cosine_min and c["rel_l2_max"] <= tolerance.rel_l2_max
        assert c["passed"] == (within and not c["reason"]), c
    # without --reference the file is its own reference, and tune says so
    alone = CliRunner().invoke(cli, ["tune", str(int8), "--max-images", "1", "--runs", "1", "--threads", "1",
                                     "--runtime", "onnxruntime", "-o", str(tmp_path / "alone.json")])
    assert alone.exit_code == 0 and "is int8 and is judged against itself: pass --reference" in alone.output
    # a reference that is not the FP32 file of the same model is refused, and nothing is written
    for wrong, why in ((int8, "is int8: give the FP32 file"), (decoder, "is another model than 'encoder.int8.onnx' (family")):
        refused = CliRunner().invoke(cli, ["tune", str(int8), "-r", str(wrong), "-o", str(tmp_path / "no.json")])
        assert refused.exit_code == 1 and why in refused.output and "Traceback" not in refused.output, refused.output
        assert not (tmp_path / "no.json").exists()


def test_a_bf16_file_is_tuned_on_openvino_against_the_fp32_file(pair: tuple[Path, Path], tmp_path: Path) -> None:
    """``tune BF16 -r FP32``: ONNX Runtime's CPU has no BF16 kernels, so OpenVINO is the only candidate, gated by the
    ``bf16`` budget (embeddings and masks) against FP32; without the reference, one line says what to pass."""
    encoder, decoder = pair
    bf16 = tmp_path / "encoder.bf16.onnx"
    made = CliRunner().invoke(cli, ["calibrate", str(encoder), "-p", "bf16", "-o", str(bf16), "--no-eager",
                                    "--min-images", "2", "--max-images", "5", "--holdout", "1"])
    assert made.exit_code == 0, made.output
    result = CliRunner().invoke(cli, ["tune", str(bf16), "-r", str(encoder), "-d", str(decoder), "--max-images", "2",
                                      "--runs", "1", "--threads", "1"])
    assert result.exit_code == 0, result.output
    profile = json.loads(profile_path(bf16).read_text())
    assert {c["deployment"]["runtime"] for c in profile["candidates"]} == {"openvino"}
    tolerance = TOLERANCES["bf16"]
    for c in profile["candidates"]:
        assert c["budget"] == "bf16" and c["cosine_min"] < 0.999999  # BF16 weights against FP32
        within = c["cosine_min"] >= tolerance.cosine_min and c["rel_l2_max"] <= tolerance.rel_l2_max
        assert c["passed"] == (within and not c["reason"]), c
    alone = CliRunner().invoke(cli, ["tune", str(bf16), "-o", str(tmp_path / "alone.json")])
    assert alone.exit_code == 1 and "pass --reference with the FP32 file" in alone.output, alone.output
    assert not (tmp_path / "alone.json").exists()


def test_tune_without_a_passing_candidate_writes_nothing(pair: tuple[Path, Path], monkeypatch) -> None:
    encoder, _ = pair
    for budget in ("fp32", "bf16", "fp16"):  # nothing can pass, whichever policies this CPU has units for
        monkeypatch.setitem(TOLERANCES, budget, TOLERANCES[budget].__class__(budget, 1.1, 0.0, 0.0))
    result = CliRunner().invoke(cli, ["tune", str(encoder), "--max-images", "1", "--runs", "1", "--threads", "1"])
    assert result.exit_code == 1 and "no candidate passed its parity budget" in result.output
    assert not profile_path(encoder).exists()


def test_predict_and_sampredictor_run_what_the_profile_chose(pair: tuple[Path, Path], tmp_path: Path) -> None:
    encoder, decoder = pair
    result = CliRunner().invoke(cli, ["tune", str(encoder), "--runtime", "openvino", "--threads", "1", "--runs", "1",
                                      "--max-images", "1", "--json"])
    assert result.exit_code == 0, result.output
    chosen = json.loads(profile_path(encoder).read_text())["chosen"]
    assert chosen["runtime"] == "openvino" and chosen["threads"] == 1
    predictor = SamPredictor(encoder, decoder)
    assert predictor.encoder.backend == "openvino" and predictor.encoder.deployment.source == "profile encoder.profile.json"
    assert predictor.encoder.deployment.precision == chosen["precision"]
    assert predictor.decoder.deployment.runtime == "onnxruntime"  # no profile beside the decoder: the CPU default
    image = tmp_path / "scene.png"
    from PIL import Image

    Image.fromarray(sample_image(48, 80, seed=2)).save(image)
    run = CliRunner().invoke(cli, ["predict", "-e", str(encoder), "-d", str(decoder), "-i", str(image), "-p", "30,20",
                                   "-o", str(tmp_path / "mask.png")])
    assert run.exit_code == 0, run.output
    label = Deployment.from_dict(chosen, "test").label()  # "openvino file", with the GELU form where that one won
    assert f"encoder.onnx runs as {label}, 1 thread(s): profile encoder.profile.json" in run.output
    again = CliRunner().invoke(cli, ["tune", str(encoder), "--runs", "1"])
    assert again.exit_code == 1 and "already exists: pass --force" in again.output
    # benchmark and validate run the profile's choice when asked for auto, and validate judges it by its budget
    bench = CliRunner().invoke(cli, ["benchmark", str(encoder), "--runtime", "auto", "--no-eager", "--runs", "1",
                                     "--warmup", "0"])
    assert bench.exit_code == 0, bench.output
    assert "openvino-cpu fp32" in bench.output and "(auto)" in bench.output and "profile encoder.profile.json" in bench.output
    checked = CliRunner().invoke(cli, ["validate", str(encoder), "--runtime", "auto", "--random-inputs", "1", "--runs", "0"])
    budget = chosen["precision"] if chosen["precision"] in ("bf16", "fp16") else "fp32"  # (fp16: AVX512-FP16 CPUs)
    assert checked.exit_code == 0 and f"tolerance '{budget}'" in checked.output, checked.output


def test_the_default_path_on_this_cpu_meets_the_budget_of_what_it_chose(tiny_sam_artifacts: TinySamArtifacts) -> None:
    """``SamPredictor(enc, dec)`` with no profile: this CPU's default (OpenVINO BF16 on AMX, the exact ONNX Runtime
    elsewhere), its embedding within that precision's budget of the official model's."""
    from segment_anything import SamPredictor as OfficialPredictor

    ours = SamPredictor(tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder)
    expected = cpu_default("sam_image_encoder", "fp32")
    assert (ours.encoder.deployment.runtime, ours.encoder.deployment.precision) == (expected.runtime, expected.precision)
    official = OfficialPredictor(tiny_official_sam(SEED))
    budget = "bf16" if expected.precision == "bf16" else "fp32"
    for seed in (1, 2):
        picture = sample_image(48, 80, seed=seed)
        ours.set_image(picture)
        official.set_image(picture)
        result = compare(official.get_image_embedding().numpy(), ours.get_image_embedding(), budget)
        assert result, result.summary()
        masks, _, _ = ours.predict(point_coords=np.array([[20.0, 30.0]]), point_labels=np.array([1]))
        assert masks.shape == (3, 48, 80)


@pytest.mark.parametrize(("sets", "warmup", "runs", "calls", "timed"), [
    (4, 1, 3, 4, [2, 3, 4]),        # SAM's 4 image sets: the first is the warm-up, the next 3 the timed runs
    (2, 1, 3, 4, [2, 3, 4]),        # fewer sets than runs: two more runs make up the third and fourth samples
    (2, 3, 1, 4, [4]),              # more warm-up than sets: one untimed run more, then one timed
    (3, 0, 1, 3, [1, 2, 3]),        # every parity run counts (more samples than asked cost nothing)
])
def test_tune_times_its_parity_runs(sets: int, warmup: int, runs: int, calls: int, timed: list[int],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate's parity runs on the input sets are its warm-up and timed runs (a static graph's time does not
    depend on its inputs' values), and runs on the first set make up what is missing: SAM ViT-B judged in full ran
    4 image sets, then a warm-up and 3 timed runs again, 4-6 s each."""
    import time

    from vitdeploy import tune as tune_module
    from vitdeploy.runtime.processing.input_sets import InputSet

    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    class Runner:
        """Run k takes k seconds on the fake clock, so each sample names the run it timed."""
        count = 0

        def run(self, feeds):
            self.count += 1
            now[0] += self.count
            return {"y": feeds["x"]}

    inputs = [InputSet(f"set{i}", {"x": np.full((2, 3), i + 1.0, np.float32)}, "seeded") for i in range(sets)]
    verdict = tune_module.Verdict(Deployment("onnxruntime", "file", 1), "fp32")
    runner = Runner()
    tune_module._judge(verdict, runner, inputs, [{"y": s.feeds["x"]} for s in inputs],
                       None, None, TuneOptions(runs=runs, warmup=warmup))
    assert runner.count == calls
    assert verdict.passed and verdict.cosine_min == pytest.approx(1.0)
    assert verdict.median_ms == pytest.approx(float(np.median(timed)) * 1e3)
    assert verdict.min_ms == pytest.approx(min(timed) * 1e3)
