"""What this CPU can do, read once at run time: the facts that pick kernels and runtime settings.

Machines differ (this project's own have been an Intel Xeon with AVX-512/AMX and an AMD EPYC with
AVX2 only), and several decisions depend on the CPU, not on the model:

* ONNX Runtime's x86 INT8 kernels multiply uint8 activations by int8 weights. Without VNNI
  (AVX2, or AVX-512 without VNNI) they add pairs of products in int16 (``vpmaddubsw``), which
  saturates for large values (2 x 255 x 127 > 32767); ONNX Runtime documents the session option
  ``session.x64quantprecision`` for exactly this (u8u8 kernels instead). VNNI (``vpdpbusd``) and
  AMX accumulate in int32 and do not saturate.
* vitdeploy's fused rel-pos attention kernel has AVX-512 and AVX2/FMA paths and a portable one.

Linux: flags from ``/proc/cpuinfo`` (on arm64 from the auxiliary vector, which qemu-user fills for the emulated
CPU too, named as ``/proc/cpuinfo``'s ``Features``). Elsewhere the flags are unknown and every decision takes its
safe side (e.g. INT8 treated as saturating). ``VITDEPLOY_CPU_MASK`` hides features, to exercise the
other CPU kind's decisions on any machine: a comma-separated list of flag names, ``*`` as a suffix
wildcard (``VITDEPLOY_CPU_MASK='avx512*,amx*,avx_vnni'`` makes an AVX-512 machine decide like an
AVX2-only one). Masking changes vitdeploy's decisions only; ONNX Runtime picks its own kernels from
the real CPU.
"""

from __future__ import annotations

import fnmatch
import os
import platform
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from vitdeploy.runtime_facts import ARM64_HWCAP2_BITS, ARM64_HWCAP_BITS, BF16_FLAGS, INT8_DOT_FLAGS, PROVEN_POLICIES, REPORTED_FLAGS

MASK_ENV = "VITDEPLOY_CPU_MASK"
#: Flags reported (others are read but not listed in reports); these, the INT8-dot and the BF16-unit flags come from
#: the data file Python and C++ both read (vitdeploy/data/runtime_facts.json).
REPORTED = REPORTED_FLAGS
X86_MACHINES = ("x86_64", "amd64", "i386", "i686")


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU's model and feature flags (after ``VITDEPLOY_CPU_MASK``), and the decisions derived from them."""

    model: str
    machine: str
    flags: frozenset[str]
    masked: frozenset[str] = frozenset()
    source: str = "/proc/cpuinfo"
    #: x86 ``cpu family`` and ``model`` numbers ("family 25 model 17"; "" where not read): under a hypervisor the
    #: model name can be as bare as "AMD EPYC", the same for a Zen 1 and a Zen 4.
    family_model: str = ""

    def x86_with(self, flags: tuple[str, ...], without: tuple[str, ...] = ()) -> bool:
        """Whether this is an x86 CPU with every one of ``flags`` and none of ``without`` (a measured row's
        condition)."""
        return self.x86 and all(self.has(f) for f in flags) and not any(self.has(f) for f in without)

    def has(self, flag: str) -> bool:
        return flag in self.flags

    @property
    def x86(self) -> bool:
        return self.machine.lower() in X86_MACHINES

    @property
    def known(self) -> bool:
        """Whether the flags were read (False: unknown OS or no cpuinfo; decisions take the safe side)."""
        return self.source != "unknown"

    @property
    def simd(self) -> str:
        """The widest vector ISA vitdeploy's kernels use here: ``avx512``, ``avx2``, ``neon`` or ``baseline``."""
        if self.x86:
            if self.has("avx512f"):
                return "avx512"
            if self.has("avx2") and self.has("fma"):
                return "avx2"
            return "baseline"
        return "neon" if self.has("asimd") else "baseline"

    @property
    def int8_dot(self) -> bool:
        """INT8 dot products accumulate in int32 on this CPU (x86: VNNI or AMX; ARM: always)."""
        if not self.x86:
            return self.known
        return any(self.has(f) for f in INT8_DOT_FLAGS)

    @property
    def bf16_units(self) -> tuple[str, ...]:
        """The :data:`BF16_FLAGS` this CPU has (empty: no BF16 instructions; BF16 inference would run as f32)."""
        return self.policy_units("bf16")

    def policy_units(self, policy: str) -> tuple[str, ...]:
        """The units a reduced precision policy runs on (:data:`~vitdeploy.runtime_facts.PROVEN_POLICIES`: ``bf16``,
        ``fp16``) that this CPU has; empty: it has none."""
        return tuple(f for f in PROVEN_POLICIES[policy]["units"] if self.has(f))

    @property
    def u8s8_saturates(self) -> bool:
        """ONNX Runtime's default x86 INT8 GEMM (u8 x s8, int16 pair sums) can saturate here."""
        return self.x86 and not self.int8_dot

    def summary(self) -> str:
        """One line: model, vector ISA, INT8 dot product support, and any masked flags."""
        shown = [f for f in REPORTED if f in self.flags]
        where = f"{self.machine}, {self.family_model}" if self.family_model else self.machine
        text = f"{self.model} ({where}; {', '.join(shown) or 'no listed SIMD flags'})"
        if not self.known:
            text += "; flags unknown on this OS: decisions take the safe side"
        if self.masked:
            text += f"; masked by {MASK_ENV}: {', '.join(sorted(self.masked))}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "machine": self.machine, "family_model": self.family_model, "simd": self.simd,
                "int8_dot": self.int8_dot, "u8s8_saturates": self.u8s8_saturates, "flags": [f for f in REPORTED if f in self.flags],
                "masked": sorted(self.masked), "source": self.source}


