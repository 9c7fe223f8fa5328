// sam_cli: one mask from an image and a click, with exported SAM artifacts.
//
//   sam_cli --encoder sam_vit_b.onnx --decoder sam_vit_b_decoder.onnx --image in.png --point 500,375 --out mask.png
//
// Exit codes as the vitdeploy CLI: 0 success, 1 bad input or a failed model (one-line message),
// 2 usage error (bad command line).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app_main.hpp"
#include "vitdeploy/backend.hpp"
#include "vitdeploy/deployment.hpp"
#include "vitdeploy/error.hpp"
#include "vitdeploy/image.hpp"
#include "vitdeploy/sam.hpp"
#ifdef VITDEPLOY_WITH_ONNXRUNTIME
#include "vitdeploy/onnxruntime_backend.hpp"
#endif
#include "vitdeploy/openvino_backend.hpp"

namespace {

constexpr const char* kUsage = R"(Usage: sam_cli --encoder FILE --decoder FILE --image FILE (--point X,Y[,LABEL] ... | --box X0,Y0,X1,Y1) --out MASK.png [options]

Segment an image with exported SAM artifacts: encode the image, decode the prompt, write the mask as
an 8-bit PNG (255 inside, 0 outside) in the image's own size. ONNX files (.onnx) run on ONNX Runtime,
or on OpenVINO where the encoder's deployment profile ('vitdeploy tune') chose it and this build has it;
TensorRT engines (.plan, .engine) run on TensorRT when this build has it. Everything the models need
(input size, pixel mean/std, tensor names) is read from their vitdeploy metadata.

Options:
  --encoder FILE            exported image encoder ('vitdeploy export --recipe sam_vit_b')
  --decoder FILE            exported prompt decoder (the matching decoder recipe)
  --image FILE              PNG or JPEG image
  --point X,Y[,LABEL]       a prompt point in pixels of the image; LABEL 1 foreground (default), 0 background;
                            repeat for more points
  --box X0,Y0,X1,Y1         a box prompt in pixels
  --out FILE                mask PNG to write (written atomically)
  --single-mask             use SAM's single-mask output (default: the best-scoring of the three multimask outputs)
  --encoder-metadata FILE   metadata JSON to use instead of the encoder's own (an engine's sidecar, by default '<engine>.json')
  --decoder-metadata FILE   the same for the decoder
  --runtime NAME            auto (default): the encoder's deployment profile from 'vitdeploy tune' when it fits
                            this machine, else this CPU's measured default (as the Python --runtime auto);
                            onnxruntime or openvino: the encoder runs there as written (the decoder on ONNX Runtime);
                            auto decides the decoder too, by its own profile or cached decision
  --threads N               CPU threads (default: the profile's, else the runtime's choice)
  --ort-ops FILE            ONNX Runtime custom-op library (libvitdeploy_ort_ops.so, built by cpp/build.sh), needed
                            by an encoder written by 'vitdeploy optimize --fused-attention' (default: $VITDEPLOY_ORT_OPS)
  --device N                CUDA device for TensorRT engines (default 0)
  --no-weight-check         accept an encoder and decoder exported from different weights
  --json                    print a JSON summary (scores, chosen mask, timings) instead of one line
  -h, --help                show this help
  --version                 show the version and the backends compiled in

Example:
  sam_cli --encoder out/sam_vit_b.onnx --decoder out/sam_vit_b_decoder.onnx \
          --image photo.jpg --point 500,375 --out mask.png
)";

using app::UsageError;
using app::parse_int;

struct Options {
    std::string encoder, decoder, image, out, encoder_metadata, decoder_metadata, ort_ops, runtime = "auto";
    std::vector<double> points;
    std::vector<float> labels;
    std::vector<double> box;
    bool single_mask = false, weight_check = true, json = false;
    int threads = 0, device = 0;
};

std::vector<double> parse_numbers(const std::string& flag, const std::string& text) {
    std::vector<double> out;
    std::stringstream ss(text);
    std::string piece;
    while (std::getline(ss, piece, ',')) {
        char* end = nullptr;
        double v = std::strtod(piece.c_str(), &end);
        if (piece.empty() || end == piece.c_str() || *end != '\0' || !std::isfinite(v))
            throw UsageError(flag + " takes comma-separated numbers, got '" + text + "'");
        out.push_back(v);
    }
    return out;
}

