#include "vitdeploy/sam.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "vitdeploy/error.hpp"

namespace vitdeploy {

namespace {

std::string dump_or(const Metadata& m, const char* key) { return m.has(key) ? m.get(key).dump() : "none"; }

std::string fmt(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

// The model's actual input/output against what its metadata says: a metadata file that belongs to
// another model must fail here, not produce garbage masks later.
[[noreturn]] void mismatch(const Backend& model, const std::string& what) {
    throw MetadataError("the metadata of '" + model.path() + "' (" + model.metadata().source() +
                        ") does not match the model: " + what + "; use the metadata written with this model");
}

void check_encoder_model(const Backend& encoder, const std::string& input, const std::string& output, int size) {
    const TensorInfo& in = encoder.input(input);
    encoder.output(output);
    if (!shape_matches(in.shape, {1, 3, size, size}))
        mismatch(encoder, "it says input_size [" + std::to_string(size) + ", " + std::to_string(size) + "], but input '" +
                              input + "' has shape " + shape_string(in.shape));
}

std::vector<std::int64_t> pair_of(const Metadata& m, const char* key) {
    std::vector<std::int64_t> v = m.get_ints(key);
    if (v.size() != 2 || v[0] <= 0 || v[1] <= 0)
        throw MetadataError("metadata '" + std::string(key) + "' in " + m.source() + " is " + m.get(key).dump() +
                            ", expected [height, width]: re-export the model with vitdeploy");
    return v;
}

}  // namespace

void check_artifact_pair(const Metadata& encoder, const Metadata& decoder, bool check_weights) {
    encoder.require_part("sam", "image_encoder", "--encoder");
    decoder.require_part("sam", "mask_decoder", "--decoder");
    std::vector<std::string> problems;
    if (dump_or(encoder, "variant") != dump_or(decoder, "variant"))
        problems.push_back("variant " + dump_or(encoder, "variant") + " vs " + dump_or(decoder, "variant"));
    if (dump_or(encoder, "input_size") != dump_or(decoder, "input_size"))
        problems.push_back("input size " + dump_or(encoder, "input_size") + " vs " + dump_or(decoder, "input_size"));
    const Json* arch = encoder.has("architecture") ? &encoder.get("architecture") : nullptr;
    const std::int64_t size = encoder.get_ints("input_size").at(0);
    const Json* patch = arch ? arch->find("patch_size") : nullptr;
    if (patch && patch->is_number() && patch->as_number() > 0) {
        std::int64_t grid = size / patch->as_integer();
        std::string want = "[" + std::to_string(grid) + ", " + std::to_string(grid) + "]";
        if (want != dump_or(decoder, "image_embedding_size"))
            problems.push_back("embedding grid " + want + " vs " + dump_or(decoder, "image_embedding_size"));
    }
    const Json* chans = arch ? arch->find("out_chans") : nullptr;
    if (chans && chans->is_number() && chans->as_number() != 0 &&
        (!decoder.has("embed_dim") || chans->dump() != decoder.get("embed_dim").dump()))
        problems.push_back("embedding channels " + chans->dump() + " vs " + dump_or(decoder, "embed_dim"));
    if (check_weights && problems.empty()) {
        auto truthy = [](const Metadata& m, const char* key) {
            return m.has(key) && m.get(key).is_bool() && m.get(key).as_bool();
        };
        auto text = [](const Metadata& m, const char* key) {
            return m.has(key) && m.get(key).is_string() ? m.get(key).as_string() : std::string();
        };
        if (truthy(encoder, "random_weights") != truthy(decoder, "random_weights")) {
            problems.push_back("random weights in one, a checkpoint in the other");
        } else if (truthy(encoder, "random_weights") && dump_or(encoder, "random_seed") != dump_or(decoder, "random_seed")) {
            problems.push_back("random seed " + dump_or(encoder, "random_seed") + " vs " + dump_or(decoder, "random_seed"));
        } else if (!text(encoder, "checkpoint_sha256").empty() && !text(decoder, "checkpoint_sha256").empty() &&
                   text(encoder, "checkpoint_sha256") != text(decoder, "checkpoint_sha256")) {
            problems.push_back("checkpoint " + dump_or(encoder, "checkpoint") + " vs " + dump_or(decoder, "checkpoint"));
        }
    }
    if (!problems.empty()) {
        std::string joined;
        for (const auto& p : problems) joined += (joined.empty() ? "" : "; ") + p;
        throw MetadataError("the encoder and decoder were not exported from the same SAM model (encoder vs decoder: " +
                            joined + "): export both from one recipe pair and checkpoint");
    }
}

int SamPrediction::best() const {
    return static_cast<int>(std::max_element(scores.begin(), scores.end()) - scores.begin());
}

std::vector<std::uint8_t> SamPrediction::mask(int i) const {
    if (i < 0 || i >= count) throw InputError("mask index " + std::to_string(i) + " out of range (" + std::to_string(count) + " masks)");
    const std::size_t plane = static_cast<std::size_t>(height) * width;
    return threshold_mask(logits.data() + plane * i, plane);
}

SamPredictor::SamPredictor(std::unique_ptr<Backend> encoder, std::unique_ptr<Backend> decoder, bool check_weights)
    : encoder_(std::move(encoder)),
      decoder_(std::move(decoder)),
      // The pair is checked before the preprocessor reads the encoder's metadata, so a swapped or
      // foreign file is reported as such rather than as a missing key.
      preprocessor_((check_artifact_pair(encoder_->metadata(), decoder_->metadata(), check_weights),
                     SamPreprocessor::from_metadata(encoder_->metadata()))) {
    const Metadata& enc = encoder_->metadata();
    const Metadata& dec = decoder_->metadata();
    encoder_input_ = enc.get_string_or("input_name", encoder_->inputs().at(0).name);
    encoder_output_ = enc.get_string_or("output_name", encoder_->outputs().at(0).name);
    const int size = preprocessor_.input_size();
    check_encoder_model(*encoder_, encoder_input_, encoder_output_, size);

    // The decoder's graph against its metadata, and against the encoder's output.
    for (const char* name : kDecoderInputs) decoder_->input(name);
    for (const char* name : kDecoderOutputs) decoder_->output(name);
    std::vector<std::int64_t> mask_size = pair_of(dec, "mask_input_size");
    mask_h_ = static_cast<int>(mask_size[0]);
    mask_w_ = static_cast<int>(mask_size[1]);
    const TensorInfo& mask_in = decoder_->input("mask_input");
    if (!shape_matches(mask_in.shape, {1, 1, mask_h_, mask_w_}))
        mismatch(*decoder_, "it says mask_input_size " + dec.get("mask_input_size").dump() + ", but input 'mask_input' has shape " +
                                shape_string(mask_in.shape));
    std::vector<std::int64_t> grid = pair_of(dec, "image_embedding_size");
    const TensorInfo& emb_in = decoder_->input("image_embeddings");
    std::vector<std::int64_t> want_emb = {1, dec.get_int("embed_dim"), grid[0], grid[1]};
    if (!shape_matches(emb_in.shape, want_emb))
        mismatch(*decoder_, "it says embeddings of shape " + shape_string(want_emb) + ", but input 'image_embeddings' has shape " +
                                shape_string(emb_in.shape));
    const TensorInfo& enc_out = encoder_->output(encoder_output_);
    if (!shape_matches(enc_out.shape, want_emb) && !shape_matches(want_emb, enc_out.shape))
        throw MetadataError("the encoder '" + encoder_->path() + "' outputs " + shape_string(enc_out.shape) +
                            " but the decoder '" + decoder_->path() + "' takes embeddings " + shape_string(want_emb) +
                            ": export both from one recipe pair");
    if (dec.has("mask_output_indices")) {
        for (std::int64_t i : dec.get_ints("mask_output_indices")) mask_output_indices_.push_back(static_cast<int>(i));
    } else {
        mask_output_indices_ = {0, 1, 2, 3};
    }
}

void SamPredictor::set_image(const RgbImage& image) {
    image_set_ = false;
    RgbImage resized = preprocessor_.resize(image);
    const int s = preprocessor_.input_size();
    Tensor x({1, 3, s, s}, preprocessor_.normalize_and_pad(resized));
    auto out = encoder_->run({{encoder_input_, std::move(x)}});
    auto it = out.find(encoder_output_);
    if (it == out.end()) throw BackendError("the encoder returned no '" + encoder_output_ + "'");
    embedding_ = std::move(it->second);
    original_h_ = image.height;
    original_w_ = image.width;
    upscaler_ = MaskUpscaler::for_image(mask_h_, mask_w_, s, original_h_, original_w_);
    image_set_ = true;
}

const Tensor& SamPredictor::image_embedding() const {
    if (!image_set_) throw InputError("no image set: call set_image(image) before asking for its embedding");
    return embedding_;
}

SamPrediction SamPredictor::predict(const SamPrompt& prompt, bool multimask_output) {
    if (!image_set_) throw InputError("no image set: call set_image(image) before trying to predict masks");
    const int h = original_h_, w = original_w_, size = preprocessor_.input_size();
    auto check_inside = [&](double x, double y, const char* what) {
        if (!std::isfinite(x) || !std::isfinite(y))
            throw InputError(std::string(what) + " coordinates must be finite numbers");
        if (!(0.0 <= x && x <= w && 0.0 <= y && y <= h))
            throw InputError(std::string(what) + " (" + fmt(x) + ", " + fmt(y) + ") is outside the " + std::to_string(w) + "x" +
                             std::to_string(h) + " image: coordinates are pixels (x, y) with 0 <= x <= " + std::to_string(w) +
                             " and 0 <= y <= " + std::to_string(h));
    };
    if (prompt.points.size() % 2 != 0) throw InputError("point coordinates must come in (x, y) pairs");
    const std::size_t n = prompt.points.size() / 2;
    if (prompt.labels.size() != n)
        throw InputError("got " + std::to_string(prompt.labels.size()) + " labels for " + std::to_string(n) +
                         " points: give one label per point");
    std::vector<double> xy;  // encoder frame, double until the final float32 cast (as NumPy does)
    std::vector<float> labels;
    for (std::size_t i = 0; i < n; ++i) {
        float l = prompt.labels[i];
        if (l != 0.0f && l != 1.0f)
            throw InputError("point labels must be 1 (foreground) or 0 (background), got " + fmt(l));
        check_inside(prompt.points[2 * i], prompt.points[2 * i + 1], "point");
        labels.push_back(l);
    }
    std::vector<float> coords = transform_coords(prompt.points, h, w, size);
    if (prompt.box) {
        const auto& b = *prompt.box;
        if (b[0] > b[2] || b[1] > b[3])
            throw InputError("box is not x0, y0, x1, y1 with x0 <= x1 and y0 <= y1");
        check_inside(b[0], b[1], "box corner");
        check_inside(b[2], b[3], "box corner");
        std::vector<float> corners = transform_coords({b[0], b[1], b[2], b[3]}, h, w, size);
        coords.insert(coords.end(), corners.begin(), corners.end());
        labels.push_back(2.0f);
        labels.push_back(3.0f);
    } else if (n > 0) {
        coords.push_back(0.0f);  // the padding point SamPredictor adds without a box
        coords.push_back(0.0f);
        labels.push_back(-1.0f);
    } else {
        throw InputError("no prompt: give at least one point or a box");
    }
    const std::int64_t total = static_cast<std::int64_t>(labels.size());

    Tensor mask({1, 1, mask_h_, mask_w_}, std::vector<float>(static_cast<std::size_t>(mask_h_) * mask_w_, 0.0f));
    Tensor has_mask({1}, {0.0f});
    if (!prompt.mask_input.empty()) {
        if (prompt.mask_input.size() != mask.data.size())
            throw InputError("mask_input must hold 1x" + std::to_string(mask_h_) + "x" + std::to_string(mask_w_) +
                             " low-resolution logits (a previous prediction's low_res), got " +
                             std::to_string(prompt.mask_input.size()) + " values");
        mask.data = prompt.mask_input;
        has_mask.data[0] = 1.0f;
    }

    std::vector<int> wanted = multimask_output ? std::vector<int>{1, 2, 3} : std::vector<int>{0};
    std::vector<int> positions;
    for (int token : wanted) {
        auto it = std::find(mask_output_indices_.begin(), mask_output_indices_.end(), token);
        if (it == mask_output_indices_.end())
            throw InputError(std::string("the decoder was exported without the ") + (multimask_output ? "multimask" : "single-mask") +
                             " outputs: ask for " + (multimask_output ? "a single mask" : "multimask output") + " or re-export it");
        positions.push_back(static_cast<int>(it - mask_output_indices_.begin()));
    }

    std::map<std::string, Tensor> feeds;
    feeds.emplace("image_embeddings", embedding_);
    feeds.emplace("point_coords", Tensor({1, total, 2}, std::move(coords)));
    feeds.emplace("point_labels", Tensor({1, total}, std::move(labels)));
    feeds.emplace("mask_input", std::move(mask));
    feeds.emplace("has_mask_input", std::move(has_mask));
    auto out = decoder_->run(feeds);
    const Tensor& low = out.at("low_res_masks");
    const Tensor& iou = out.at("iou_predictions");
    if (low.shape.size() != 4 || low.shape[2] != mask_h_ || low.shape[3] != mask_w_ || iou.shape.size() != 2 ||
        low.shape[1] != iou.shape[1] || low.shape[1] != static_cast<std::int64_t>(mask_output_indices_.size()))
        throw BackendError("the decoder returned low_res_masks " + shape_string(low.shape) + " and iou_predictions " +
                           shape_string(iou.shape) + ", not what its metadata describes");

    SamPrediction p;
    p.count = static_cast<int>(positions.size());
    p.height = h;
    p.width = w;
    p.low_h = mask_h_;
    p.low_w = mask_w_;
    const std::size_t plane = static_cast<std::size_t>(mask_h_) * mask_w_;
    for (int pos : positions) {
        p.low_res.insert(p.low_res.end(), low.data.begin() + pos * plane, low.data.begin() + (pos + 1) * plane);
        p.scores.push_back(iou.data[pos]);
    }
    p.logits = (*upscaler_)(p.low_res.data(), p.count);
    return p;
}

}  // namespace vitdeploy
