// SAM mask post-processing, numerically the same as vitdeploy/runtime/postprocess.py.
//
// The official Sam.postprocess_masks upscales the low-resolution logits to the encoder input size
// (bilinear, align_corners=False), crops away the padding, and resizes to the original image size
// (bilinear again). Both resizes and the crop are linear along each axis, so, as in the Python runtime,
// they are composed once per image into one small tap table per axis (double precision, weights then
// stored as float32), and applied columns first, then rows, accumulating in float32 in the same tap
// order. Built with -ffp-contract=off, the logits then match the Python runtime's bit for bit (up to
// the last bit of the double-precision table, where NumPy's matrix product may round differently), so
// the thresholded masks are identical.
#pragma once

#include <cstdint>
#include <vector>

namespace vitdeploy {

/// (out_size x in_size) row-major matrix of PyTorch's bilinear resize along one axis
/// (align_corners=False): source = in/out * (dst + 0.5) - 0.5 computed in float32 as PyTorch does for
/// float tensors, clamped at 0; upper neighbour clamped at the last index; weights in double.
std::vector<double> bilinear_matrix(int in_size, int out_size);

/// A banded matrix as per-row taps: out[i] = sum_t weight[i][t] * x[index[i][t]].
struct AxisTaps {
    int rows = 0;
    int taps = 0;
    std::vector<std::int64_t> index;  // rows * taps
    std::vector<float> weight;        // rows * taps

    /// Non-zero columns first (ascending), then zero columns (ascending), as many taps as the fullest row.
    static AxisTaps from_matrix(const std::vector<double>& matrix, int rows, int cols);
};

/// Low-resolution mask logits (K, h, w) -> logits in the original image size (K, H, W).
class MaskUpscaler {
public:
    /// Compose upscale-to-``input_size``, crop to the resized image, resize to the original size.
    static MaskUpscaler for_image(int low_h, int low_w, int input_size, int original_h, int original_w);

    int height() const { return height_; }
    int width() const { return width_; }
    /// ``count`` masks of low_h x low_w float32 logits -> count x H x W float32 logits.
    std::vector<float> operator()(const float* low_res, int count) const;

private:
    AxisTaps rows_, cols_;
    int low_h_ = 0, low_w_ = 0, height_ = 0, width_ = 0;
};

/// Sam.mask_threshold.
inline constexpr float kMaskThreshold = 0.0f;

/// 255 where logit > threshold, else 0 (an 8-bit mask image).
std::vector<std::uint8_t> threshold_mask(const float* logits, std::size_t count, float threshold = kMaskThreshold);

}  // namespace vitdeploy