Options parse(int argc, char** argv) {
    Options o;
    const std::map<std::string, std::string*> paths{
        {"--encoder", &o.encoder}, {"--decoder", &o.decoder}, {"--image", &o.image}, {"--out", &o.out},
        {"--encoder-metadata", &o.encoder_metadata}, {"--decoder-metadata", &o.decoder_metadata},
        {"--ort-ops", &o.ort_ops}, {"--runtime", &o.runtime}};
    for (app::Args args(argc, argv); args.next();) {
        const std::string& a = args.flag();
        if (a == "-h" || a == "--help") {
            std::cout << kUsage;
            std::exit(0);
        } else if (a == "--version") {
            std::cout << "sam_cli (vitdeploy C++) 0.1.0; backends:";
            for (const auto& b : vitdeploy::available_backends()) std::cout << ' ' << b;
            std::cout << "; JPEG " << (vitdeploy::jpeg_supported() ? "yes" : "no") << '\n';
            std::exit(0);
        } else if (auto path = paths.find(a); path != paths.end()) {
            *path->second = args.value();
        } else if (a == "--point") {
            std::string text = args.value();
            std::vector<double> p = parse_numbers(a, text);
            if (p.size() != 2 && p.size() != 3) throw UsageError("--point takes X,Y or X,Y,LABEL, got '" + text + "'");
            o.points.push_back(p[0]);
            o.points.push_back(p[1]);
            o.labels.push_back(p.size() == 3 ? static_cast<float>(p[2]) : 1.0f);
        } else if (a == "--box") {
            std::string text = args.value();
            o.box = parse_numbers(a, text);
            if (o.box.size() != 4) throw UsageError("--box takes X0,Y0,X1,Y1, got '" + text + "'");
        } else if (a == "--single-mask") {
            o.single_mask = true;
        } else if (a == "--no-weight-check") {
            o.weight_check = false;
        } else if (a == "--json") {
            o.json = true;
        } else if (a == "--threads") {
            o.threads = parse_int(a, args.value());
        } else if (a == "--device") {
            o.device = parse_int(a, args.value());
        } else {
            throw UsageError("unknown option '" + a + "'");
        }
    }
    o.ort_ops = app::ort_ops_library(o.ort_ops);
    if (o.runtime != "auto" && o.runtime != "onnxruntime" && o.runtime != "openvino")
        throw UsageError("--runtime takes auto, onnxruntime or openvino, got '" + o.runtime + "'");
    for (auto [flag, v] : {std::pair{"--encoder", &o.encoder}, std::pair{"--decoder", &o.decoder},
                           std::pair{"--image", &o.image}, std::pair{"--out", &o.out}})
        if (v->empty()) throw UsageError(std::string("missing ") + flag);
    if (o.points.empty() && o.box.empty()) throw UsageError("give a prompt: --point X,Y and/or --box X0,Y0,X1,Y1");
    return o;
}

std::string json_string(const std::string& s) { return vitdeploy::Json::string(s).dump(); }

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Fail before the (possibly slow) model loading when the mask cannot be written anyway.
void check_output_path(const std::string& out) {
    namespace fs = std::filesystem;
    fs::path target(out);
    fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
    std::error_code ec;
    if (!fs::is_directory(parent, ec))
        throw vitdeploy::InputError("output directory '" + parent.string() + "' does not exist: create it or choose another --out path");
    if (fs::is_directory(target, ec)) throw vitdeploy::InputError("--out '" + out + "' is a directory: give a file name such as mask.png");
}

