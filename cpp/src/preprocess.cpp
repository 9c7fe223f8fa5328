#include "vitdeploy/preprocess.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "vitdeploy/error.hpp"

namespace vitdeploy {

namespace {

// Pillow, Resample.c: 8 bits for the result, 2 for overflow, the rest for the fraction.
constexpr int kPrecisionBits = 32 - 8 - 2;

struct Coefficients {
    int ksize = 0;
    std::vector<int> bounds;     // per output index: first input index, number of taps
    std::vector<std::int32_t> k;  // per output index: ksize fixed-point weights
};

double bilinear_filter(double x) {
    if (x < 0.0) x = -x;
    if (x < 1.0) return 1.0 - x;
    return 0.0;
}

// precompute_coeffs + normalize_coeffs_8bpc for the bilinear filter (support 1.0), with the same
// operation order and types (in0/in1 are floats there) so every weight rounds the same way.
Coefficients precompute(int in_size, float in0, float in1, int out_size) {
    const double support_base = 1.0;
    double scale = static_cast<double>(in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = support_base * filterscale;
    Coefficients c;
    c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
    c.bounds.resize(static_cast<std::size_t>(out_size) * 2);
    std::vector<double> kk(static_cast<std::size_t>(out_size) * c.ksize, 0.0);
    double inv_filterscale = 1.0 / filterscale;
    for (int xx = 0; xx < out_size; ++xx) {
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0;
        int xmin = static_cast<int>(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = static_cast<int>(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        double* k = &kk[static_cast<std::size_t>(xx) * c.ksize];
        for (int x = 0; x < xmax; ++x) {
            double w = bilinear_filter((x + xmin - center + 0.5) * inv_filterscale);
            k[x] = w;
            ww += w;
        }
        if (ww != 0.0)
            for (int x = 0; x < xmax; ++x) k[x] /= ww;
        c.bounds[xx * 2 + 0] = xmin;
        c.bounds[xx * 2 + 1] = xmax;
    }
    c.k.resize(kk.size());
    for (std::size_t i = 0; i < kk.size(); ++i) {
        c.k[i] = kk[i] < 0 ? static_cast<int>(-0.5 + kk[i] * (1 << kPrecisionBits))
                           : static_cast<int>(0.5 + kk[i] * (1 << kPrecisionBits));
    }
    return c;
}

inline std::uint8_t clip8(int ss) {
    int v = ss >> kPrecisionBits;  // arithmetic shift, as in Pillow
    return static_cast<std::uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// dst[0..2] = Pillow's rounded fixed-point sum of n RGB pixels, `stride` bytes apart from p, weighted by k.
inline void weighted_rgb(const std::uint8_t* p, std::ptrdiff_t stride, const std::int32_t* k, int n, std::uint8_t* dst) {
    int ss0 = 1 << (kPrecisionBits - 1), ss1 = ss0, ss2 = ss0;
    for (int i = 0; i < n; ++i, p += stride) {
        ss0 += p[0] * k[i];
        ss1 += p[1] * k[i];
        ss2 += p[2] * k[i];
    }
    dst[0] = clip8(ss0);
    dst[1] = clip8(ss1);
    dst[2] = clip8(ss2);
}

// Horizontal pass over input rows [row0, row0 + rows).
RgbImage resample_horizontal(const RgbImage& in, int row0, int rows, int out_w, const Coefficients& c) {
    RgbImage out(out_w, rows);
    for (int yy = 0; yy < rows; ++yy) {
        const std::uint8_t* line = in.row(yy + row0);
        std::uint8_t* dst = out.row(yy);
        for (int xx = 0; xx < out_w; ++xx) {
            const int xmin = c.bounds[xx * 2 + 0];
            const int xmax = c.bounds[xx * 2 + 1];
            weighted_rgb(line + xmin * 3, 3, &c.k[static_cast<std::size_t>(xx) * c.ksize], xmax, dst + xx * 3);
        }
    }
    return out;
}

// Vertical pass; ``shift`` is subtracted from the row bounds (the horizontal pass kept only the rows
// the vertical pass reads, starting at input row ``shift``).
RgbImage resample_vertical(const RgbImage& in, int out_h, const Coefficients& c, int shift) {
    RgbImage out(in.width, out_h);
    for (int yy = 0; yy < out_h; ++yy) {
        int ymin = c.bounds[yy * 2 + 0] - shift;
        int ymax = c.bounds[yy * 2 + 1];
        const std::int32_t* k = &c.k[static_cast<std::size_t>(yy) * c.ksize];
        std::uint8_t* dst = out.row(yy);
        const std::ptrdiff_t stride = static_cast<std::ptrdiff_t>(in.width) * 3;
        for (int xx = 0; xx < in.width; ++xx) weighted_rgb(in.row(ymin) + xx * 3, stride, k, ymax, dst + xx * 3);
    }
    return out;
}

void check_image(const RgbImage& image) {
    if (image.width <= 0 || image.height <= 0)
        throw InputError("image has an empty side (" + std::to_string(image.height) + "x" + std::to_string(image.width) + ")");
    if (image.pixels.size() != static_cast<std::size_t>(image.width) * image.height * 3)
        throw InputError("image buffer holds " + std::to_string(image.pixels.size()) + " bytes, but " +
                         std::to_string(image.height) + "x" + std::to_string(image.width) + " RGB needs " +
                         std::to_string(static_cast<std::size_t>(image.width) * image.height * 3));
}

}  // namespace

std::pair<int, int> preprocess_shape(int old_h, int old_w, int long_side) {
    double scale = long_side * 1.0 / std::max(old_h, old_w);
    return {static_cast<int>(old_h * scale + 0.5), static_cast<int>(old_w * scale + 0.5)};
}

RgbImage resize_bilinear_pillow(const RgbImage& image, int out_w, int out_h, PillowPassOrder order) {
    check_image(image);
    if (out_w <= 0 || out_h <= 0)
        throw InputError("cannot resize a " + std::to_string(image.height) + "x" + std::to_string(image.width) +
                         " image to " + std::to_string(out_h) + "x" + std::to_string(out_w) +
                         ": its aspect ratio is too extreme for this input size");
    // ImagingResampleInner with box = (0, 0, width, height).
    const float box[4] = {0.0f, 0.0f, static_cast<float>(image.width), static_cast<float>(image.height)};
    const bool need_horizontal = out_w != image.width || box[0] != 0.0f || box[2] != static_cast<float>(out_w);
    const bool need_vertical = out_h != image.height || box[1] != 0.0f || box[3] != static_cast<float>(out_h);
    if (!need_horizontal && !need_vertical) return image;
    // Pillow 13: "if height is being scaled down more than twice the amount the width is, run the
    // vertical pass first"; Pillow 12 and older always run the horizontal pass first. The two orders
    // round the intermediate image differently, so the order must be Pillow's.
    const int shrink_h = image.height - out_h, shrink_w = image.width - out_w;
    const bool horizontal_first =
        order == PillowPassOrder::HorizontalFirst || !(shrink_h > 0 && shrink_h > shrink_w * 2);

    Coefficients horiz, vert;
    if (need_horizontal) horiz = precompute(image.width, box[0], box[2], out_w);
    if (need_vertical || (need_horizontal && horizontal_first)) vert = precompute(image.height, box[1], box[3], out_h);
    if (horizontal_first) {
        if (!need_horizontal) return resample_vertical(image, out_h, vert, 0);
        // Only the rows the vertical pass reads (all of them when there is no vertical pass).
        const int ybox_first = vert.bounds[0];
        const int ybox_last = vert.bounds[out_h * 2 - 2] + vert.bounds[out_h * 2 - 1];
        RgbImage temp = resample_horizontal(image, ybox_first, ybox_last - ybox_first, out_w, horiz);
        return need_vertical ? resample_vertical(temp, out_h, vert, ybox_first) : temp;
    }
    RgbImage temp = need_vertical ? resample_vertical(image, out_h, vert, 0) : image;
    return need_horizontal ? resample_horizontal(temp, 0, temp.height, out_w, horiz) : temp;
}

SamPreprocessor::SamPreprocessor(int input_size, std::array<float, 3> pixel_mean, std::array<float, 3> pixel_std)
    : input_size_(input_size), mean_(pixel_mean), std_(pixel_std) {
    if (input_size <= 0) throw MetadataError("input size must be positive, got " + std::to_string(input_size));
    for (float s : std_)
        if (!(s != 0.0f) || !std::isfinite(s)) throw MetadataError("pixel_std must be finite and non-zero");
    for (float m : mean_)
        if (!std::isfinite(m)) throw MetadataError("pixel_mean must be finite");
}

SamPreprocessor SamPreprocessor::from_metadata(const Metadata& metadata) {
    std::vector<std::int64_t> size = metadata.get_ints("input_size");
    if (size.size() != 2 || size[0] != size[1] || size[0] <= 0 || size[0] > 16384)
        throw MetadataError("metadata 'input_size' in " + metadata.source() + " is " + metadata.get("input_size").dump() +
                            ", expected a square [S, S] size: re-export the model with vitdeploy");
    auto three = [&](const char* key) {
        std::vector<double> v = metadata.get_numbers(key);
        if (v.size() != 3)
            throw MetadataError(std::string("metadata '") + key + "' in " + metadata.source() + " has " +
                                std::to_string(v.size()) + " values, expected 3 (R, G, B): re-export the model");
        // Python: np.asarray(values, dtype=np.float32) -- the same round-to-nearest conversion.
        return std::array<float, 3>{static_cast<float>(v[0]), static_cast<float>(v[1]), static_cast<float>(v[2])};
    };
    try {
        return SamPreprocessor(static_cast<int>(size[0]), three("pixel_mean"), three("pixel_std"));
    } catch (const MetadataError& e) {
        throw MetadataError(std::string(e.what()) + " (in " + metadata.source() + ")");
    }
}

RgbImage SamPreprocessor::resize(const RgbImage& image) const {
    check_image(image);
    auto [h, w] = preprocess_shape(image.height, image.width, input_size_);
    return resize_bilinear_pillow(image, w, h, pass_order_);
}

std::vector<float> SamPreprocessor::normalize_and_pad(const RgbImage& resized) const {
    check_image(resized);
    if (resized.width > input_size_ || resized.height > input_size_)
        throw InputError("resized image " + std::to_string(resized.height) + "x" + std::to_string(resized.width) +
                         " is larger than the model input " + std::to_string(input_size_));
    const std::size_t plane = static_cast<std::size_t>(input_size_) * input_size_;
    std::vector<float> out(plane * 3, 0.0f);
    for (int y = 0; y < resized.height; ++y) {
        const std::uint8_t* src = resized.row(y);
        for (int x = 0; x < resized.width; ++x) {
            for (int c = 0; c < 3; ++c) {
                out[c * plane + static_cast<std::size_t>(y) * input_size_ + x] =
                    (static_cast<float>(src[x * 3 + c]) - mean_[c]) / std_[c];
            }
        }
    }
    return out;
}

std::vector<float> transform_coords(const std::vector<double>& xy, int orig_h, int orig_w, int long_side) {
    if (xy.size() % 2 != 0) throw InputError("point coordinates must come in (x, y) pairs");
    if (orig_h <= 0 || orig_w <= 0) throw InputError("original image size must be positive");
    auto [new_h, new_w] = preprocess_shape(orig_h, orig_w, long_side);
    const double sx = static_cast<double>(new_w) / orig_w;
    const double sy = static_cast<double>(new_h) / orig_h;
    std::vector<float> out(xy.size());
    for (std::size_t i = 0; i < xy.size(); i += 2) {
        out[i] = static_cast<float>(xy[i] * sx);
        out[i + 1] = static_cast<float>(xy[i + 1] * sy);
    }
    return out;
}

}  // namespace vitdeploy
