"""``--runtime auto``'s first-use probe (vitdeploy/runtime/deploy/probe.py and the modules beside it): who is eligible on each kind of CPU (and
why the rest is not), the part of the real graph it times, the choice it makes here, and its cache per machine."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.sam_tiny import TinySamArtifacts
from vitdeploy.cpu_features import CpuFeatures, available_cores, cpu_features
from vitdeploy.metadata import read_onnx_metadata
from vitdeploy.runtime.deploy import auto as auto_module
from vitdeploy.runtime.deploy import graph_part as graph_part_module
from vitdeploy.runtime.deploy import probe as probe_module
from vitdeploy.runtime.deploy import timing as timing_module
from vitdeploy.runtime.deploy.candidates import eligible
from vitdeploy.runtime.deploy.decisions import DECISION_FORMAT, decision_key, decision_path
from vitdeploy.runtime.deploy.graph_part import probe_part
from vitdeploy.runtime.deploy.probe import decide, probe

pytest_plugins = ["tests.sam_tiny_fixtures", "tests.sam2_video_fixtures"]

BOTH = frozenset({"onnxruntime", "openvino"})
#: The CPU kinds the decision must hold on, constructed (their flags as /proc/cpuinfo or the auxiliary vector name them).
CPUS = {
    "Intel Xeon with AMX": CpuFeatures("Intel Xeon", "x86_64", frozenset(
        {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"})),
    "AMD Zen 4 (AVX512-BF16, no AMX)": CpuFeatures("AMD EPYC", "x86_64", frozenset(
        {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"})),
    "Intel Ice Lake (AVX-512 without BF16)": CpuFeatures("Intel Xeon", "x86_64", frozenset(
        {"avx2", "fma", "avx512f", "avx512_vnni"})),
    "AMD Zen 3 (AVX2 only)": CpuFeatures("AMD EPYC", "x86_64", frozenset({"avx2", "fma"})),
    "Intel client with AVX-VNNI": CpuFeatures("Intel Core", "x86_64", frozenset({"avx2", "fma", "avx_vnni"})),
    "Intel Xeon with AMX and AVX512-FP16": CpuFeatures("Intel Xeon", "x86_64", frozenset(
        {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16"})),
    "aarch64 without FP16 arithmetic (Cortex-A72)": CpuFeatures("Cortex-A72", "aarch64", frozenset({"fp", "asimd"}),
                                                                 source="auxv"),
    "aarch64 with FP16 arithmetic and dot products (Cortex-A76)": CpuFeatures("Cortex-A76", "aarch64", frozenset(
        {"fp", "asimd", "fphp", "asimdhp", "asimddp"}), source="auxv"),
    "aarch64 with SVE, i8mm and BF16 (Neoverse-V1)": CpuFeatures("Neoverse-V1", "aarch64", frozenset(
        {"fp", "asimd", "fphp", "asimdhp", "asimddp", "i8mm", "bf16", "sve"}), source="auxv"),
    "aarch64 with dot products and i8mm, no FP16 flag (constructed)": CpuFeatures("Neoverse-N2", "aarch64", frozenset(
        {"asimd", "asimddp", "i8mm"}), source="auxv"),
}
BF16_UNITS = {"Intel Xeon with AMX", "AMD Zen 4 (AVX512-BF16, no AMX)", "Intel Xeon with AMX and AVX512-FP16"}
#: FP16 arithmetic: the policy's units (runtime_facts.json), named as the probe names them
FP16_UNITS = {"Intel Xeon with AMX and AVX512-FP16": "avx512_fp16",
              "aarch64 with FP16 arithmetic and dot products (Cortex-A76)": "asimdhp",
              "aarch64 with SVE, i8mm and BF16 (Neoverse-V1)": "asimdhp"}


@pytest.fixture(autouse=True)
def _probe_on(monkeypatch) -> None:
    monkeypatch.setenv("VITDEPLOY_PROBE", "1")  # tests/conftest.py turns it off for every other test


@pytest.mark.parametrize("cpu", list(CPUS))
def test_the_candidates_on_each_kind_of_cpu_and_why_the_rest_are_left_out(cpu: str,
                                                                         tiny_sam_artifacts: TinySamArtifacts) -> None:
    """Numerics decide who is eligible, not a list of CPUs: BF16 and FP16 wherever the CPU has the policy's units and
    the family's budget is proven (both for SAM encoders), the file's own math on every runtime everywhere; a decoder
    (budget not proven) and an INT8 file never get a reduced policy; a file holding vitdeploy's fused kernel stays off
    OpenVINO."""
    from vitdeploy.runtime_facts import PROVEN_POLICIES

    features = CPUS[cpu]
    encoder = read_onnx_metadata(tiny_sam_artifacts.encoder)
    found = eligible(encoder, features, BOTH, threads=2)
    labels = [d.label() for d in found.candidates]
    no_bf16 = "openvino bf16: this CPU has no BF16 units (amx_bf16 or avx512_bf16)"
    no_fp16 = "openvino fp16: this CPU has no FP16 units (asimdhp or avx512_fp16)"
    reduced = [f"openvino {policy}" for policy, units in (("bf16", BF16_UNITS), ("fp16", FP16_UNITS)) if cpu in units]
    assert labels == [*reduced, "openvino file", "onnxruntime file"], labels
    assert found.left_out == tuple(line for line, has in ((no_bf16, cpu in BF16_UNITS), (no_fp16, cpu in FP16_UNITS))
                                   if not has), found.left_out
    assert all(d.threads == 2 and d.source == "probe" for d in found.candidates)

    decoder = eligible(read_onnx_metadata(tiny_sam_artifacts.decoder), features, BOTH)
    assert [d.label() for d in decoder.candidates] == ["openvino file", "onnxruntime file"]
    proven = {policy: ", ".join(PROVEN_POLICIES[policy]["families"]) for policy in ("bf16", "fp16")}
    bf16 = (f"openvino bf16: this CPU has {' and '.join(features.policy_units('bf16'))}, but its parity budget is proven "
            f"for {proven['bf16']}, not for sam_mask_decoder") if cpu in BF16_UNITS else no_bf16
    fp16 = (f"openvino fp16: this CPU has {FP16_UNITS[cpu]}, but its parity budget is proven for {proven['fp16']}, not "
            "for sam_mask_decoder") if cpu in FP16_UNITS else no_fp16
    assert decoder.left_out == (bf16, fp16), decoder.left_out
    int8 = eligible({**encoder, "precision": "int8"}, features, BOTH)
    assert "openvino bf16: the file is int8, and a policy reduces FP32 files only" in int8.left_out
    form = {"attention": "fused-kernel", "nodes": ["attention_0"], "source": "encoder.onnx", "kernel_path": "avx2"}
    fused = eligible({**encoder, "cpu_form": form}, features, BOTH)
    assert [d.label() for d in fused.candidates] == ["onnxruntime file"]
    assert any(line.startswith("openvino: the file ") for line in fused.left_out), fused.left_out
    alone = eligible(encoder, features, frozenset({"onnxruntime"}))
    assert [d.label() for d in alone.candidates] == ["onnxruntime file"]
    assert "openvino: not installed (pip install 'vitdeploy[openvino]')" in alone.left_out


def _with_intermediates(model: Path, names: list[str], out: Path) -> Path:
    """``model`` with the tensors ``names`` as extra graph outputs (what the full graph computes there)."""
    import onnx

    proto = onnx.load(str(model))
    known = {o.name for o in proto.graph.output}
    proto.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names if n not in known)
    onnx.save(proto, str(out))
    return out


def test_the_probe_part_is_the_named_blocks_of_the_real_graph(tiny_sam_artifacts: TinySamArtifacts,
                                                            tmp_path: Path) -> None:
    """A large file is probed on one windowed and one global block, cut from the real graph: fed what the whole graph
    computes at the blocks' inputs, the part gives what the whole graph computes at their outputs, exactly."""
    import onnx
    import onnxruntime as ort

    metadata = read_onnx_metadata(tiny_sam_artifacts.encoder)
    part = probe_part(tiny_sam_artifacts.encoder, metadata, tmp_path, whole_below=0)
    assert part.what == "blocks.0, blocks.1 of 3 blocks, at the file's shapes", part.what
    sliced = onnx.load(str(part.path))
    assert {p.key: p.value for p in sliced.metadata_props}["vitdeploy.family"] == "sam_image_encoder"
    size = json.loads(metadata["architecture"]) if isinstance(metadata["architecture"], str) else metadata["architecture"]
    grid = size["img_size"] // size["patch_size"]
    assert {k: v.shape for k, v in part.feeds.items()} == {k: (1, grid, grid, size["embed_dim"]) for k in part.feeds}
    assert len(part.feeds) == 1  # blocks 0 and 1 follow each other: the part runs them one after the other
    outputs = [o.name for o in sliced.graph.output]
    full = _with_intermediates(tiny_sam_artifacts.encoder, list(part.feeds) + outputs, tmp_path / "full.onnx")
    image = np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32)
    whole = ort.InferenceSession(str(full), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in whole.get_outputs()], whole.run(None, {"image": image})))
    cut = ort.InferenceSession(str(part.path), providers=["CPUExecutionProvider"])
    from_part = cut.run(outputs, {name: got[name] for name in part.feeds})
    for name, value in zip(outputs, from_part):
        np.testing.assert_array_equal(value, got[name], err_msg=name)

    whole_part = probe_part(tiny_sam_artifacts.encoder, metadata, tmp_path)  # a tiny file is probed whole
    assert whole_part.what == "the whole graph" and whole_part.path == tiny_sam_artifacts.encoder
    assert list(whole_part.feeds) == ["image"] and whole_part.feeds["image"].shape == (1, 3, 64, 64)


