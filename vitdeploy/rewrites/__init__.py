"""Stage 2: export-friendly modules that compute the official models' numbers with the same weights.

Every rewrite works on a copy (the caller's model is never mutated), keeps the original parameter
names (``load_state_dict(strict=True)`` works both ways) and fixes every shape-dependent decision at
construction, so ``forward`` has no Python branches on tensor shapes.
"""

from vitdeploy.rewrites.layernorm2d import MatMulLayerNorm2d, NativeLayerNorm2d
from vitdeploy.rewrites.sam_encoder import ExportableImageEncoder, rewrite_sam_image_encoder

__all__ = ["ExportableImageEncoder", "MatMulLayerNorm2d", "NativeLayerNorm2d", "rewrite_sam_image_encoder"]