int run(const Options& o) {
    using namespace vitdeploy;
    check_output_path(o.out);
    RgbImage image = read_image(o.image);  // before the models: the cheapest input to get wrong
    BackendOptions enc_opts, dec_opts;
    enc_opts.threads = dec_opts.threads = o.threads;
    // --runtime auto (the default), as in Python: the deployment profile beside an .onnx encoder (vitdeploy tune) --
    // its runtime, inference precision, and threads when --threads is not given -- else this CPU's measured default.
    // The note is said once the mask is written: an error stays the one line on stderr.
    // Every file of the pair is decided (as Python's plan decides the decoder too): the decoder by its own profile or
    // cached decision, else this CPU's rows for a decoder (the file as written on ONNX Runtime).
    std::string note;
    if (std::filesystem::path(o.encoder).extension() == ".onnx") {
        if (o.runtime == "auto") {
            note = apply_deployment_profile(o.encoder, enc_opts);
        } else {
            enc_opts.runtime = o.runtime;
        }
    }
    if (std::filesystem::path(o.decoder).extension() == ".onnx" && o.runtime == "auto") {
        const std::string decoder_note = apply_deployment_profile(o.decoder, dec_opts);
        if (!decoder_note.empty()) note += (note.empty() ? "" : "; ") + decoder_note;
    }
    enc_opts.device = dec_opts.device = o.device;
    enc_opts.metadata_path = o.encoder_metadata;
    dec_opts.metadata_path = o.decoder_metadata;
    enc_opts.ort_ops_library = o.ort_ops;  // the decoder has no custom ops
    auto t_load = std::chrono::steady_clock::now();
    SamPredictor predictor(open_model(o.encoder, enc_opts), open_model(o.decoder, dec_opts), o.weight_check);
    double load_ms = ms_since(t_load);
    for (const Backend* b : {&predictor.encoder(), &predictor.decoder()})
        for (const auto& w : b->warnings()) std::cerr << "warning: " << w << '\n';

    auto t_enc = std::chrono::steady_clock::now();
    predictor.set_image(image);
    double encode_ms = ms_since(t_enc);

    SamPrompt prompt;
    prompt.points = o.points;
    prompt.labels = o.labels;
    if (!o.box.empty()) prompt.box = std::array<double, 4>{o.box[0], o.box[1], o.box[2], o.box[3]};
    auto t_dec = std::chrono::steady_clock::now();
    SamPrediction p = predictor.predict(prompt, !o.single_mask);
    int chosen = p.best();
    std::vector<std::uint8_t> mask = p.mask(chosen);
    double decode_ms = ms_since(t_dec);
    write_png_gray(o.out, p.width, p.height, mask);
    if (!note.empty()) std::cerr << "note: " << note << '\n';

    std::size_t inside = 0;
    for (auto v : mask) inside += v != 0;
    int gelus_apart = 0;  // OpenVINO's GELU form on the encoder (vitdeploy/runtime/forms/openvino_gelu.py)
    std::string encoder_precision;  // the inference precision OpenVINO's compiled encoder reads back (empty: not OpenVINO)
#ifdef VITDEPLOY_WITH_OPENVINO
    if (auto* ov = dynamic_cast<const OpenVinoBackend*>(&predictor.encoder())) {
        gelus_apart = ov->gelus_apart();
        encoder_precision = ov->inference_precision();
    }
#endif
    if (o.json) {
        std::ostringstream js;
        js << "{\"mask\": " << json_string(o.out) << ", \"mask_index\": " << chosen << ", \"score\": "
           << Json::number(p.scores[chosen]).dump() << ", \"scores\": [";
        for (std::size_t i = 0; i < p.scores.size(); ++i) js << (i ? ", " : "") << Json::number(p.scores[i]).dump();
        js << "], \"multimask\": " << (o.single_mask ? "false" : "true") << ", \"image_size\": [" << p.height << ", " << p.width
           << "], \"mask_pixels\": " << inside << ", \"encoder_backend\": " << json_string(predictor.encoder().name())
           << ", \"decoder_backend\": " << json_string(predictor.decoder().name())
           << ", \"encoder_gelus_apart\": " << gelus_apart
           << ", \"encoder_inference_precision\": " << json_string(encoder_precision) << ", \"load_ms\": " << load_ms
           << ", \"encode_ms\": " << encode_ms << ", \"decode_ms\": " << decode_ms << "}";
        std::cout << js.str() << '\n';
    } else {
        std::cout << "wrote " << o.out << " (" << p.width << "x" << p.height << ", " << inside << " pixels inside; mask "
                  << chosen << " of " << p.count << ", predicted IoU " << p.scores[chosen] << "; encode " << encode_ms
                  << " ms, decode " << decode_ms << " ms on " << predictor.encoder().name() << ")\n";
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return app::main_with_exit_codes("sam_cli", argc, argv, parse, run); }
