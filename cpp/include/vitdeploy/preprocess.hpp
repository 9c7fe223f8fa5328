// SAM preprocessing, numerically the same as vitdeploy/runtime/preprocess.py: resize the longest
// side with Pillow's bilinear filter, normalize with the pixel mean/std, zero-pad bottom/right.
#pragma once

#include <array>
#include <utility>
#include <vector>

#include "vitdeploy/image.hpp"
#include "vitdeploy/metadata.hpp"

namespace vitdeploy {

/// (height, width) after resizing so the longest side is ``long_side``
/// (segment_anything's ResizeLongestSide.get_preprocess_shape, same rounding).
std::pair<int, int> preprocess_shape(int old_h, int old_w, int long_side);

/// Order of Pillow's two resampling passes. Pillow 13 runs the vertical pass first when the height
/// shrinks by more than twice as many pixels as the width; Pillow 12 and older always start with the
/// horizontal pass. The orders round the intermediate image differently (pixels differ by one level).
enum class PillowPassOrder { Pillow13, HorizontalFirst };

/// Pillow's ``Image.resize((out_w, out_h), Image.BILINEAR)`` on an RGB image, bit for bit.
///
/// Pillow's bilinear filter is not textbook bilinear interpolation: when it downscales it widens the
/// triangle filter by the scale factor (an antialiasing "support"), and it works in two separable
/// passes with 22-bit fixed-point weights and 8-bit rounding between the passes. This reproduces that
/// arithmetic (Pillow's src/libImaging/Resample.c) so the resized pixels are identical, which is what
/// makes the normalized model input match the Python runtime to float precision.
RgbImage resize_bilinear_pillow(const RgbImage& image, int out_w, int out_h,
                                PillowPassOrder order = PillowPassOrder::Pillow13);

/// Image -> normalized, padded (1, 3, S, S) float32 model input.
class SamPreprocessor {
public:
    SamPreprocessor(int input_size, std::array<float, 3> pixel_mean, std::array<float, 3> pixel_std);

    /// From the encoder's metadata (input_size, pixel_mean, pixel_std); throws MetadataError.
    static SamPreprocessor from_metadata(const Metadata& metadata);

    int input_size() const { return input_size_; }
    /// Which Pillow release to match (default: Pillow 13, what the Python runtime installs today).
    void set_pass_order(PillowPassOrder order) { pass_order_ = order; }
    const std::array<float, 3>& pixel_mean() const { return mean_; }
    const std::array<float, 3>& pixel_std() const { return std_; }

    /// Longest side resized to input_size (throws InputError for an empty image).
    RgbImage resize(const RgbImage& image) const;
    /// hxwx3 uint8 -> (1, 3, S, S) float32: (pixel - mean) / std in float32, zero-padded bottom/right.
    std::vector<float> normalize_and_pad(const RgbImage& resized) const;
    std::vector<float> operator()(const RgbImage& image) const { return normalize_and_pad(resize(image)); }

private:
    int input_size_;
    std::array<float, 3> mean_;
    std::array<float, 3> std_;
    PillowPassOrder pass_order_ = PillowPassOrder::Pillow13;
};

/// Pixel (x, y) points of the original image -> the model input's frame
/// (segment_anything's ResizeLongestSide.apply_coords: scaled in double precision, stored as float32).
/// ``xy`` holds x0, y0, x1, y1, ...
std::vector<float> transform_coords(const std::vector<double>& xy, int orig_h, int orig_w, int long_side);

}  // namespace vitdeploy
