"""The two 16-bit float formats a vitdeploy graph can store its tensors in: FP16 and BF16.

One mixed-precision pass (:mod:`vitdeploy.precision.half_precision`) writes either; what differs between them is
here, as facts of the format:

========  ==========  ================  ====================  ===============================================
format    ONNX type   largest finite    unit roundoff         what runs it
========  ==========  ================  ====================  ===============================================
FP16      FLOAT16     65504             2^-11 (4.9e-4)        TensorRT, ONNX Runtime CUDA (and its CPU, widened)
BF16      BFLOAT16    3.39e38 (FP32's)  2^-8 (3.9e-3)         TensorRT (compute capability 8.0+), ONNX Runtime
                                                              CUDA, OpenVINO (BF16 kernels on AMX/AVX512-BF16
                                                              CPUs); not ONNX Runtime's CPU (no BF16 kernels)
========  ==========  ================  ====================  ===============================================

BF16 has FP32's exponent range, so nothing overflows in it that does not overflow in FP32: the range
rule of the FP16 pass has nothing to keep. It has 8 significant bits against FP16's 11, so its local
drift is ~8x FP16's on the same node and its drift limit is set from that (measured, see the pass).
Rounding is round-to-nearest-even in both, as ``ml_dtypes`` (the ``onnx`` package's own dependency)
and ONNX Runtime's ``Cast`` do (checked equal on 100 000 random values).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto


@dataclass(frozen=True)
class HalfFormat:
    """One 16-bit float format.

    Attributes:
        name: the precision's name (``fp16``, ``bf16``), as files and budgets spell it.
        label: how messages spell it (``FP16``).
        onnx_type: the ``TensorProto`` element type.
        max_finite: the largest finite value.
        min_positive: the smallest positive (subnormal) value; smaller non-zero weights flush to zero.
        unit_roundoff: half a unit in the last place at 1 (the relative error of one rounding).
    """

    name: str
    label: str
    onnx_type: int
    max_finite: float
    min_positive: float
    unit_roundoff: float

    @property
    def numpy_dtype(self) -> np.dtype:
        """The NumPy type that holds this format (``ml_dtypes.bfloat16`` for BF16)."""
        if self.onnx_type == TensorProto.FLOAT16:
            return np.dtype(np.float16)
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)

    def round(self, array: np.ndarray) -> np.ndarray:
        """``array`` rounded to this format (nearest even; beyond the range: inf), stored in it."""
        with np.errstate(over="ignore"):
            return np.asarray(array, dtype=np.float32).astype(self.numpy_dtype)


FP16 = HalfFormat("fp16", "FP16", TensorProto.FLOAT16, 65504.0, 2.0**-24, 2.0**-11)
BF16 = HalfFormat("bf16", "BF16", TensorProto.BFLOAT16, 3.3895313892515355e38, 2.0**-133, 2.0**-8)
#: The formats by precision name.
HALF_FORMATS = {f.name: f for f in (FP16, BF16)}


def half_format(onnx_type: int) -> HalfFormat | None:
    """The format stored in ``onnx_type``; None for any other type."""
    return next((f for f in HALF_FORMATS.values() if f.onnx_type == onnx_type), None)


__all__ = ["BF16", "FP16", "HALF_FORMATS", "HalfFormat", "half_format"]