def test_an_int8_files_blocks_are_cut_as_its_fp32_sources_are(tiny_sam_artifacts: TinySamArtifacts,
                                                               tmp_path: Path) -> None:
    """'calibrate -p int8' inserts Q/DQ nodes without the exporter's name scopes, inside the blocks; the probe counts
    each with the node it feeds, so the part is the same blocks with the same inputs as the FP32 source's (it ran the
    whole graph before: SAM ViT-B's INT8 file took 43.6 s to probe on an AMD EPYC Zen 4, 12.1-12.7 s cut)."""
    import onnx

    from vitdeploy.precision.calibrate import CalibrateOptions, calibrate_onnx

    int8 = tmp_path / "int8.onnx"
    calibrate_onnx(tiny_sam_artifacts.encoder, int8, CalibrateOptions(precision="int8", holdout=4, eager=False,
                                                                      cache_dir=str(tmp_path / "c"), threads=2))
    nodes = onnx.load(str(int8)).graph.node
    assert any(n.op_type == "DequantizeLinear" and not graph_part_module._scopes(n) for n in nodes)  # what is tested
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    fp32 = probe_part(tiny_sam_artifacts.encoder, read_onnx_metadata(tiny_sam_artifacts.encoder), tmp_path / "a",
                      whole_below=0)
    part = probe_part(int8, read_onnx_metadata(int8), tmp_path / "b", whole_below=0)
    assert part.what == fp32.what == "blocks.0, blocks.1 of 3 blocks, at the file's shapes", part.what
    assert {k: v.shape for k, v in part.feeds.items()} == {k: v.shape for k, v in fp32.feeds.items()}
    ops = {n.op_type for n in onnx.load(str(part.path)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "MatMul"} <= ops, ops


@pytest.mark.parametrize("smt, short", [(True, False), (False, True), (False, False)],
                         ids=["SMT siblings", "one thread per core, short runs", "one thread per core, long runs"])
def test_the_probe_times_every_eligible_candidate_and_chooses_the_fastest_that_holds_its_budget(
        tiny_sam_artifacts: TinySamArtifacts, monkeypatch: pytest.MonkeyPatch, smt: bool, short: bool) -> None:
    pytest.importorskip("openvino")
    # the CPUs this process may use, constructed: two threads per physical core, or one; and the tiny part's runs
    # counted as short (as they are) or, with the bar at 0 ms, as long as a full-size block's
    monkeypatch.setattr(timing_module, "physical_cores", lambda: available_cores() // 2 if smt else available_cores())
    if not short:
        monkeypatch.setattr(timing_module, "SHORT_RUN_MS", 0.0)
    decision = probe(tiny_sam_artifacts.encoder, whole_below=0)
    found = eligible(read_onnx_metadata(tiny_sam_artifacts.encoder))
    n = len(found.candidates)
    assert [t.deployment for t in decision.timings[:n]] == list(found.candidates)
    # the threads axis: the fastest of them once more at half its threads, where SMT siblings share cores or its run
    # is short (with one thread per core a long compute-bound run only loses: the step is left out)
    lead = min((t for t in decision.timings[:n] if t.best_ms is not None and not t.reason), key=lambda t: t.best_ms)
    if available_cores() > 1 and (smt or short):
        (fewer,) = decision.timings[n:]
        assert fewer.deployment == replace(lead.deployment, threads=available_cores() // 2)
    else:
        assert decision.timings[n:] == []
    assert decision.part.startswith("blocks.0, blocks.1 of 3 blocks")
    timed = [t for t in decision.timings if t.best_ms is not None]
    assert all(t.reason == "" and t.cosine >= (0.9999 if t.deployment.precision == "bf16" else 0.99999) for t in timed)
    # each one not timed further was behind the best warm-up by more than the cutoff, or behind the leader's best run
    assert all(_left_by_a_cutoff(t, decision.timings) for t in decision.timings if t.best_ms is None), \
        [t.to_dict() for t in decision.timings]
    assert decision.chosen == min(timed, key=lambda t: t.best_ms).deployment
    assert decision.ranking()[0].deployment == decision.chosen
    assert decision.summary().startswith(f"probed on this CPU in {decision.seconds:.1f} s on blocks.0, blocks.1")


def test_each_candidate_is_opened_and_warmed_up_once(tiny_sam_artifacts: TinySamArtifacts,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference (the judge) keeps the session its warm-up ran on and is timed on it at the end: it was opened and
    warmed up a second time, 2.6 s of SAM ViT-B's probe on the Zen 4. Every session opened is closed."""
    from vitdeploy.runtime.backends.registry import RuntimeEntry

    opened, closed = [], []
    real_open = RuntimeEntry.open

    def counting_open(self, path, options, **settings):
        runner = real_open(self, path, options, **settings)
        key = (self.name, options.policy, options.threads, tuple(sorted(settings.items())))
        opened.append(key)
        real_close = runner.close

        def close() -> None:
            closed.append(key)
            real_close()

        runner.close = close
        return runner

    monkeypatch.setattr(RuntimeEntry, "open", counting_open)
    monkeypatch.setattr(timing_module, "CUTOFF", 1e9)  # every candidate within reach: the reference is timed too
    decision = probe(tiny_sam_artifacts.encoder, whole_below=0)
    assert len(opened) == len(set(opened)) == len(decision.timings), opened
    assert sorted(closed) == sorted(opened)
    reference = next(t for t in decision.timings if t.deployment.runtime == "onnxruntime" and t.deployment.precision == "file")
    assert reference.best_ms is not None and reference.warmup_ms is not None


@pytest.mark.parametrize("rank", [False, True])
def test_the_fastest_warm_up_is_timed_first_and_sets_the_bar(rank: bool, tiny_sam_artifacts: TinySamArtifacts,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Candidates are timed fastest warm-up first, and one whose warm-up is behind the leader's best run by more than
    LEADER_CUTOFF is not timed (here the bar is constructed at 0, and the short-run exemption lifted: only the first
    timed candidate, the fastest warm-up, is timed; on SAM ViT-B it spares BF16 and ONNX Runtime 1.1 s each). tune's
    ranking (``rank``) times them all: it judges the fastest few in full, not only the one that can win."""
    monkeypatch.setattr(timing_module, "LEADER_CUTOFF", 0.0)
    monkeypatch.setattr(timing_module, "SHORT_RUN_MS", 0.0)
    monkeypatch.setattr(timing_module, "CUTOFF", 1e9)
    decision = probe(tiny_sam_artifacts.encoder, whole_below=0, fewer_threads=False, rank=rank)
    held = [t for t in decision.timings if not t.reason]
    assert len(held) > 1, decision.summary()
    timed = [t for t in held if t.best_ms is not None]
    if rank:
        assert timed == held
    else:
        assert len(timed) == 1 and timed[0].warmup_ms == min(t.warmup_ms for t in held)
        assert decision.chosen == timed[0].deployment


def test_a_candidate_that_misses_its_budget_is_never_chosen(tiny_sam_artifacts: TinySamArtifacts, monkeypatch) -> None:
    """The probe holds every candidate's outputs on the part to its budget against the file's math on ONNX Runtime: a
    runtime that computes something else loses, however fast (here OpenVINO's outputs, made wrong on purpose)."""
    pytest.importorskip("openvino")
    from vitdeploy.runtime.backends.openvino_runner import OpenVinoRunner

    real_run = OpenVinoRunner.run
    monkeypatch.setattr(OpenVinoRunner, "run", lambda self, feeds: {k: np.ascontiguousarray(v[..., ::-1]) for k, v in
                                                                     real_run(self, feeds).items()})
    decision = probe(tiny_sam_artifacts.encoder)
    assert decision.chosen.runtime == "onnxruntime", decision.summary()
    for timing in decision.timings:
        if timing.deployment.runtime == "openvino":
            budget = "fp32" if timing.deployment.precision == "file" else timing.deployment.precision
            assert f"over its '{budget}' budget" in timing.reason, timing.reason


def test_the_decision_is_cached_per_machine_and_runtime_version_and_said_once(tiny_sam_artifacts: TinySamArtifacts,
                                                                              tmp_path: Path, monkeypatch,
                                                                              capsys) -> None:
    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", str(tmp_path / "cache"))
    model = Path(shutil.copy(tiny_sam_artifacts.encoder, tmp_path / "encoder.onnx"))
    metadata = read_onnx_metadata(model)
    first = decide(model, metadata)
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith(f"vitdeploy: encoder.onnx runs on {first.label()} (probed on this CPU in")
    assert "VITDEPLOY_PROBE=0 skips the probe" in said[0]
    assert first.source.startswith("probe: probed on this CPU in")
    key = decision_key(model, metadata, available_cores())
    path = decision_path(key)
    data = json.loads(path.read_text())
    assert data["format"] == DECISION_FORMAT and data["chosen"] == first.to_dict()
    assert data["key"]["machine"]["cpu"] and data["key"]["runtime_versions"]["onnxruntime"]

    def no_probe(*args, **kwargs):
        raise AssertionError("probed again")

    monkeypatch.setattr(probe_module, "probe", no_probe)
    again = decide(model, metadata)
    assert again.to_dict() == first.to_dict() and again.source.startswith(f"probe, cached {path}")
    assert capsys.readouterr().err == ""  # said once: a cached decision is not said again
    # another checkpoint of the same architecture shares the decision; another CPU, runtime version or thread count
    # never reads it
    other_weights = {**metadata, "random_seed": 7}
    assert decision_path(decision_key(model, other_weights, available_cores())) == path
    avx2 = CpuFeatures("AMD EPYC", "x86_64", frozenset({"avx2", "fma"}))
    assert decision_path(decision_key(model, metadata, available_cores(), avx2)) != path
    assert decision_path(decision_key(model, metadata, available_cores() + 1)) != path
    monkeypatch.setattr("vitdeploy.runtime.deploy.decisions.runtime_versions", lambda: {"onnxruntime": "0.0"})
    with pytest.raises(AssertionError, match="probed again"):
        decide(model, metadata)


def test_a_damaged_or_foreign_cached_decision_is_probed_again(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path,
                                                             monkeypatch) -> None:
    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", str(tmp_path / "cache"))
    model = Path(shutil.copy(tiny_sam_artifacts.encoder, tmp_path / "encoder.onnx"))
    metadata = read_onnx_metadata(model)
    decide(model, metadata)
    path = decision_path(decision_key(model, metadata, available_cores()))
    for damage in ("{not json", json.dumps({"format": DECISION_FORMAT, "key": {}, "chosen": {}}),
                   json.dumps({**json.loads(path.read_text()), "chosen": {"runtime": "onnxruntime", "threads": 999}})):
        path.write_text(damage)
        again = decide(model, metadata)
        assert again.source.startswith("probe: probed on this CPU"), again.source
        assert json.loads(path.read_text())["format"] == DECISION_FORMAT  # written again, whole


def test_auto_probes_without_a_profile_and_every_bypass_skips_it(tiny_sam_artifacts: TinySamArtifacts, tmp_path: Path,
                                                                 monkeypatch) -> None:
    """The probe is ``--runtime auto``'s second source: a fitting profile comes first; ``VITDEPLOY_PROBE=0``, an asked
    runtime and an asked precision policy bypass it."""
    from vitdeploy.runtime.deploy.auto import resolve
    from vitdeploy.runtime.deploy.loader import open_runner

    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", str(tmp_path / "cache"))
    model = Path(shutil.copy(tiny_sam_artifacts.encoder, tmp_path / "encoder.onnx"))
    chosen = resolve(model)
    assert chosen.source.startswith("probe: "), chosen.source
    with open_runner(model, runtime="auto") as runner:
        assert runner.deployment.source.startswith("probe, cached ") and runner.name.startswith(chosen.runtime)

    def no_probe(*args, **kwargs):
        raise AssertionError("probed")

    monkeypatch.setattr(auto_module, "decide", no_probe)
    asked = resolve(model, precision="file")  # no probe (decide raises): the rows, as before the probe
    assert asked.precision == "file" and not asked.source.startswith("probe"), asked
    with open_runner(model, runtime="onnxruntime") as runner:
        assert runner.name == "onnxruntime-cpu"
    monkeypatch.setenv("VITDEPLOY_PROBE", "0")
    off = resolve(model)
    assert off.source.endswith("; probe off (VITDEPLOY_PROBE=0)"), off.source


def test_doctor_says_per_file_kind_what_auto_decides_and_where_it_comes_from(tiny_sam_artifacts: TinySamArtifacts,
                                                                              tmp_path: Path, monkeypatch) -> None:
    """A decision cached for this machine (the probe's), the probe's candidates where none is cached yet, and the rows
    with the probe off; a decision cached for another CPU is not shown."""
    from vitdeploy.doctor import DoctorReport
    from vitdeploy.runtime.deploy.auto import explain

    def auto_decisions(features):  # what doctor shows per file kind: auto's own explanation
        return explain(features)[1]

    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", str(tmp_path / "cache"))
    metadata = read_onnx_metadata(tiny_sam_artifacts.encoder)
    chosen = decide(tiny_sam_artifacts.encoder, metadata)
    lines = auto_decisions(cpu_features())
    (encoder,) = [line for line in lines if line.startswith("sam_image_encoder fp32: ")]
    assert encoder.startswith(f"sam_image_encoder fp32: {chosen.label()} for tiny, probed ")
    assert str(tmp_path / "cache" / "decisions") in encoder
    (decoder,) = [line for line in lines if line.startswith("sam_mask_decoder fp32: ")]
    assert decoder.startswith("sam_mask_decoder fp32: probe on first use among openvino file, onnxruntime file; left "
                              "out: openvino bf16: "), decoder
    text = DoctorReport("0", {}, [], {"auto_decisions": lines}).text()
    assert f"\n       {encoder}\n" in text
    # another CPU: one flag fewer of those a decision is keyed by (on every CPU kind, masked or not), not its decision
    from vitdeploy.cpu_features import REPORTED  # what machine_fingerprint keys by

    hidden = next(flag for flag in REPORTED if flag in cpu_features().flags)
    monkeypatch.setenv("VITDEPLOY_CPU_MASK", ",".join(filter(None, [os.environ.get("VITDEPLOY_CPU_MASK"), hidden])))
    assert not any(line.startswith("sam_image_encoder fp32: ") and "probed" in line
                   for line in auto_decisions(cpu_features()))
    monkeypatch.setenv("VITDEPLOY_PROBE", "0")
    off = auto_decisions(cpu_features())
    assert all(line.endswith("(VITDEPLOY_PROBE=0: the probe is off)") for line in off), off


def test_the_video_predictor_opens_each_of_its_four_graphs_through_the_probe(sam2_video: dict, tmp_path: Path,
                                                                              monkeypatch) -> None:
    """Sam2VideoPredictor's image encoder, decoder, memory encoder and memory attention are each decided on their own
    (whole graphs: small files), with their own candidates: a reduced policy is offered to a graph only where its
    budget is proven for that graph's family (BF16: the memory attention; FP16: the memory attention and the memory
    encoder, the graphs whose reduced math holds a clip's masks, test_sam2_video_predictor.py), and only on a CPU with
    the policy's units."""
    from vitdeploy.runtime.apps.sam2.video_predictor import Sam2VideoPredictor
    from vitdeploy.runtime_facts import PROVEN_POLICIES

    def offered_to(family: str) -> set[str]:
        return {"file"} | {policy for policy, proof in PROVEN_POLICIES.items()
                           if family in proof["families"] and cpu_features().policy_units(policy)}

    monkeypatch.setenv("VITDEPLOY_CACHE_DIR", str(tmp_path / "cache"))
    predictor = Sam2VideoPredictor(sam2_video["encoder"], sam2_video["decoder"], sam2_video["memory_encoder"],
                                   sam2_video["memory_attention"])
    runners = {"encoder": predictor.image_encoder, "decoder": predictor.decoder,
               "memory_encoder": predictor.memory_encoder, "memory_attention": predictor.memory_attention}
    for part, runner in runners.items():
        decision = runner.deployment
        assert decision.source.startswith("probe: probed on this CPU in") and "on the whole graph" in decision.source, part
        assert runner.name == f"{decision.runtime}-cpu", (part, runner.name)
        assert decision.precision in offered_to(runner.metadata["family"]), (part, decision.label())
    # the memory attention is timed over the bank a tracked object has once it is full (the cost, and the ranking, grow
    # with it): the prompted frame and num_maskmem - 1 recent ones, every pointer slot
    metadata = read_onnx_metadata(sam2_video["memory_attention"])
    feeds = probe_part(sam2_video["memory_attention"], metadata, tmp_path).feeds
    assert feeds["memory_features"].shape[1] == metadata["tracker"]["num_maskmem"] <= metadata["frame_slots"]
    assert feeds["pointer_tokens"].shape[1] == metadata["pointer_slots"]
    cached = [json.loads(p.read_text()) for p in (tmp_path / "cache" / "decisions").glob("sam2_*.json")]
    assert len(cached) == 4
    for data in cached:
        assert all(not t["reason"] for t in data["timings"]), data["timings"]
        family = data["key"]["file"]["metadata"]["family"]
        offered = {t["deployment"]["precision"] for t in data["timings"]}
        assert offered == offered_to(family), (family, offered)
        for policy in set(PROVEN_POLICIES) - offered:  # each one left out says why
            why = ("but its parity budget is proven for " if cpu_features().policy_units(policy)
                   else f"this CPU has no {policy.upper()} units")
            assert any(line.startswith(f"openvino {policy}: ") and why in line for line in data["left_out"]), \
                data["left_out"]


def test_a_candidate_that_crashes_the_worker_is_ruled_out_and_the_program_goes_on(tiny_sam_artifacts: TinySamArtifacts,
                                                                                   tmp_path: Path, monkeypatch) -> None:
    """``auto``'s probe runs in a worker process: a runtime that kills it on a candidate (here OpenVINO, made to raise
    SIGSEGV on its first run by a ``sitecustomize`` the worker's Python loads: a real native crash) rules out that
    candidate, the worker runs again without it, and the fastest of the rest is chosen."""
    pytest.importorskip("openvino")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import os, signal\n"
        "from vitdeploy.runtime.backends import openvino_runner\n"
        "openvino_runner.OpenVinoRunner.run = lambda self, feeds: os.kill(os.getpid(), signal.SIGSEGV)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")])))
    decision = probe(tiny_sam_artifacts.encoder, isolate=True)
    assert decision.chosen.runtime == "onnxruntime", decision.summary()
    n = len(eligible(read_onnx_metadata(tiny_sam_artifacts.encoder)).candidates)
    for k, timing in enumerate(decision.timings):
        if timing.deployment.runtime == "openvino":
            assert timing.reason.startswith("could not run: it ended the probe's worker process (signal SIGSEGV"), timing
        elif k < n:  # every eligible candidate that runs: held and timed
            assert timing.reason == "" and timing.best_ms is not None, timing
        else:  # the threads step: held; timed unless its warm-up was behind a cutoff (as it may be on a busy machine)
            assert timing.reason == "" and (timing.best_ms is not None
                                            or _left_by_a_cutoff(timing, decision.timings)), timing


def test_a_hiera_file_is_probed_on_one_block_of_each_kind(sam2_video: dict, tmp_path: Path) -> None:
    """SAM 2's encoder names its trunk's blocks with a wildcard: the probe takes the first block of each kind (the
    same input shapes and operators: a stage, its pooling transition, windowed and global blocks), found in the graph;
    fed what the whole graph computes at their inputs, the part gives what the whole graph computes at its outputs."""
    import onnx
    import onnxruntime as ort

    encoder = sam2_video["encoder"]
    metadata = read_onnx_metadata(encoder)
    part = probe_part(encoder, metadata, tmp_path, whole_below=0)
    named, total = part.what.split(" of ")[0].split(", "), int(part.what.split(" of ")[1].split()[0])
    assert 1 < len(named) <= total and all(name.startswith("blocks.") for name in named), part.what  # (the tiny
    # trunk has 5 blocks of 5 kinds; hiera-t at 1024 gave 8 of 12)
    sliced = onnx.load(str(part.path))
    outputs = [o.name for o in sliced.graph.output]
    full = _with_intermediates(encoder, list(part.feeds) + outputs, tmp_path / "full.onnx")
    whole = ort.InferenceSession(str(full), providers=["CPUExecutionProvider"])
    image = np.random.default_rng(2).standard_normal(whole.get_inputs()[0].shape).astype(np.float32)
    got = dict(zip([o.name for o in whole.get_outputs()], whole.run(None, {whole.get_inputs()[0].name: image})))
    cut = ort.InferenceSession(str(part.path), providers=["CPUExecutionProvider"])
    for name, value in zip(outputs, cut.run(outputs, {name: got[name] for name in part.feeds})):
        np.testing.assert_allclose(value, got[name], rtol=0, atol=1e-5 * float(np.abs(got[name]).max()), err_msg=name)


def _left_by_a_cutoff(timing, timings) -> bool:
    """Whether the probe's cutoffs leave ``timing`` untimed: its warm-up behind the best warm-up by more than CUTOFF,
    or behind the best timed run by more than LEADER_CUTOFF where that run is not short (the rules in _measure)."""
    best_warmup = min(t.warmup_ms for t in timings if t.warmup_ms is not None)
    fastest = min((t.best_ms for t in timings if t.best_ms is not None and not t.reason), default=None)
    return (timing.warmup_ms > timing_module.CUTOFF * best_warmup
            or fastest is not None and fastest >= timing_module.SHORT_RUN_MS
            and timing.warmup_ms > timing_module.LEADER_CUTOFF * fastest)


@pytest.mark.parametrize(("durations_ms", "fastest_ms", "runs"), [
    ((1196, 1190), 538.0, 1),   # more than BEHIND x the fastest: not run again (Zen 4: ONNX Runtime against OpenVINO BF16)
    ((600, 590), 538.0, 2),     # within reach: timed twice, the best kept
    ((1196, 1190), None, 2),    # the first candidate timed: nothing to be behind
    ((5000,), 538.0, 1),        # one run asked (a long warm-up)
])
def test_a_timed_run_far_behind_the_fastest_is_not_repeated(durations_ms, fastest_ms, runs: int) -> None:
    """A candidate whose timed run is more than BEHIND times the fastest candidate's best so far cannot win the choice
    with another run: the probe does not spend one (its decision is the same, its time shorter)."""
    ticks = iter(t for d in durations_ms for t in (0.0, d / 1e3))  # the clock read before and after each run
    done: list[int] = []
    got = timing_module.timed_runs(lambda: done.append(1), len(durations_ms), fastest_ms, clock=lambda: next(ticks))
    assert len(got) == len(done) == runs
    assert got == pytest.approx(list(durations_ms[:runs]))
