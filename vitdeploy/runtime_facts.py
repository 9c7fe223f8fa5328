"""The facts the Python package and the C++ library both decide by, read from one data file.

``vitdeploy/data/runtime_facts.json`` holds the CPU flags that matter (reported, INT8 dot products, BF16 units),
which CPU runtime runs which file (precisions with kernels, custom ops), this CPU's measured defaults (each row
with the measurement behind it) and which model and part each file family is. The C++ library compiles the
same file in (``cpp/CMakeLists.txt``) and installs it beside itself, so a measured row changes in one place.

This module reads and types the file (a default row knows when it applies); the decisions live where they are made
(:mod:`vitdeploy.cpu_features`, :mod:`vitdeploy.runtime.backends.registry`,
:mod:`vitdeploy.runtime.deploy.cpu_rows`, :mod:`vitdeploy.families`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

FORMAT = "vitdeploy-runtime-facts/1"
#: Where the file lives inside the package (and, for C++, under ``share/vitdeploy`` once installed).
RESOURCE = ("data", "runtime_facts.json")


def _load() -> dict[str, Any]:
    data = json.loads(resources.files("vitdeploy").joinpath(*RESOURCE).read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:  # a packaging mistake, not a user's input
        raise RuntimeError(f"vitdeploy/{'/'.join(RESOURCE)} has format {data.get('format')!r}, expected {FORMAT!r}")
    return data


FACTS: dict[str, Any] = _load()


@dataclass(frozen=True)
class CpuRuntimeFacts:
    """What one runtime runs of an ONNX file on the CPU: the file precisions it has kernels for (``fp32`` ...), the
    vitdeploy custom ops it carries (``fused-kernel``) and the precision policies it takes (``file``, ``bf16`` ...)."""

    name: str
    title: str
    precisions: tuple[str, ...]
    custom_ops: tuple[str, ...]
    policies: tuple[str, ...]


class CpuFlags(Protocol):
    """What a row asks of a CPU (:class:`vitdeploy.cpu_features.CpuFeatures` answers it): the data file's module
    sits below the one that reads the CPU, so the row names only the question."""

    def x86_with(self, flags: tuple[str, ...], without: tuple[str, ...] = ()) -> bool: ...


@dataclass(frozen=True)
class CpuDefault:
    """One row of this CPU's measured defaults: on x86 CPUs with every one of ``flags`` and none of ``without``, FP32
    files of the families in ``measured_on`` run on ``runtime`` at ``precision``. ``evidence`` is the measurement
    that put the row here (and the command that repeats it)."""

    flags: tuple[str, ...]
    runtime: str
    precision: str
    evidence: str
    without: tuple[str, ...] = ()
    measured_on: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``amx_bf16``: what a family's ``cpu_default_rows`` names this row by (its CPU flags)."""
        return "+".join(self.flags)

    def applies(self, features: CpuFlags, family: str | None) -> bool:
        """On a CPU like ``features``, for a file of ``family`` (the row says which families it was measured on)."""
        return features.x86_with(self.flags, self.without) and family in self.measured_on

    def describe(self) -> str:
        """``avx2 without avx512f: openvino file``: the row's condition and choice, for the verbs' note line."""
        return f"{flag_condition(self.flags, self.without)}: {self.runtime} {self.precision}"


def flag_condition(flags: tuple[str, ...], without: tuple[str, ...]) -> str:
    """``avx2 without avx512f``: a row's CPU condition in words."""
    return "+".join(flags) + (f" without {'/'.join(without)}" if without else "")


_FLAGS = FACTS["cpu_flags"]
#: Flags a report or a fingerprint lists, in this order (others are read but not listed).
REPORTED_FLAGS: tuple[str, ...] = tuple(_FLAGS["reported"])
#: Flags whose presence means INT8 dot products accumulate in int32 (no int16 saturation).
INT8_DOT_FLAGS: tuple[str, ...] = tuple(_FLAGS["int8_dot"])
#: arm64's AT_HWCAP and AT_HWCAP2 bits, bit 0 first, named as /proc/cpuinfo's ``Features`` (the C++ library reads them too).
ARM64_HWCAP_BITS: tuple[str, ...] = tuple(_FLAGS["arm64_hwcap"])
ARM64_HWCAP2_BITS: tuple[str, ...] = tuple(_FLAGS["arm64_hwcap2"])

CPU_RUNTIMES: dict[str, CpuRuntimeFacts] = {
    row["name"]: CpuRuntimeFacts(row["name"], row["title"], tuple(row["precisions"]), tuple(row["custom_ops"]),
                                 tuple(row["policies"]))
    for row in FACTS["cpu_runtimes"]}

