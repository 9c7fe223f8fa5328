"""A reduced precision judged against the official's own (vitdeploy/validation/official_practice.py): SAM 3's four
files and SAM 2's four on OpenVINO in BF16 and FP16 against the official ``sam3`` and ``sam2`` modules under their
published BF16 autocast, measured beside them on the same inputs (tiny seeded models); the budgets the probe and
``tune`` use where no official runs beside them; and which SAM 3 file is offered which policy on each kind of CPU."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.family_exports import family_export
from tests.runtime.deploy.test_probe import BOTH, CPUS
from tests.sam3_fixtures import (
    openvino_runs,
    sam3_tiny_files,
    sam3_tiny_interactive_file,
)
from vitdeploy.cpu_features import cpu_features
from vitdeploy.parity import TOLERANCES, anchored, budget_for
from vitdeploy.runtime.deploy.candidates import eligible
from vitdeploy.runtime_facts import MODEL_PARTS, PROVEN_POLICIES, official_precision

SAM3_FAMILIES = tuple(name for name, (model, _) in MODEL_PARTS.items() if model == "sam3")
SAM2_FAMILIES = tuple(name for name, (model, _) in MODEL_PARTS.items() if model == "sam2")
POLICIES = ("bf16", "fp16")


def test_the_anchored_budget_is_the_margin_times_the_officials_distance_never_tighter_than_one_rounding() -> None:
    budget = anchored(0.99996, 8e-3, margin=2.0, rounding=2 ** -8, guard=TOLERANCES["bf16"], name="x")
    assert budget.cosine_min == pytest.approx(1 - 4 * 4e-5) and budget.rel_l2_max == pytest.approx(1.6e-2)
    assert budget.max_abs_rel == TOLERANCES["bf16"].max_abs_rel  # one element's error: the named budget's guard
    exact = anchored(1.0, 0.0, margin=2.0, rounding=2 ** -11, guard=TOLERANCES["fp16"], name="x")  # exact official
    assert exact.rel_l2_max == 2 ** -11 and exact.cosine_min == pytest.approx(1 - 2 ** -22 / 2)


def test_a_family_whose_official_publishes_no_reduced_precision_keeps_the_named_budgets() -> None:
    for family in ("sam_image_encoder", "timm_vit", "sam_mask_decoder", None):
        assert official_precision(family) is None
        for precision in (*POLICIES, "fp32", "int8"):
            assert budget_for(precision, family) == TOLERANCES[precision]
    assert official_precision("sam3_detector").precision == "bf16" == official_precision("sam2_image_encoder").precision
    assert budget_for("int8", "sam3_detector") == TOLERANCES["int8"]  # no official INT8 to judge against


@pytest.mark.parametrize("family", SAM3_FAMILIES + SAM2_FAMILIES)
def test_each_family_proven_for_a_policy_has_the_officials_own_distance_recorded(family: str) -> None:
    """The probe's and tune's budget for a proven SAM 3 or SAM 2 policy is the recorded official distance times the
    margin: a family named proven without that record would fall back to a budget the official's own practice misses."""
    practice = official_precision(family)
    for policy in POLICIES:
        if family not in PROVEN_POLICIES[policy]["families"]:
            continue
        record = practice.measured.get(family)
        assert record is not None and record["evidence"], (family, policy)
        budget = budget_for(policy, family)
        assert budget.name == f"{policy} vs official bf16 x2"
        assert budget.rel_l2_max == pytest.approx(max(2 * record["rel_l2"], practice.rounding[policy]))


@pytest.mark.parametrize("cpu", list(CPUS))
def test_each_sam3_file_is_offered_the_policies_its_evidence_proves_on_each_kind_of_cpu(cpu: str) -> None:
    """BF16 where the CPU has BF16 units, FP16 where it has FP16 arithmetic, each only for the SAM 3 files whose
    measurement against the official BF16 holds; the others say why they are left out."""
    features = CPUS[cpu]
    for family in SAM3_FAMILIES:
        found = eligible({"family": family, "precision": "fp32"}, features, BOTH, threads=2)
        offered = {d.precision for d in found.candidates} - {"file"}
        want = {policy for policy in POLICIES
                if family in PROVEN_POLICIES[policy]["families"] and features.policy_units(policy)}
        assert offered == want, (family, offered)
        for policy in set(POLICIES) - want:
            assert any(line.startswith(f"openvino {policy}: ") for line in found.left_out), found.left_out


