#include "vitdeploy/postprocess.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "vitdeploy/error.hpp"
#include "vitdeploy/preprocess.hpp"

namespace vitdeploy {

std::vector<double> bilinear_matrix(int in_size, int out_size) {
    if (in_size <= 0 || out_size <= 0)
        throw InputError("sizes must be positive, got " + std::to_string(in_size) + " -> " + std::to_string(out_size));
    std::vector<double> m(static_cast<std::size_t>(out_size) * in_size, 0.0);
    // Source positions in float32, as PyTorch computes them for float tensors (and the Python runtime).
    const float half = 0.5f;
    const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
    std::vector<std::int64_t> lo(out_size), hi(out_size);
    std::vector<double> frac(out_size);
    for (int i = 0; i < out_size; ++i) {
        float src = std::max(scale * (static_cast<float>(i) + half) - half, 0.0f);
        lo[i] = std::min<std::int64_t>(static_cast<std::int64_t>(src), in_size - 1);
        hi[i] = std::min<std::int64_t>(lo[i] + 1, in_size - 1);
        frac[i] = static_cast<double>(std::clamp(src - static_cast<float>(lo[i]), 0.0f, 1.0f));
    }
    // np.add.at(out, (rows, lo), 1 - frac), then np.add.at(out, (rows, hi), frac): same order of sums.
    for (int i = 0; i < out_size; ++i) m[static_cast<std::size_t>(i) * in_size + lo[i]] += 1.0 - frac[i];
    for (int i = 0; i < out_size; ++i) m[static_cast<std::size_t>(i) * in_size + hi[i]] += frac[i];
    return m;
}

AxisTaps AxisTaps::from_matrix(const std::vector<double>& matrix, int rows, int cols) {
    AxisTaps t;
    t.rows = rows;
    int most = 0;
    for (int r = 0; r < rows; ++r) {
        int count = 0;
        for (int c = 0; c < cols; ++c) count += matrix[static_cast<std::size_t>(r) * cols + c] != 0.0;
        most = std::max(most, count);
    }
    t.taps = std::max(1, most);
    t.index.reserve(static_cast<std::size_t>(rows) * t.taps);
    t.weight.reserve(static_cast<std::size_t>(rows) * t.taps);
    for (int r = 0; r < rows; ++r) {
        const double* row = &matrix[static_cast<std::size_t>(r) * cols];
        int taken = 0;
        for (int pass = 0; pass < 2 && taken < t.taps; ++pass) {
            for (int c = 0; c < cols && taken < t.taps; ++c) {
                if ((row[c] != 0.0) == (pass == 0)) {
                    t.index.push_back(c);
                    t.weight.push_back(static_cast<float>(row[c]));
                    ++taken;
                }
            }
        }
    }
    return t;
}

namespace {

// (out x mid) @ (mid x in)[:mid rows], the first matrix banded: sums run over its non-zero columns in
// ascending order.
std::vector<double> compose(const std::vector<double>& outer, int out, int mid, const std::vector<double>& inner, int in) {
    std::vector<double> result(static_cast<std::size_t>(out) * in, 0.0);
    for (int i = 0; i < out; ++i) {
        double* dst = &result[static_cast<std::size_t>(i) * in];
        for (int k = 0; k < mid; ++k) {
            double b = outer[static_cast<std::size_t>(i) * mid + k];
            if (b == 0.0) continue;
            const double* a = &inner[static_cast<std::size_t>(k) * in];
            for (int j = 0; j < in; ++j) dst[j] += b * a[j];
        }
    }
    return result;
}

}  // namespace

MaskUpscaler MaskUpscaler::for_image(int low_h, int low_w, int input_size, int original_h, int original_w) {
    if (low_h <= 0 || low_w <= 0 || input_size <= 0 || original_h <= 0 || original_w <= 0)
        throw InputError("mask sizes must be positive");
    auto [resized_h, resized_w] = preprocess_shape(original_h, original_w, input_size);
    MaskUpscaler up;
    up.low_h_ = low_h;
    up.low_w_ = low_w;
    up.height_ = original_h;
    up.width_ = original_w;
    // bilinear_matrix(resized, original) @ bilinear_matrix(low, input_size)[:resized]
    up.rows_ = AxisTaps::from_matrix(
        compose(bilinear_matrix(resized_h, original_h), original_h, resized_h, bilinear_matrix(low_h, input_size), low_h),
        original_h, low_h);
    up.cols_ = AxisTaps::from_matrix(
        compose(bilinear_matrix(resized_w, original_w), original_w, resized_w, bilinear_matrix(low_w, input_size), low_w),
        original_w, low_w);
    return up;
}

std::vector<float> MaskUpscaler::operator()(const float* low_res, int count) const {
    // As vitdeploy.runtime.processing.postprocess.MaskUpscaler: columns first (h x w -> h x W), then rows
    // (-> H x W); each output is weight[0] * x[index[0]], then + weight[t] * x[index[t]] for t = 1, 2, ...
    const std::size_t H = height_, W = width_, h = low_h_, w = low_w_;
    std::vector<float> wide(h * W);
    std::vector<float> out(static_cast<std::size_t>(count) * H * W);
    for (int k = 0; k < count; ++k) {
        const float* low = low_res + static_cast<std::size_t>(k) * h * w;
        for (std::size_t r = 0; r < h; ++r) {
            const float* src = low + r * w;
            float* dst = &wide[r * W];
            for (std::size_t j = 0; j < W; ++j) {
                const std::int64_t* idx = &cols_.index[j * cols_.taps];
                const float* wt = &cols_.weight[j * cols_.taps];
                float acc = src[idx[0]] * wt[0];
                for (int t = 1; t < cols_.taps; ++t) acc += src[idx[t]] * wt[t];
                dst[j] = acc;
            }
        }
        float* mask = &out[static_cast<std::size_t>(k) * H * W];
        for (std::size_t i = 0; i < H; ++i) {
            const std::int64_t* idx = &rows_.index[i * rows_.taps];
            const float* wt = &rows_.weight[i * rows_.taps];
            float* dst = &mask[i * W];
            const float* src0 = &wide[static_cast<std::size_t>(idx[0]) * W];
            for (std::size_t j = 0; j < W; ++j) dst[j] = src0[j] * wt[0];
            for (int t = 1; t < rows_.taps; ++t) {
                const float* src = &wide[static_cast<std::size_t>(idx[t]) * W];
                for (std::size_t j = 0; j < W; ++j) dst[j] += src[j] * wt[t];
            }
        }
    }
    return out;
}

std::vector<std::uint8_t> threshold_mask(const float* logits, std::size_t count, float threshold) {
    std::vector<std::uint8_t> out(count);
    for (std::size_t i = 0; i < count; ++i) out[i] = logits[i] > threshold ? 255 : 0;
    return out;
}

}  // namespace vitdeploy