#: The measured per-CPU-feature defaults, first match wins.
CPU_DEFAULT_ROWS: tuple[CpuDefault, ...] = tuple(
    CpuDefault(tuple(row["flags"]), row["runtime"], row["precision"], row["evidence"], tuple(row.get("without", ())),
               tuple(row["measured_on"]))
    for row in FACTS["cpu_defaults"])

#: Where OpenVINO's CPU plugin runs each GEMM-fed GELU apart from its GEMM (vitdeploy/runtime/forms/openvino_gelu.py):
#: x86 CPUs with every one of ``flags`` and none of ``without``, files of ``file_precisions``.
OPENVINO_GELU_APART: dict[str, Any] = FACTS["openvino_gelu_apart"]

#: policy -> {"units": CPU flags (any one), "openvino_precision": the inference precision OpenVINO is asked for,
#: "families": where its parity budget is proven (none: never timed), "evidence"}: which reduced precision policies the
#: first-use probe may time for a file (:mod:`vitdeploy.runtime.deploy.candidates`).
PROVEN_POLICIES: dict[str, dict[str, Any]] = {
    name: {"units": tuple(row["units"]), "openvino_precision": row["openvino_precision"],
           "families": tuple(row["families"]), "evidence": row["evidence"]}
    for name, row in FACTS["proven_policies"].items()}
#: Flags of BF16 matrix or vector instructions (AMX-BF16, AVX512-BF16), the BF16 policy's units: where OpenVINO infers
#: in BF16 by default.
BF16_FLAGS: tuple[str, ...] = PROVEN_POLICIES["bf16"]["units"]


@dataclass(frozen=True)
class OfficialPrecision:
    """A model whose official implementation publishes running in a reduced ``precision`` (SAM 3's and SAM 2's BF16
    autocast, ``published`` says where): its files' reduced policies are judged against that practice
    (``official_precisions`` in the data file; :mod:`vitdeploy.validation.official_practice`). ``measured``: per
    family, the official autocast's own worst distance from its FP32 over the recorded runs (``cosine``, ``rel_l2``,
    and ``evidence``: which runs)."""

    model: str
    precision: str
    autocast: str
    published: str
    margin: float
    rounding: dict[str, float]
    measured: dict[str, dict[str, Any]]


_OFFICIAL = FACTS["official_precisions"]
#: model -> its official reduced precision (``sam3`` -> BF16 autocast).
OFFICIAL_PRECISIONS: dict[str, OfficialPrecision] = {
    model: OfficialPrecision(model, row["precision"], row["autocast"], row["published"], float(_OFFICIAL["margin"]),
                             {k: float(v) for k, v in _OFFICIAL["rounding"].items()}, dict(row["measured"]))
    for model, row in _OFFICIAL["models"].items()}

#: The runner settings 'vitdeploy tune' writes into a deployment profile (each true or false); a profile holding
#: another is refused (Python) or ignored (C++).
PROFILE_SETTINGS: tuple[str, ...] = tuple(FACTS["profile_settings"])

#: family name -> (model, part): what applications compose files by (``("sam", "image_encoder")``).
MODEL_PARTS: dict[str, tuple[str, str]] = {name: (pair[0], pair[1]) for name, pair in FACTS["model_parts"].items()}


def family_name(model: str, part: str) -> str:
    """The family name of a model's part (``("sam", "image_encoder")`` -> ``sam_image_encoder``): what the export
    functions below :mod:`vitdeploy.families` stamp into a file's metadata, read here rather than written there."""
    for name, pair in MODEL_PARTS.items():
        if pair == (model, part):
            return name
    raise KeyError(f"runtime_facts.json names no family for the {part} of {model}")


def official_precision(family: str | None) -> OfficialPrecision | None:
    """The reduced precision the official implementation of ``family``'s model publishes (None: it publishes none)."""
    model = MODEL_PARTS.get(family or "", (None, None))[0]
    return OFFICIAL_PRECISIONS.get(model) if model else None


__all__ = ["ARM64_HWCAP2_BITS", "ARM64_HWCAP_BITS", "BF16_FLAGS", "CPU_DEFAULT_ROWS", "CPU_RUNTIMES", "FACTS", "INT8_DOT_FLAGS", "MODEL_PARTS",
           "OFFICIAL_PRECISIONS", "OfficialPrecision", "official_precision",
           "OPENVINO_GELU_APART", "PROFILE_SETTINGS", "PROVEN_POLICIES", "REPORTED_FLAGS", "CpuDefault", "CpuRuntimeFacts", "family_name",
           "CpuFlags", "flag_condition"]