@pytest.fixture(scope="module")
def official_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """family -> its tiny seeded file: SAM 3's image files (the same model), and SAM 3's tracker files and SAM 2's
    four (tests/family_exports.py, shared by the run)."""
    pytest.importorskip("sam3", reason="the official sam3 package is not installed (scripts/test.sh installs it)")
    pytest.importorskip("sam2", reason="the official sam2 package is not installed (scripts/test.sh installs it)")
    vision, text, detector = sam3_tiny_files(tmp_path_factory)
    image = {"sam3_vision_encoder": vision, "sam3_text_encoder": text, "sam3_detector": detector,
             "sam3_interactive_decoder": sam3_tiny_interactive_file(tmp_path_factory)}
    return {**image, **{family: family_export(tmp_path_factory, family)[0]
                        for family in SAM3_FAMILIES + SAM2_FAMILIES if family not in image}}


#: The image encoders, judged on the bundled images too (16 of them) beside the random inputs.
IMAGE_ENCODERS = ("sam3_vision_encoder", "sam2_image_encoder")


#: (family, policy) judged: SAM 3's files at both policies; SAM 2's at the official's own BF16 (FP16 for its memory
#: graphs is proven by the clip, tests/runtime/apps/test_sam2_video_predictor.py).
JUDGED = [(family, policy) for family in SAM3_FAMILIES for policy in POLICIES] + [(f, "bf16") for f in SAM2_FAMILIES]


@pytest.mark.parametrize(("family", "policy"), JUDGED, ids=[f"{f}-{p}" for f, p in JUDGED])
def test_validate_judges_each_file_against_the_official_bf16_measured_beside_it(official_files, family: str,
                                                                                 policy: str) -> None:
    """``vitdeploy validate --inference-precision`` on a SAM 3 or SAM 2 file runs the official module in FP32 and
    under its BF16 autocast on the same inputs and holds each output to twice the official's own relative L2. Where
    this CPU runs the policy, a family the data file names proven for it holds (the SAM 3 detector in BF16 is left out:
    its presence logit measured 3.4x the official's here on the AMX Xeon, its scores 2.2x at full size; SAM 2's memory
    encoder 2.5x, and its decoder's object score, a single logit, moves as far as the official's own BF16 does, past
    the guard on one element's error). SAM 2's image encoder holds only with OpenVINO's heads transposes in 5-D
    (vitdeploy/runtime/forms/openvino_heads.py): without it, 18x the official's on its image embedding."""
    from vitdeploy.validation.validate_model import ValidateOptions, validate_model

    path = official_files[family]
    if not openvino_runs(path, policy):
        pytest.skip(f"OpenVINO does not run {policy} on this CPU (it reads back another inference precision)")
    images = ("calibration/images",) if family in IMAGE_ENCODERS else ()
    report = validate_model(path, ValidateOptions(runtime="openvino", inference_precision=policy, runs=0,
                                                  random_inputs=8, images=images, threads=2))
    practice = report.practice
    assert practice is not None and practice.inputs == (8 + 16 if images else 8)
    assert [row.output for row in practice.rows] == [result.label for result in report.parity]
    for row in practice.rows:  # the official's own distance is a real one: BF16 autocast changed the numbers
        assert row.official.rel_l2 > 1e-4 or row.output == "text_embeds", row.line()
    if family in PROVEN_POLICIES[policy]["families"]:  # (one left out may hold here and miss at full size: the
        assert report, [row.line() for row in practice.rows]  # interactive decoder in BF16, 1.22x tiny, 2.53x full)
    record = official_precision(family).measured.get(family)
    # The record covers this run where the policy is offered at all, on a CPU with its units: the probe's budget is no
    # tighter than what was measured here. Without them PyTorch's BF16 autocast rounds by another path and moves
    # further (the tiny SAM 2 decoder on an Intel Xeon Ice Lake, AVX-512 without BF16: 0.0209 against the 0.0164
    # recorded on the AMX Xeon), and the probe offers no BF16 there.
    if record is not None and cpu_features().policy_units(policy):
        measured = practice.measured()
        assert measured["rel_l2"] <= record["rel_l2"] and measured["cosine"] >= record["cosine"], (measured, record)
    assert all(math.isfinite(row.deployed.rel_l2) for row in practice.rows)
