// Golden tests: the C++ library against outputs of the Python runtime on the same inputs.
//
// tests/cpp/test_cpp.py writes the inputs, the Python outputs (.npy) and a manifest.json with the
// tolerances into a folder and runs ctest with VITDEPLOY_GOLDEN_DIR pointing at it. Without that
// variable every suite exits 77 (ctest: skipped). Usage: vitdeploy_golden_tests SUITE
//   preprocess   decoded pixels and resized pixels identical, normalized input and prompt coordinates within tolerance
//   postprocess  upscaled logits within tolerance, thresholded masks identical
//   predictor    SamPredictor on exported tiny models: masks identical, scores/logits within tolerance
//   bad_inputs   undecodable images and mismatched metadata raise errors with the expected message
//   cpu_gaps     what each runtime's CPU runs of a file (precision, custom ops): the Python registry's phrase, exactly
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "check.hpp"
#include "npy.hpp"
#include "vitdeploy/backend.hpp"
#include "vitdeploy/error.hpp"
#include "vitdeploy/image.hpp"
#include "vitdeploy/json.hpp"
#include "vitdeploy/postprocess.hpp"
#include "vitdeploy/preprocess.hpp"
#include "vitdeploy/sam.hpp"

using namespace vitdeploy;

namespace {

std::string g_dir;
Json g_manifest;

// A manifest path: absolute as given, else relative to the golden folder.
std::string file(const Json& c, const char* key) {
    const std::string& p = c.find(key)->as_string();
    return !p.empty() && p[0] == '/' ? p : g_dir + "/" + p;
}

double tol(const char* key) {
    const Json* t = g_manifest.find("tolerances")->find(key);
    if (!t) throw std::runtime_error(std::string("manifest has no tolerance '") + key + "'");
    return t->as_number();
}

struct Diff {
    double max_abs = 0;
    std::size_t mismatches = 0;  // elements that differ at all
    bool shape_ok = true;
};

template <typename T>
Diff compare(const npy::Array& expected, const std::vector<T>& actual) {
    Diff d;
    if (expected.size() != actual.size()) {
        d.shape_ok = false;
        return d;
    }
    for (std::size_t i = 0; i < actual.size(); ++i) {
        double a = static_cast<double>(actual[i]), e = expected.values[i];
        double diff = (std::isnan(a) || std::isnan(e)) ? (std::isnan(a) && std::isnan(e) ? 0.0 : INFINITY) : std::abs(a - e);
        d.max_abs = std::max(d.max_abs, diff);
        d.mismatches += diff != 0.0;
    }
    return d;
}

std::string describe(const Diff& d) {
    if (!d.shape_ok) return "size mismatch";
    std::ostringstream s;
    s << "max-abs " << d.max_abs << ", " << d.mismatches << " elements differ";
    return s.str();
}

// The Pillow release the Python side ran with decides the resize pass order.
PillowPassOrder pass_order() {
    const Json* v = g_manifest.find("pillow_major");
    return v && v->as_integer() < 13 ? PillowPassOrder::HorizontalFirst : PillowPassOrder::Pillow13;
}

std::vector<double> numbers(const Json* j) {
    std::vector<double> out;
    if (j && j->is_array())
        for (const Json& v : j->as_array()) out.push_back(v.as_number());
    return out;
}

void preprocess_case(const Json& c) {
    const std::string name = c.find("name")->as_string();
    RgbImage image = read_image(file(c, "image"));
    Diff decoded = compare(npy::load(file(c, "decoded")), image.pixels);
    CHECK_MSG(decoded.shape_ok && decoded.mismatches == 0, name + " decoded pixels: " + describe(decoded));
    std::vector<double> mean = numbers(c.find("pixel_mean")), stdev = numbers(c.find("pixel_std"));
    SamPreprocessor pre(static_cast<int>(c.find("input_size")->as_integer()),
                        {static_cast<float>(mean[0]), static_cast<float>(mean[1]), static_cast<float>(mean[2])},
                        {static_cast<float>(stdev[0]), static_cast<float>(stdev[1]), static_cast<float>(stdev[2])});
    pre.set_pass_order(pass_order());
    RgbImage resized = pre.resize(image);
    npy::Array resized_ref = npy::load(file(c, "resized"));
    CHECK_MSG(resized_ref.shape.size() == 3 && resized_ref.shape[0] == resized.height && resized_ref.shape[1] == resized.width,
              name + " resized size " + std::to_string(resized.height) + "x" + std::to_string(resized.width));
    Diff rs = compare(resized_ref, resized.pixels);
    CHECK_MSG(rs.shape_ok && rs.mismatches == 0, name + " resized pixels: " + describe(rs));
    Diff x = compare(npy::load(file(c, "input")), pre.normalize_and_pad(resized));
    CHECK_MSG(x.shape_ok && x.max_abs <= tol("preprocess_max_abs"), name + " normalized input: " + describe(x));
    Diff coords = compare(npy::load(file(c, "coords")), transform_coords(numbers(c.find("points")), image.height, image.width,
                                                                         pre.input_size()));
    CHECK_MSG(coords.shape_ok && coords.max_abs <= tol("coords_max_abs"), name + " coordinates: " + describe(coords));
    std::printf("     %s (%dx%d -> %dx%d): decoded %s; resized %s; input %s; coords %s\n", name.c_str(), image.height,
                image.width, resized.height, resized.width, describe(decoded).c_str(), describe(rs).c_str(),
                describe(x).c_str(), describe(coords).c_str());
}

void postprocess_case(const Json& c) {
    const std::string name = c.find("name")->as_string();
    npy::Array low = npy::load(file(c, "low_res"));
    std::vector<float> low_f(low.values.begin(), low.values.end());
    std::vector<double> size = numbers(c.find("original_size"));
    MaskUpscaler up = MaskUpscaler::for_image(static_cast<int>(low.shape[1]), static_cast<int>(low.shape[2]),
                                              static_cast<int>(c.find("input_size")->as_integer()), static_cast<int>(size[0]),
                                              static_cast<int>(size[1]));
    std::vector<float> logits = up(low_f.data(), static_cast<int>(low.shape[0]));
    Diff lg = compare(npy::load(file(c, "logits")), logits);
    CHECK_MSG(lg.shape_ok && lg.max_abs <= tol("logits_max_abs"), name + " logits: " + describe(lg));
    std::vector<std::uint8_t> mask = threshold_mask(logits.data(), logits.size());
    for (auto& v : mask) v = v ? 1 : 0;
    Diff mk = compare(npy::load(file(c, "masks")), mask);
    CHECK_MSG(mk.shape_ok && mk.mismatches == 0, name + " masks: " + describe(mk));
    std::printf("     %s: logits %s; masks %s\n", name.c_str(), describe(lg).c_str(), describe(mk).c_str());
}

void predictor_case(const Json& c) {
    const std::string name = c.find("name")->as_string();
    BackendOptions opts;
    opts.threads = c.find("threads") ? static_cast<int>(c.find("threads")->as_integer()) : 0;
    SamPredictor predictor(open_model(file(c, "encoder"), opts), open_model(file(c, "decoder"), opts));
    predictor.set_resize_pass_order(pass_order());
    predictor.set_image(read_image(file(c, "image")));
    SamPrompt prompt;
    prompt.points = numbers(c.find("points"));
    for (double l : numbers(c.find("labels"))) prompt.labels.push_back(static_cast<float>(l));
    std::vector<double> box = numbers(c.find("box"));
    if (box.size() == 4) prompt.box = std::array<double, 4>{box[0], box[1], box[2], box[3]};
    SamPrediction p = predictor.predict(prompt, c.find("multimask")->as_bool());
    Diff emb = compare(npy::load(file(c, "embedding")), predictor.image_embedding().data);
    CHECK_MSG(emb.shape_ok && emb.max_abs <= tol("embedding_max_abs"), name + " embedding: " + describe(emb));
    Diff sc = compare(npy::load(file(c, "scores")), p.scores);
    CHECK_MSG(sc.shape_ok && sc.max_abs <= tol("scores_max_abs"), name + " scores: " + describe(sc));
    Diff lr = compare(npy::load(file(c, "low_res")), p.low_res);
    CHECK_MSG(lr.shape_ok && lr.max_abs <= tol("logits_max_abs"), name + " low-res logits: " + describe(lr));
    std::vector<std::uint8_t> masks;
    for (int i = 0; i < p.count; ++i) {
        std::vector<std::uint8_t> m = p.mask(i);
        for (auto v : m) masks.push_back(v ? 1 : 0);
    }
    Diff mk = compare(npy::load(file(c, "masks")), masks);
    CHECK_MSG(mk.shape_ok && mk.mismatches == 0, name + " masks: " + describe(mk));
    std::size_t inside = std::count(masks.begin(), masks.end(), 1);
    std::printf("     %s: embedding %s; scores %s; low-res %s; masks %s (%zu of %zu pixels inside)\n", name.c_str(),
                describe(emb).c_str(), describe(sc).c_str(), describe(lr).c_str(), describe(mk).c_str(), inside, masks.size());
}

void bad_input_case(const Json& c) {
    const std::string name = c.find("name")->as_string();
    const std::string expect = c.find("error")->as_string();
    try {
        if (c.find("image") && !c.find("encoder")) {
            (void)read_image(file(c, "image"));
        } else {
            BackendOptions enc, dec;
            if (c.find("encoder_metadata")) enc.metadata_path = file(c, "encoder_metadata");
            if (c.find("decoder_metadata")) dec.metadata_path = file(c, "decoder_metadata");
            SamPredictor predictor(open_model(file(c, "encoder"), enc), open_model(file(c, "decoder"), dec));
        }
        CHECK_MSG(false, name + ": no error raised (expected '" + expect + "')");
    } catch (const Error& e) {
        CHECK_MSG(std::string(e.what()).find(expect) != std::string::npos, name + ": message '" + e.what() + "' lacks '" + expect + "'");
        std::printf("     %s: %s\n", name.c_str(), e.what());
    }
}

// The runtimes' CPU capability (backend.hpp's cpu_gap) against the Python registry's, phrase for phrase.
void cpu_gap_case(const Json& c) {
    const std::string name = c.find("name")->as_string();
    const Metadata metadata = Metadata::from_json(*c.find("metadata"), name);
    const std::string runtime = c.find("runtime")->as_string();
    const std::string want = c.find("gap")->as_string();
    const std::string got = cpu_gap(runtime, metadata);
    CHECK_MSG(got == want, name + ": C++ says '" + got + "', Python '" + want + "'");
    std::string runs, want_runs;
    for (const std::string& r : cpu_runtimes_for(metadata)) runs += (runs.empty() ? "" : ",") + r;
    for (const Json& r : c.find("runs")->as_array()) want_runs += (want_runs.empty() ? "" : ",") + r.as_string();
    CHECK_MSG(runs == want_runs, name + ": C++ runs it on '" + runs + "', Python on '" + want_runs + "'");
    std::printf("     %s: %s\n", name.c_str(), got.empty() ? "runs" : got.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: vitdeploy_golden_tests preprocess|postprocess|predictor|bad_inputs|cpu_gaps\n");
        return 2;
    }
    const char* dir = std::getenv("VITDEPLOY_GOLDEN_DIR");
    if (!dir || !*dir) {
        std::printf("skipped: VITDEPLOY_GOLDEN_DIR is not set (tests/cpp/test_cpp.py writes the golden outputs and sets it)\n");
        return 77;
    }
    g_dir = dir;
    std::ifstream in(g_dir + "/manifest.json");
    if (!in) {
        std::fprintf(stderr, "no manifest.json in %s\n", dir);
        return 1;
    }
    std::stringstream text;
    text << in.rdbuf();
    g_manifest = Json::parse(text.str(), "manifest.json");
    const std::string suite = argv[1];
    const Json* cases = g_manifest.find(suite);
    if (!cases || cases->as_array().empty()) {
        std::printf("skipped: the manifest has no '%s' cases\n", suite.c_str());
        return 77;
    }
    for (const Json& c : cases->as_array()) {
        std::string name = suite + ":" + c.find("name")->as_string();
        check::registry().push_back({name, [&suite, &c] {
                                         if (suite == "preprocess") preprocess_case(c);
                                         else if (suite == "postprocess") postprocess_case(c);
                                         else if (suite == "predictor") predictor_case(c);
                                         else if (suite == "bad_inputs") bad_input_case(c);
                                         else if (suite == "cpu_gaps") cpu_gap_case(c);
                                         else throw std::runtime_error("unknown suite");
                                     }});
    }
    return check::run_all();
}
