"""The bilinear resize every model's post-processing uses (``resize_bilinear``: each axis's banded matrix applied as
its taps, blocked to stay in cache), against PyTorch's ``F.interpolate`` on the shapes that take each path: one
block, several instances per block, several blocks of rows, antialiased shrinking; and the in-place ``finish`` SAM 3
applies to its masks (the sigmoid) equal to applying it after."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vitdeploy.runtime.processing.postprocess import AxisTaps, gather_rows
from vitdeploy.runtime.processing.sam2_transforms import resize_bilinear

#: float32 resize against PyTorch's, relative to the largest value: the sums are the same 2 (or, shrinking with
#: antialiasing, a few) products in another order; measured at most 1.5e-5 of values up to 20 (logits).
RESIZE_RTOL = 3e-5


@pytest.mark.parametrize(("shape", "size", "antialias"), [
    ((3, 1, 32, 32), (40, 56), False),       # SAM's few masks: one block
    ((10, 1, 24, 24), (150, 4000), False),   # a wide image: two instances per block, many blocks of rows
    ((2, 3, 90, 70), (48, 48), True),        # an image shrunk with antialiasing (SAM 2 / SAM 3 preprocessing)
    ((5, 17, 33), (17, 33), False),          # already the size: the same values back
])
def test_resize_matches_torch(shape: tuple, size: tuple, antialias: bool) -> None:
    x = (np.random.default_rng(sum(shape)).standard_normal(shape) * 5).astype(np.float32)
    got = resize_bilinear(x, size, antialias)
    flat = torch.from_numpy(x).reshape(-1, 1, *shape[-2:])
    want = F.interpolate(flat, size, mode="bilinear", align_corners=False, antialias=antialias)
    want = want.reshape(*shape[:-2], *size).numpy()
    assert got.shape == want.shape and got.dtype == np.float32
    assert float(np.abs(got - want).max()) <= RESIZE_RTOL * float(np.abs(want).max())


def test_finish_is_applied_to_every_block_once() -> None:
    """SAM 3's sigmoid, applied block by block while each is in cache, equals the sigmoid of the whole resize: every
    output pixel once (a block done twice or missed would show), on a shape of many blocks."""
    from vitdeploy.runtime.apps.sam3.scores import sigmoid as _sigmoid, sigmoid_in_place as _sigmoid_in_place

    x = (np.random.default_rng(4).standard_normal((7, 1, 30, 20)) * 40).astype(np.float32)  # saturates both ways
    after = _sigmoid(resize_bilinear(x, (300, 2500), antialias=False))
    within = resize_bilinear(x, (300, 2500), antialias=False, finish=_sigmoid_in_place)
    np.testing.assert_array_equal(within, after)
    torch_sigmoid = torch.sigmoid(torch.from_numpy(resize_bilinear(x, (300, 2500), antialias=False))).numpy()
    assert float(np.abs(within - torch_sigmoid).max()) <= 1e-6


def test_gather_rows_blocks_cover_every_row_and_instance() -> None:
    """Blocks of a few instances by a few rows: each output row is its taps' weighted sum, for every instance."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((9, 6, 500)).astype(np.float32)
    index = rng.integers(0, 6, size=(37, 2))
    weight = rng.random((37, 2)).astype(np.float32)
    got = gather_rows(x, AxisTaps(index=index, weight=weight), block_bytes=500 * 4 * 8 * 2)  # 2 instances x 8 rows
    want = x[:, index[:, 0]] * weight[None, :, 0, None] + x[:, index[:, 1]] * weight[None, :, 1, None]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