def _first_values(text: str) -> dict[str, str]:
    """Each ``key: value`` line's first non-empty value, keys lower-cased: the first processor's fields."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if value and key not in fields:
            fields[key] = value
    return fields


def parse_cpuinfo(text: str) -> tuple[str, frozenset[str]]:
    """(model name, flags) from the text of ``/proc/cpuinfo`` (x86 ``flags``, ARM ``Features``)."""
    fields = _first_values(text)
    model = next((fields[k] for k in ("model name", "hardware", "cpu model") if k in fields), "")
    flags = next((fields[k] for k in ("flags", "features") if k in fields), "")
    return model, frozenset(flags.split())


def parse_family_model(text: str) -> str:
    """``"family F model M"`` from the first processor of an x86 ``/proc/cpuinfo`` ("" if either is missing)."""
    fields = _first_values(text)
    family, model = fields.get("cpu family", ""), fields.get("model", "")
    return f"family {family} model {model}" if family.isdigit() and model.isdigit() else ""


def apply_mask(flags: frozenset[str], mask: str) -> tuple[frozenset[str], frozenset[str]]:
    """(flags left, flags hidden) after a ``VITDEPLOY_CPU_MASK`` value."""
    patterns = [p.strip().lower() for p in mask.split(",") if p.strip()]
    hidden = frozenset(f for f in flags if any(fnmatch.fnmatchcase(f, p) for p in patterns))
    return flags - hidden, hidden


#: The Linux arm64 hardware capability bits (arch/arm64/include/uapi/asm/hwcap.h), named as /proc/cpuinfo's
#: ``Features`` line names them: AT_HWCAP, then AT_HWCAP2 (vitdeploy/data/runtime_facts.json: the C++ library's too).
ARM64_HWCAP = ARM64_HWCAP_BITS
ARM64_HWCAP2 = ARM64_HWCAP2_BITS
ARM_MACHINES = ("aarch64", "arm64")


def arm64_flags(hwcap: int, hwcap2: int) -> frozenset[str]:
    """The feature names of arm64's AT_HWCAP and AT_HWCAP2 words."""
    return frozenset([name for bit, name in enumerate(ARM64_HWCAP) if hwcap >> bit & 1] +
                     [name for bit, name in enumerate(ARM64_HWCAP2) if hwcap2 >> bit & 1])


def _auxv_arm64_flags() -> frozenset[str] | None:
    """This process's arm64 features from its auxiliary vector (``getauxval``), None where it cannot be read. The
    kernel, or qemu-user emulating an arm64 CPU, fills it for the CPU the program runs on; /proc/cpuinfo under
    qemu-user is the host's (an x86 ``flags`` line on an emulated Arm CPU)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.getauxval.restype = ctypes.c_ulong
        libc.getauxval.argtypes = [ctypes.c_ulong]
        return arm64_flags(int(libc.getauxval(16)), int(libc.getauxval(26)))  # AT_HWCAP, AT_HWCAP2
    except (OSError, AttributeError):
        return None


@lru_cache(maxsize=8)
def _read(mask: str, cpuinfo: str) -> CpuFeatures:
    machine = platform.machine() or "unknown"
    path = Path(cpuinfo)
    try:
        text = path.read_text(errors="replace")
        model, flags = parse_cpuinfo(text)
        family_model, source = parse_family_model(text), str(path)
    except OSError:
        text, model, flags, family_model, source = "", "", frozenset(), "", "unknown"
    if machine.lower() in ARM_MACHINES:
        emulated = "flags" in _first_values(text)  # an x86 host's cpuinfo: this arm64 program runs under qemu-user
        if emulated:
            model, family_model = f"emulated {machine} on {model or 'an x86 host'}", ""
        from_auxv = _auxv_arm64_flags()
        if from_auxv:
            flags, source = from_auxv, "getauxval"
        elif emulated:
            flags = frozenset()  # the host's x86 flags are not this CPU's
    if not flags:
        source = "unknown"
    kept, hidden = apply_mask(flags, mask)
    return CpuFeatures(model or platform.processor() or machine, machine, kept, hidden, source, family_model)


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, e.g. a container's share), else os.cpu_count()."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def physical_cores(cpus: list[int] | None = None, sysfs: str = "/sys/devices/system/cpu") -> int | None:
    """How many physical cores ``cpus`` (default: those this process may run on) sit on, from the kernel's topology
    (``cpuN/topology/physical_package_id`` and ``core_id``): fewer than ``len(cpus)`` where some are SMT siblings
    (hyper-threads) of others; None where the topology cannot be read."""
    if cpus is None:
        try:
            cpus = sorted(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            return None
    cores = set()
    for cpu in cpus:
        try:
            topology = os.path.join(sysfs, f"cpu{cpu}", "topology")
            with open(os.path.join(topology, "physical_package_id"), encoding="ascii") as package, \
                    open(os.path.join(topology, "core_id"), encoding="ascii") as core:
                cores.add((package.read().strip(), core.read().strip()))
        except OSError:
            return None
    return len(cores) or None


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where it cannot be read)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_features(cpuinfo: str = "/proc/cpuinfo") -> CpuFeatures:
    """This CPU's features, ``VITDEPLOY_CPU_MASK`` applied (read once per mask value)."""
    return _read(os.environ.get(MASK_ENV, ""), cpuinfo)


__all__ = ["ARM64_HWCAP", "ARM64_HWCAP2", "BF16_FLAGS", "arm64_flags", "MASK_ENV", "CpuFeatures", "apply_mask", "available_cores", "available_memory", "cpu_features", "parse_cpuinfo", "parse_family_model", "physical_cores"]
