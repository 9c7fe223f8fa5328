"""CPU feature detection: parsed from cpuinfo, masked on request, and the decisions derived from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitdeploy.cpu_features import apply_mask, available_cores, cpu_features, parse_cpuinfo, parse_family_model

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16
"""
EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2 fma f16c sha_ni
"""
OLD_X86 = """model name\t: Intel(R) Core(TM)2 Duo
flags\t\t: fpu sse2 ssse3
"""


def _features(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch, mask: str = ""):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    monkeypatch.setenv("VITDEPLOY_CPU_MASK", mask)
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    from vitdeploy.cpu_features import _read

    _read.cache_clear()
    try:
        return cpu_features(str(path))
    finally:
        _read.cache_clear()


@pytest.mark.parametrize(("text", "model", "simd", "saturates"), [
    (XEON, "Intel(R) Xeon(R) Platinum 8480+", "avx512", False),
    (EPYC, "AMD EPYC", "avx2", True),
    (OLD_X86, "Intel(R) Core(TM)2 Duo", "baseline", True),
])
def test_decisions_follow_the_flags(tmp_path, monkeypatch, text, model, simd, saturates) -> None:
    cpu = _features(tmp_path, text, monkeypatch)
    assert (cpu.model, cpu.simd, cpu.u8s8_saturates, cpu.int8_dot) == (model, simd, saturates, not saturates)
    assert cpu.known and model in cpu.summary()


def test_family_and_model_name_the_generation_a_bare_model_name_hides(tmp_path, monkeypatch) -> None:
    # Under KVM a Zen 1 and a Zen 4 both say "AMD EPYC"; the family/model numbers tell them apart in reports.
    assert _features(tmp_path, EPYC, monkeypatch).summary().startswith("AMD EPYC (x86_64, family 23 model 1; avx2")
    zen4 = EPYC.replace("family\t: 23", "family\t: 25").replace("model\t\t: 1\n", "model\t\t: 17\n")
    assert parse_family_model(zen4) == "family 25 model 17"
    # the model NAME line is not the model number, and a cpuinfo without the numbers adds nothing
    assert parse_family_model(XEON) == "" and "family" not in _features(tmp_path, XEON, monkeypatch).summary()


def test_mask_makes_a_xeon_decide_like_an_epyc(tmp_path, monkeypatch) -> None:
    cpu = _features(tmp_path, XEON, monkeypatch, mask="avx512*,amx*, avx_vnni")
    assert cpu.simd == "avx2" and cpu.u8s8_saturates
    assert cpu.masked == {"avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"}
    assert "masked by VITDEPLOY_CPU_MASK" in cpu.summary()
    assert _features(tmp_path, XEON, monkeypatch, mask="avx2").simd == "avx512"  # masking only what it names


def test_unreadable_cpuinfo_takes_the_safe_side(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    from vitdeploy.cpu_features import _read

    _read.cache_clear()
    cpu = cpu_features(str(tmp_path / "missing"))
    _read.cache_clear()
    assert not cpu.known and cpu.u8s8_saturates and cpu.simd == "baseline"
    assert "decisions take the safe side" in cpu.summary()


def test_this_machine_is_read(monkeypatch) -> None:
    monkeypatch.delenv("VITDEPLOY_CPU_MASK", raising=False)
    cpu = cpu_features()
    print(cpu.summary())
    if Path("/proc/cpuinfo").is_file():
        _, flags = parse_cpuinfo(Path("/proc/cpuinfo").read_text())
        assert cpu.flags == flags and cpu.known


def test_apply_mask_wildcards() -> None:
    kept, hidden = apply_mask(frozenset({"avx2", "avx512f", "avx512_vnni", "fma"}), "avx512*")
    assert kept == {"avx2", "fma"} and hidden == {"avx512f", "avx512_vnni"}


def test_arm64_features_come_from_the_auxiliary_vector_even_under_emulation(tmp_path, monkeypatch):
    """On arm64 the features are the kernel's HWCAP words (named as cpuinfo's Features line). Under qemu-user,
    /proc/cpuinfo is the x86 host's: its flags were taken for the Arm CPU's (avx512 on an 'aarch64')."""
    import vitdeploy.cpu_features as cf

    hwcap = 1 << cf.ARM64_HWCAP.index("asimd") | 1 << cf.ARM64_HWCAP.index("asimddp") | 1 << cf.ARM64_HWCAP.index("fp")
    hwcap2 = 1 << cf.ARM64_HWCAP2.index("i8mm") | 1 << cf.ARM64_HWCAP2.index("bf16")
    assert cf.arm64_flags(hwcap, hwcap2) == {"fp", "asimd", "asimddp", "i8mm", "bf16"}
    host = tmp_path / "cpuinfo"
    host.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n"
                    "model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse avx2 avx512f amx_tile\n")
    monkeypatch.setattr(cf.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(cf, "_auxv_arm64_flags", lambda: cf.arm64_flags(hwcap, hwcap2))
    cf._read.cache_clear()
    try:
        features = cf.cpu_features(str(host))
        assert features.flags == {"fp", "asimd", "asimddp", "i8mm", "bf16"} and features.source == "getauxval"
        assert features.model.startswith("emulated aarch64 on Intel") and features.int8_dot
        monkeypatch.setattr(cf, "_auxv_arm64_flags", lambda: None)
        cf._read.cache_clear()
        assert not {"avx2", "avx512f", "amx_tile"} & cf.cpu_features(str(host)).flags
    finally:
        cf._read.cache_clear()


def test_physical_cores_counts_smt_siblings_once(tmp_path: Path) -> None:
    """The probe's threads step asks how many physical cores this process's CPUs sit on: a constructed topology of
    two packages, SMT siblings on the first, one thread per core on the second."""
    from vitdeploy.cpu_features import physical_cores

    layout = {0: ("0", "0"), 1: ("0", "0"), 2: ("0", "1"), 3: ("0", "1"), 4: ("1", "0"), 5: ("1", "1")}
    for cpu, (package, core) in layout.items():
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(package + "\n")
        (topology / "core_id").write_text(core + "\n")
    assert physical_cores(list(layout), str(tmp_path)) == 4
    assert physical_cores([0, 1], str(tmp_path)) == 1
    assert physical_cores([4, 5], str(tmp_path)) == 2
    assert physical_cores([0, 9], str(tmp_path)) is None  # a CPU without a topology: not known
    here = physical_cores()
    assert here is None or 1 <= here <= available_cores()
