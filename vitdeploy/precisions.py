"""The precisions a vitdeploy file can declare, as one type.

A file's precision is its metadata key ``precision`` (a string in the file: ``fp32``, ``fp16``, ``bf16``,
``int8``); a file that declares none is FP32. :meth:`Precision.of` is the one place that reads it, so no
caller carries its own default. ``Precision`` is a ``str``: it compares, hashes, prints and JSON-encodes as
its value, so files and reports are unchanged by it.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from vitdeploy.errors import InputError
from vitdeploy.runtime_facts import PROVEN_POLICIES


class Precision(str, Enum):
    """The numeric precision of a graph or engine."""

    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __hash__(self) -> int:  # as its value's, so a Precision finds a key given by name (Enum hashes the member name)
        return str.__hash__(self)

    @classmethod
    def parse(cls, value: Any) -> Precision:
        """``value`` (a name such as ``"fp16"`` or a Precision) as a Precision; InputError naming the choices."""
        try:
            return cls(str(value).lower())
        except ValueError:
            raise InputError(f"precision '{value}' is not one of {', '.join(PRECISIONS)}") from None

    @classmethod
    def of(cls, metadata: dict[str, Any] | None) -> Precision:
        """The precision a file's vitdeploy ``metadata`` declares; FP32 where it declares none."""
        value = (metadata or {}).get("precision")
        return cls.FP32 if value is None else cls.parse(value)

    @property
    def reduced(self) -> bool:
        """Anything but FP32 (numbers differ from the FP32 export's within this precision's tolerance)."""
        return self is not Precision.FP32

    @property
    def quantized(self) -> bool:
        """An integer graph (Q/DQ pairs)."""
        return self is Precision.INT8


#: ``RunnerOptions.precision``: ``file`` runs the file's own math (an FP32 file in FP32); ``bf16`` asks a runtime
#: that can for BF16 inference of the FP32 layers (OpenVINO's CPU plugin on AMX / AVX512-BF16 CPUs), ``fp16`` for FP16
#: inference (OpenVINO on Arm CPUs with FP16 arithmetic, or AVX512-FP16), each judged by its parity budget
#: (:data:`vitdeploy.parity.TOLERANCES`); the CPU units and the families where a budget is proven are
#: :data:`vitdeploy.runtime_facts.PROVEN_POLICIES`.
PRECISION_POLICIES: tuple[str, ...] = ("file", *PROVEN_POLICIES)

#: Every precision, by name, in the order reports list them.
PRECISIONS: tuple[str, ...] = tuple(p.value for p in Precision)

__all__ = ["PRECISIONS", "PRECISION_POLICIES", "Precision"]
