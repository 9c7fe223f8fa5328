// SAM on exported artifacts: image encoder + prompt decoder behind any Backend, the C++ counterpart
// of vitdeploy/runtime/sam_predictor.py (same checks, same prompt layout, same post-processing).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vitdeploy/backend.hpp"
#include "vitdeploy/image.hpp"
#include "vitdeploy/postprocess.hpp"
#include "vitdeploy/preprocess.hpp"

namespace vitdeploy {

/// Decoder graph inputs and outputs (vitdeploy/rewrites/sam_decoder.py).
inline const std::array<const char*, 5> kDecoderInputs = {"image_embeddings", "point_coords", "point_labels",
                                                          "mask_input", "has_mask_input"};
inline const std::array<const char*, 2> kDecoderOutputs = {"low_res_masks", "iou_predictions"};

/// Throws MetadataError unless the encoder and decoder metadata describe one SAM model (families,
/// variant, input size, embedding grid and channels; with ``check_weights`` the same checkpoint or seed).
void check_artifact_pair(const Metadata& encoder, const Metadata& decoder, bool check_weights = true);

/// Prompts in pixels of the original image.
struct SamPrompt {
    std::vector<double> points;         // x0, y0, x1, y1, ...
    std::vector<float> labels;          // one per point: 1 foreground, 0 background
    std::optional<std::array<double, 4>> box;  // x0, y0, x1, y1
    std::vector<float> mask_input;      // empty, or 1 x 4h x 4w low-resolution logits of a previous prediction
};

struct SamPrediction {
    int count = 0;                   // masks returned (3 with multimask output, else 1)
    int height = 0, width = 0;       // original image size
    int low_h = 0, low_w = 0;        // low-resolution mask size
    std::vector<float> logits;       // count x height x width, in the original image size
    std::vector<float> scores;       // count predicted IoUs
    std::vector<float> low_res;      // count x low_h x low_w
    /// Index of the highest score (the first on ties).
    int best() const;
    /// Mask ``i`` thresholded at Sam.mask_threshold: height x width bytes, 255 inside, 0 outside.
    std::vector<std::uint8_t> mask(int i) const;
};

class SamPredictor {
public:
    /// Takes ownership of the two backends; throws MetadataError when their metadata is missing, does
    /// not match the models, or describes two different SAM models.
    SamPredictor(std::unique_ptr<Backend> encoder, std::unique_ptr<Backend> decoder, bool check_weights = true);

    /// Preprocess and encode an image; later predict() calls reuse its embedding.
    void set_image(const RgbImage& image);
    bool is_image_set() const { return image_set_; }
    /// (1, C, h, w) embedding of the current image.
    const Tensor& image_embedding() const;

    /// Masks for the current image (segment_anything's SamPredictor.predict). Throws InputError for
    /// a bad prompt (points outside the image, labels other than 0/1, no prompt, wrong mask size).
    SamPrediction predict(const SamPrompt& prompt, bool multimask_output = true);

    const SamPreprocessor& preprocessor() const { return preprocessor_; }
    /// Match an older Pillow's resize (see PillowPassOrder); the default matches Pillow 13.
    void set_resize_pass_order(PillowPassOrder order) { preprocessor_.set_pass_order(order); }
    const Backend& encoder() const { return *encoder_; }
    const Backend& decoder() const { return *decoder_; }

private:
    std::unique_ptr<Backend> encoder_, decoder_;
    SamPreprocessor preprocessor_;
    std::string encoder_input_, encoder_output_;
    int mask_h_ = 0, mask_w_ = 0;
    std::vector<int> mask_output_indices_;
    bool image_set_ = false;
    Tensor embedding_;
    int original_h_ = 0, original_w_ = 0;
    std::optional<MaskUpscaler> upscaler_;
};

}  // namespace vitdeploy
