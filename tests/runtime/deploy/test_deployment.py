"""``--runtime auto`` without a profile: this CPU's measured defaults, and how a profile is matched to a model and a
machine (vitdeploy/runtime/deploy/profiles.py and cpu_rows.py). Tune itself: tests/test_tune.py."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.sam_tiny import TinySamArtifacts
from vitdeploy.cpu_features import CpuFeatures
from vitdeploy.errors import InputError
from vitdeploy.runtime.deploy.auto import resolve
from vitdeploy.runtime.deploy.cpu_rows import CPU_DEFAULTS, INT8_MEASUREMENTS, cpu_default, int8_measurement
from vitdeploy.runtime.deploy.deployment import Deployment
from vitdeploy.runtime.deploy.identity import machine_fingerprint, model_digest, runtime_versions
from vitdeploy.runtime.deploy.profiles import PROFILE_FORMAT, profile_path, profile_problems, read_profile

pytest_plugins = ["tests.sam_tiny_fixtures"]

AMX = CpuFeatures("Intel Xeon", "x86_64", frozenset({"avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}))
ZEN4 = CpuFeatures("AMD EPYC", "x86_64", frozenset({"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"}))
AVX2 = CpuFeatures("AMD EPYC", "x86_64", frozenset({"avx2", "fma"}))
BOTH = frozenset({"onnxruntime", "openvino"})


def test_the_amx_row_runs_fp32_encoders_in_bf16_on_openvino_and_nothing_else() -> None:
    for family in ("sam_image_encoder", "timm_vit"):
        chosen = cpu_default(family, "fp32", AMX, BOTH)
        assert (chosen.runtime, chosen.precision) == ("openvino", "bf16") and "amx_bf16" in chosen.source
    # the decoder missed the bf16 budget; INT8/FP16 files keep their own math; unmeasured CPUs keep the exact default
    for family, precision, cpu in (("sam_mask_decoder", "fp32", AMX), ("sam_image_encoder", "int8", AMX),
                                   ("sam_image_encoder", "fp16", AMX), ("sam_image_encoder", "fp32", ZEN4),
                                   ("timm_vit", "fp32", ZEN4)):
        chosen = cpu_default(family, precision, cpu, BOTH)
        assert (chosen.runtime, chosen.precision) == ("onnxruntime", "file"), (family, precision, cpu.model)


def test_the_avx2_row_runs_fp32_sam_encoders_as_written_on_openvino_only_without_avx512() -> None:
    chosen = cpu_default("sam_image_encoder", "fp32", AVX2, BOTH)
    assert (chosen.runtime, chosen.precision) == ("openvino", "file")
    assert "avx2 without avx512f: openvino file" in chosen.source
    # what was not measured on AVX2 keeps the exact default: other families, the decoder, INT8 files (whose INT8
    # kernels OpenVINO runs with 7-bit weights there), and an AVX-512 CPU (it has avx2 too)
    for family, precision, cpu in (("timm_vit", "fp32", AVX2), ("sam_mask_decoder", "fp32", AVX2),
                                   ("sam_image_encoder", "int8", AVX2), ("sam_image_encoder", "fp32", ZEN4)):
        chosen = cpu_default(family, precision, cpu, BOTH)
        assert (chosen.runtime, chosen.precision) == ("onnxruntime", "file"), (family, precision, cpu.model)
    without = cpu_default("sam_image_encoder", "fp32", AVX2, frozenset({"onnxruntime"}))
    assert without.runtime == "onnxruntime" and "pip install 'vitdeploy[openvino]'" in without.source


def test_without_openvino_the_default_says_what_to_install() -> None:
    chosen = cpu_default("sam_image_encoder", "fp32", AMX, frozenset({"onnxruntime"}))
    assert (chosen.runtime, chosen.precision) == ("onnxruntime", "file")
    assert "pip install 'vitdeploy[openvino]'" in chosen.source


def test_every_default_row_cites_its_measurement() -> None:
    """Every row cites its measurement and was measured on registered families only (a misspelt family in
    runtime_facts.json would apply nowhere); each such family names the row among its ``cpu_default_rows``."""
    from vitdeploy.families import FAMILIES

    for row in CPU_DEFAULTS:
        assert row.flags and "benchmarks/" in row.evidence and " ms " in row.evidence
        assert row.measured_on and set(row.measured_on) <= set(FAMILIES), row.measured_on
        assert all(row.key in FAMILIES[name].cpu_default_rows for name in row.measured_on)


def test_each_int8_measurement_is_against_what_the_default_still_chooses_there() -> None:
    """An INT8 row's ratio is against the FP32 default of its CPU kind in that run: where ``CPU_DEFAULTS`` later
    changes what such a CPU runs, the row no longer says what INT8 buys there and this fails."""
    from vitdeploy.runtime.deploy.candidates import eligible

    xeon = CpuFeatures("Intel Xeon", "x86_64", AMX.flags | {"avx512_vnni", "amx_int8"})
    icelake = CpuFeatures("Intel Xeon", "x86_64", frozenset({"avx2", "fma", "avx512f", "avx512_vnni"}))
    rows = ((xeon, INT8_MEASUREMENTS[0]), (ZEN4, INT8_MEASUREMENTS[1]), (icelake, INT8_MEASUREMENTS[2]),
            (AVX2, INT8_MEASUREMENTS[3]))
    for cpu, row in rows:
        assert int8_measurement(cpu) is row, cpu.flags
        if cpu is ZEN4:  # no row applies: the probe decides, and OpenVINO BF16 is its candidate there (it chose it)
            found = eligible({"family": "sam_image_encoder", "precision": "fp32"}, cpu, BOTH)
            assert row.default in [d.label() for d in found.candidates], row.default
        else:
            assert cpu_default("sam_image_encoder", "fp32", cpu, BOTH).label() == row.default, row.default
    assert [cpu for row in INT8_MEASUREMENTS for cpu, *_ in row.runs] == [
        "Intel Xeon with AMX, family 6 model 167", "AMD EPYC Zen 4, family 25 model 17",
        "AMD EPYC Zen 4, family 25 model 17", "AMD EPYC Zen 3, family 25 model 1", "AMD EPYC Zen 1, family 23 model 1"]


def test_int8_is_described_by_its_measured_ratio_and_unmeasured_cpus_get_none() -> None:
    zen3 = int8_measurement(AVX2).describe()
    assert "took 0.86x (AMD EPYC Zen 3, family 25 model 1: 6582 against 7656 ms) and 0.96x" in zen3
    assert "FP32 default (openvino file on the generic export) on CPUs with avx2 without avx512f" in zen3
    xeon = CpuFeatures("Intel Xeon", "x86_64", AMX.flags | {"amx_int8"})
    assert "took 2.02x (Intel Xeon with AMX" in int8_measurement(xeon).describe()  # slower than BF16 there
    assert "took 1.00x (AMD EPYC Zen 4, family 25 model 17: 3106 against 3119 ms) the time of the FP32 default (openvino " \
           "bf16 on the generic export)" in int8_measurement(ZEN4).describe()  # level with BF16 there
    skylake = CpuFeatures("Intel Xeon", "x86_64", frozenset({"avx2", "fma", "avx512f", "avx512bw"}))
    arm = CpuFeatures("Neoverse", "aarch64", frozenset({"asimd", "asimddp"}))
    assert int8_measurement(skylake) is None and int8_measurement(arm) is None


def test_a_fused_kernel_file_stays_on_onnx_runtime_where_the_default_is_openvino(encoder: Path, tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """A file 'vitdeploy optimize --fused-attention' wrote runs an ONNX Runtime custom op: on a CPU whose default is
    OpenVINO (here AVX2, constructed), ``auto`` keeps ONNX Runtime and says why, instead of a runner that refuses it."""
    import onnx

    from vitdeploy.metadata import metadata_of
    from vitdeploy.precision.report import stamp_metadata
    from vitdeploy.runtime.deploy import cpu_rows

    monkeypatch.setattr(cpu_rows, "cpu_features", lambda: AVX2)
    if not cpu_rows.RUNTIMES["openvino"].installed():
        pytest.skip("openvino is not installed: no CPU default chooses it")
    assert resolve(encoder).runtime == "openvino"  # the plain export: the AVX2 row
    model = onnx.load(str(encoder))
    form = {"attention": "fused-kernel", "nodes": ["attention_0"], "source": "encoder.onnx", "kernel_path": "avx2"}
    stamp_metadata(model, {**metadata_of(model), "cpu_form": form})
    fused = tmp_path / "encoder.fused.onnx"
    onnx.save(model, str(fused))
    chosen = resolve(fused)
    assert (chosen.runtime, chosen.precision) == ("onnxruntime", "file")
    assert chosen.source.startswith("the file as written on onnxruntime (this CPU's default is openvino, but the file "
                                    "runs vitdeploy's fused attention kernel, an ONNX Runtime custom op OpenVINO"), chosen.source


def test_the_registry_says_what_each_runtimes_cpu_runs() -> None:
    """One capability per runtime (file precisions, custom ops, precision policies), read by the runners' refusals,
    ``auto``, ``tune`` and the C++ library: its phrases, and what follows from them."""
    from vitdeploy.runtime.backends.registry import RUNTIMES, FileNeeds, cpu_runtimes_for, policy_runtime

    fused = frozenset({"fused-kernel"})
    assert RUNTIMES["onnxruntime"].cpu_gap(FileNeeds.of({"precision": "bf16"})) == (
        "is a BF16 graph and ONNX Runtime's CPU has no BF16 kernels")
    assert RUNTIMES["openvino"].cpu_gap(FileNeeds(custom_ops=fused)) == (
        "runs vitdeploy's fused attention kernel, an ONNX Runtime custom op OpenVINO does not have")
    assert cpu_runtimes_for(FileNeeds()) == ("onnxruntime", "openvino")
    assert cpu_runtimes_for(FileNeeds.of({"precision": "bf16"})) == ("openvino",)
    assert cpu_runtimes_for(FileNeeds.of({"precision": "int8"}, "x")) == ("onnxruntime", "openvino")
    refusal = RUNTIMES["openvino"].cpu_refusal(FileNeeds(custom_ops=fused), "e.onnx")
    assert refusal and refusal.endswith("does not have: run it with --runtime onnxruntime (or auto)")
    assert policy_runtime("bf16") == "openvino" and policy_runtime("file") == "onnxruntime"
    # a profile whose runtime does not take its precision policy is damaged, not run
    with pytest.raises(InputError, match="onnxruntime does not take precision bf16"):
        Deployment.from_dict({"runtime": "onnxruntime", "precision": "bf16"}, "p.json")
    # a BF16 file that also holds the fused kernel: no CPU runtime runs it; auto leaves the refusal to the runner
    neither = cpu_default("sam_image_encoder", "bf16", AVX2, BOTH, custom_ops=fused)
    assert neither.runtime == "onnxruntime" and neither.source.startswith("no CPU runtime runs the file (it is a BF16 graph")


def _profile(model: Path, chosen: dict, **changes) -> Path:
    data = {"format": PROFILE_FORMAT, "model_sha256": model_digest(model), "machine": machine_fingerprint(),
            "runtime_versions": runtime_versions(), "chosen": chosen, "candidates": []}
    data.update(changes)
    path = profile_path(model)
    path.write_text(json.dumps(data))
    return path


@pytest.fixture()
def encoder(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> Path:
    """A copy of the tiny encoder in its own folder: the profiles these tests write stay beside the copy."""
    return Path(shutil.copy(tiny_sam_artifacts.encoder, tmp_path / "encoder.onnx"))


def test_a_fitting_profile_decides_and_threads_given_override_it(encoder: Path) -> None:
    _profile(encoder, {"runtime": "onnxruntime", "precision": "file", "threads": 1, "settings": {}})
    chosen = resolve(encoder)
    assert (chosen.runtime, chosen.precision, chosen.threads, chosen.source) == ("onnxruntime", "file", 1,
                                                                                  "profile encoder.profile.json")
    assert resolve(encoder, threads=2).threads == 2


@pytest.mark.parametrize("change,problem", [
    (lambda p: p["machine"].update(cpu="AMD EPYC 9654"), "tuned on another CPU"),
    (lambda p: p["machine"].update(flags=["avx2", "fma"]), "tuned on another CPU flags"),
    (lambda p: p["machine"].update(cores=p["machine"]["cores"] + 6), "tuned on another core count"),
    (lambda p: p["runtime_versions"].update(onnxruntime="1.0.0"), "tuned with onnxruntime 1.0.0"),
    (lambda p: p.update(model_sha256="0" * 64), "tuned for another file"),
])
def test_a_foreign_profile_is_refused_never_trusted(encoder: Path, change, problem: str) -> None:
    path = _profile(encoder, {"runtime": "onnxruntime", "precision": "file", "threads": 1, "settings": {}})
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    assert any(problem in p for p in profile_problems(read_profile(path), encoder))
    beside = resolve(encoder)  # found beside the model: ignored, the reason said, the CPU default used instead
    assert beside.source.startswith("this CPU's default") and "encoder.profile.json ignored: " in beside.source
    assert problem in beside.source
    with pytest.raises(InputError, match=f"does not fit: .*{problem}.*run 'vitdeploy tune"):
        resolve(encoder, profile=path)  # asked for by name: refused


def test_a_damaged_profile_is_one_line(encoder: Path) -> None:
    profile_path(encoder).write_text("{ not json")
    with pytest.raises(InputError, match="cannot read the deployment profile"):
        resolve(encoder)
    _profile(encoder, {"runtime": "tensorflow", "precision": "file"})
    assert "its runtime 'tensorflow' is unknown" in resolve(encoder).source
    _profile(encoder, {"runtime": "onnxruntime", "precision": "fp64"})
    with pytest.raises(InputError, match="chosen deployment is damaged"):
        resolve(encoder)
    _profile(encoder, {"runtime": "openvino", "precision": "file", "settings": {"fused_attention": False}})
    with pytest.raises(InputError, match="fused_attention is not a setting of openvino"):
        resolve(encoder)
    profile_path(encoder).write_text(json.dumps({"format": "something/2"}))
    with pytest.raises(InputError, match="is not a vitdeploy deployment profile"):
        resolve(encoder)


def test_a_precision_asked_for_narrows_the_choice(encoder: Path) -> None:
    assert resolve(encoder, precision="file").precision == "file"
    assert (resolve(encoder, precision="bf16").runtime, resolve(encoder, precision="bf16").precision) == ("openvino", "bf16")
    assert Deployment("openvino", "bf16").label() == "openvino bf16"


def test_a_bf16_file_defaults_to_openvino_on_every_cpu_and_says_where_fp32_is_faster() -> None:
    """ONNX Runtime's CPU has no BF16 kernels: a BF16 file's default is OpenVINO on every CPU; where the CPU has no
    BF16 units the note says the FP32 file ran faster (measured on Zen 3); without OpenVINO it says what to install."""
    both = frozenset({"onnxruntime", "openvino"})
    for features, slower in ((AVX2, True), (ZEN4, False), (AMX, False)):
        chosen = cpu_default("sam_image_encoder", "bf16", features, both)
        assert (chosen.runtime, chosen.precision) == ("openvino", "file")
        assert ("this CPU has no BF16 units" in chosen.source) is slower, chosen.source
    missing = cpu_default("sam_image_encoder", "bf16", AVX2, frozenset({"onnxruntime"}))
    assert missing.runtime == "onnxruntime" and "needs openvino on the CPU, which is not installed" in missing.source


def test_one_options_object_opens_every_part_and_the_old_keywords_stay(tiny_sam_artifacts: TinySamArtifacts) -> None:
    """The applications take one OpenOptions: its runtime and threads reach every file, its precision policy the
    encoder only (a decoder runs its file's math); the keywords of earlier releases make the same options, and
    both at once are refused in one line rather than one silently winning."""
    from vitdeploy.errors import InputError
    from vitdeploy.runtime import OpenOptions, SamPredictor
    from vitdeploy.runtime.apps.serving.service import SamService

    enc, dec = tiny_sam_artifacts.encoder, tiny_sam_artifacts.decoder
    options = OpenOptions(runtime="onnxruntime", threads=1, policy="file")
    predictor = SamPredictor(enc, dec, options=options)
    for encoder, decoder in ((predictor.encoder, predictor.decoder), SamService(enc, dec, options=options).runners):
        assert encoder.backend == decoder.backend == "onnxruntime"
        assert encoder.deployment is None and decoder.deployment is None  # asked for, not chosen by auto
    keywords = SamPredictor(enc, dec, runtime="onnxruntime", threads=1, inference_precision="file")
    assert OpenOptions.of(None, runtime="onnxruntime", threads=1, inference_precision="file") == options
    assert keywords.encoder.backend == "onnxruntime"
    assert options.for_part().policy is None and options.for_part().threads == 1
    with pytest.raises(InputError, match=r"either as OpenOptions or as keywords, not both \(threads beside options=\)"):
        SamPredictor(enc, dec, options=options, threads=2)
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        OpenOptions.of(None, thread=2)


def _with_metadata(source: Path, target: Path, **changed: object) -> Path:
    """``source`` saved as ``target`` with vitdeploy metadata entries replaced (JSON-encoded, as the exporter writes)."""
    import json

    import onnx

    model = onnx.load(str(source))
    for prop in model.metadata_props:
        key = prop.key.removeprefix("vitdeploy.")
        if key in changed:
            prop.value = json.dumps(changed[key])
    onnx.save(model, str(target))
    return target


def test_a_decoder_whose_sizes_contradict_its_graph_is_refused_in_one_line(tiny_sam_artifacts: TinySamArtifacts,
                                                                          tmp_path: Path) -> None:
    """A decoder declaring a mask_input_size (or embedding grid, or channels) its graph does not take was a raw ONNX
    Runtime INVALID_ARGUMENT at the first prompt: refused when opened, naming the field and the graph's size."""
    from tests.cli_helpers import assert_user_error, run

    for key, value, said in (("mask_input_size", [16, 16], "mask_input_size is [16, 16] but the graph's mask_input input is 32x32"),
                             ("image_embedding_size", [4, 4], "image_embedding_size is [4, 4] but the graph's image_embeddings input is 8x8"),
                             ("embed_dim", 32, "embed_dim is 32 but the graph's image_embeddings input has 16 channels")):
        decoder = _with_metadata(tiny_sam_artifacts.decoder, tmp_path / f"{key}.onnx", **{key: value})
        code, output = run("predict", "-e", str(tiny_sam_artifacts.encoder), "-d", str(decoder), "-i",
                           "calibration/images/calib_00_landscape.jpg", "--point", "10,10", "-o", str(tmp_path / f"{key}.png"))
        assert_user_error(code, output, f"'{decoder.name}' has damaged vitdeploy metadata", said)


def test_a_sam2_decoder_with_a_null_stability_setting_is_refused_in_one_line() -> None:
    """'track' on a SAM 2 decoder whose dynamic_multimask_stability_delta is null ended in 'unexpected TypeError': the
    metadata check names the field (every verb opens files through it)."""
    from vitdeploy.metadata import metadata_problems

    assert metadata_problems({"dynamic_multimask_stability_delta": None}) == [
        "dynamic_multimask_stability_delta is null, expected a number"]
    assert metadata_problems({"dynamic_multimask_via_stability": "yes"}) == [
        'dynamic_multimask_via_stability is "yes", expected true or false']
    assert metadata_problems({"dynamic_multimask_stability_delta": 0.05, "dynamic_multimask_stability_thresh": 0.98,
                              "dynamic_multimask_via_stability": True}) == []


@pytest.mark.parametrize("key", ["pixel_std", "pixel_mean", "input_size"])
def test_a_file_without_what_its_runtime_reads_is_refused_at_the_seam(tiny_sam_artifacts: TinySamArtifacts,
                                                                       tmp_path: Path, key: str) -> None:
    """An encoder stripped of a key its preprocessing reads is refused by every verb in one line naming the key
    (it was ``unexpected KeyError: 'pixel_std'``), and by the Python API the same way."""
    import onnx

    from tests.cli_helpers import assert_user_error, run
    from vitdeploy.runtime import SamPredictor

    model = onnx.load(str(tiny_sam_artifacts.encoder))
    kept = [(p.key, p.value) for p in model.metadata_props if p.key != f"vitdeploy.{key}"]
    del model.metadata_props[:]
    for k, v in kept:
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    stripped = tmp_path / "stripped.onnx"
    onnx.save(model, str(stripped))
    image = tmp_path / "img.png"
    from PIL import Image

    from tests.sam_tiny import sample_image
    Image.fromarray(sample_image(40, 60, seed=1)).save(image)
    decoder = str(tiny_sam_artifacts.decoder)
    verbs = {
        "predict": ["predict", "-e", str(stripped), "-d", decoder, "-i", str(image), "--point", "10,10",
                    "-o", str(tmp_path / "m.png")],
        "segment-all": ["segment-all", "-e", str(stripped), "-d", decoder, "--image", str(image),
                        "--output", str(tmp_path / "all.json")],
        "embed": ["embed", "-e", str(stripped), "--images", str(tmp_path), "--out-dir", str(tmp_path / "emb")],
    }
    for verb, args in verbs.items():
        code, output = run(*args)
        assert_user_error(code, output, "'stripped.onnx' has damaged vitdeploy metadata", f"it lacks '{key}'")
        assert "KeyError" not in output, verb
    with pytest.raises(InputError, match=f"it lacks '{key}', which a sam_image_encoder file carries"):
        SamPredictor(stripped, decoder)


def _tuned(model: Path, chosen: dict, passed: bool = True, **changes) -> Path:
    """A profile shaped as 'vitdeploy tune' writes it: the chosen deployment among the candidates, with its verdict."""
    other = {"runtime": "onnxruntime", "precision": "file", "threads": 1, "settings": {"fused_attention": False}}
    candidates = [{"label": "x", "deployment": chosen, "passed": passed}, {"label": "y", "deployment": other, "passed": True}]
    return _profile(model, chosen, candidates=candidates, **changes)


ORT = {"runtime": "onnxruntime", "precision": "file", "threads": 1, "settings": {}}


@pytest.mark.parametrize("chosen,passed,changes,refusal", [
    (ORT, False, {}, "chooses a deployment that is not one of its passing candidates"),
    ({**ORT, "threads": 256}, True, {}, "threads is 256, expected a whole number from 1 to this machine's"),
    ({**ORT, "threads": True}, True, {}, "threads is true, expected a whole number"),
    ({"runtime": "openvino", "precision": "file", "threads": 1, "settings": {"gelu_apart": "yes"}}, True, {},
     'gelu_apart is "yes", expected true or false'),
    ({**ORT, "settings": {"session_config": {"session.use_env_allocators": "1"}}}, True, {},
     "session_config is not a setting 'vitdeploy tune' writes"),
    ({**ORT, "settings": {"profile_prefix": "/tmp/x"}}, True, {}, "profile_prefix is not a setting 'vitdeploy tune' writes"),
    (ORT, True, {"machine": ["x"]}, "has a 'machine' that is not an object"),
    (ORT, True, {"runtime_versions": "1.0"}, "has a 'runtime_versions' that is not an object"),
    (ORT, True, {"candidates": {"a": 1}}, "has a 'candidates' that is not a list"),
])
def test_a_hand_edited_profile_is_held_to_what_tune_writes(encoder: Path, chosen: dict, passed: bool, changes: dict,
                                                           refusal: str) -> None:
    """A profile is trusted as far as 'vitdeploy tune' writes it: anything else is refused in one line (each of these
    was followed before)."""
    if "candidates" in changes:
        _profile(encoder, chosen, **changes)
    else:
        _tuned(encoder, chosen, passed, **changes)
    with pytest.raises(InputError, match=re.escape(refusal)):
        resolve(encoder)


@pytest.mark.parametrize("policy", ["bf16", "fp16"])
def test_a_reduced_precision_profile_is_refused_on_a_cpu_without_its_units(encoder: Path, policy: str,
                                                                         monkeypatch) -> None:
    monkeypatch.setenv("VITDEPLOY_CPU_MASK", "amx*,avx512*")  # the profile's machine and this one: AVX2 only
    _tuned(encoder, {"runtime": "openvino", "precision": policy, "threads": 1, "settings": {}})
    with pytest.raises(InputError, match=f"it runs {policy.upper()}, and this CPU has no {policy.upper()} units"):
        resolve(encoder)


def test_validate_names_a_missing_random_seed(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path) -> None:
    """A random-weights file without its seed: 'validate' says which key is missing (it was a KeyError)."""
    import onnx

    from tests.cli_helpers import assert_user_error, run

    model = onnx.load(str(tiny_sam_artifacts.encoder))
    kept = [(p.key, p.value) for p in model.metadata_props if p.key != "vitdeploy.random_seed"]
    del model.metadata_props[:]
    for k, v in kept:
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    onnx.save(model, str(tmp_path / "noseed.onnx"))
    code, output = run("validate", str(tmp_path / "noseed.onnx"), "--random-inputs", "1", "--runs", "0")
    assert_user_error(code, output, "records no seed", "'random_seed' is missing")


def test_a_files_metadata_is_read_once_per_version(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a predictor asks for the encoder's metadata from the decision, the runner, the seam and the
    application: the file is read once; a file replaced since is read again, and callers cannot change the cache."""
    import vitdeploy.metadata as metadata_module
    from vitdeploy.runtime import SamPredictor

    encoder = Path(shutil.copy(tiny_sam_artifacts.encoder, tmp_path / "encoder.onnx"))
    reads = []
    real = metadata_module.read_metadata_props
    monkeypatch.setattr(metadata_module, "read_metadata_props", lambda p: reads.append(p) or real(p))
    SamPredictor(encoder, tiny_sam_artifacts.decoder, runtime="onnxruntime")
    assert [Path(p).name for p in reads].count("encoder.onnx") == 1, reads
    first = metadata_module.read_onnx_metadata(encoder)
    first["variant"] = "changed by a caller"
    assert metadata_module.read_onnx_metadata(encoder)["variant"] != "changed by a caller"
    shutil.copy(tiny_sam_artifacts.decoder, encoder)  # replaced: another file under the same name
    assert metadata_module.read_onnx_metadata(encoder)["family"] == "sam_mask_decoder"
