// model_bench: time one model through vitdeploy's C++ backends, as an application embedding them runs it.
//
//   model_bench --model sam_vit_b.cpu.onnx --input image.npy --threads 2 --runs 5 --json
//
// Loads the model once (timed), runs it once (the first run, timed apart), then --warmup - 1 more runs
// and --runs timed runs on the same input. Prints the timings and the process's peak RSS; --output
// writes the first output of the first run as a float32 .npy (for parity checks against another runtime).
// Exit codes as sam_cli: 0 success, 1 bad input or a failed model (one-line message), 2 usage error.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "app_main.hpp"
#include "npy.hpp"
#include "vitdeploy/backend.hpp"
#include "vitdeploy/error.hpp"
#include "vitdeploy/json.hpp"
#include "vitdeploy/onnxruntime_backend.hpp"
#include "vitdeploy/openvino_backend.hpp"

namespace {

constexpr const char* kUsage = R"(Usage: model_bench --model FILE [options]

Time a single-input model on vitdeploy's C++ backends (ONNX files on ONNX Runtime or OpenVINO, engines on TensorRT):
load, first run, then timed runs on one input, and the process's peak RSS.

Options:
  --model FILE       the model (.onnx, or a TensorRT engine when this build has TensorRT)
  --input FILE       the input as a float32 .npy of the model's input shape (default: seeded uniform noise in [-1, 1))
  --output FILE      write the first output of the first run here as a float32 .npy
  --threads N        CPU threads (default: the runtime's choice)
  --runtime NAME     onnxruntime (default) or openvino (when this build has it), for .onnx files
  --inference-precision P
                     OpenVINO's inference precision: f32 (default, the file's FP32 math) or bf16
  --ort-ops FILE     ONNX Runtime custom-op library (libvitdeploy_ort_ops.so), needed by files written by
                     'vitdeploy optimize --fused-attention' (default: $VITDEPLOY_ORT_OPS)
  --warmup N         runs before timing, the first included (default 1)
  --runs N           timed runs (default 5)
  --json             print a JSON object instead of lines
  -h, --help         show this help

Example:
  model_bench --model out/sam_vit_b.cpu.onnx --threads 2 --runs 3 --json
)";

using app::UsageError;
using app::parse_int;

struct Options {
    std::string runtime, inference_precision, model, input, output, ort_ops;
    int threads = 0, warmup = 1, runs = 5;
    bool json = false;
};

Options parse(int argc, char** argv) {
    Options o;
    const std::map<std::string, std::string*> paths{
        {"--model", &o.model}, {"--input", &o.input}, {"--output", &o.output}, {"--ort-ops", &o.ort_ops},
        {"--runtime", &o.runtime}, {"--inference-precision", &o.inference_precision}};
    for (app::Args args(argc, argv); args.next();) {
        const std::string& a = args.flag();
        if (a == "-h" || a == "--help") {
            std::cout << kUsage;
            std::exit(0);
        } else if (auto path = paths.find(a); path != paths.end()) {
            *path->second = args.value();
        } else if (a == "--threads") {
            o.threads = parse_int(a, args.value(), 0);
        } else if (a == "--warmup") {
            o.warmup = parse_int(a, args.value(), 1);
        } else if (a == "--runs") {
            o.runs = parse_int(a, args.value(), 1);
        } else if (a == "--json") {
            o.json = true;
        } else {
            throw UsageError("unknown option '" + a + "'");
        }
    }
    if (o.model.empty()) throw UsageError("missing --model");
    o.ort_ops = app::ort_ops_library(o.ort_ops);
    return o;
}

// The process image's resident high-water mark (VmHWM): its own, where ru_maxrss also counts the image a
// forking parent had before exec. ru_maxrss where /proc is not there.
double peak_rss_mb() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // kB
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss / 1024.0;  // Linux: kilobytes
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const Options& o) {
    using namespace vitdeploy;
    BackendOptions options;
    options.threads = o.threads;
    options.ort_ops_library = o.ort_ops;
    options.runtime = o.runtime;
    options.inference_precision = o.inference_precision;
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Backend> model = open_model(o.model, options);
    const double load_s = seconds_since(t0);
    if (model->inputs().size() != 1)
        throw InputError("'" + o.model + "' takes " + std::to_string(model->inputs().size()) +
                         " inputs: model_bench times single-input models (an image encoder, a classifier)");
    const TensorInfo& info = model->inputs()[0];
    Tensor input;
    if (!o.input.empty()) {
        if (!std::filesystem::is_regular_file(o.input))
            throw InputError("input file '" + o.input + "' not found: check the --input path");
        try {
            const npy::Array array = npy::load(o.input);
            input.shape = array.shape;
            input.data.assign(array.values.begin(), array.values.end());
        } catch (const std::runtime_error& e) {
            throw InputError(std::string(e.what()) + ": give the input as a .npy (numpy.save)");
        }
    } else {
        input.shape = info.shape;
        for (auto& d : input.shape)
            if (d < 0) d = 1;  // a dynamic axis (the batch): one
        input.data.resize(shape_volume(input.shape));
        std::mt19937 rng(0);
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        for (auto& v : input.data) v = uniform(rng);
    }
    const std::map<std::string, Tensor> feeds{{info.name, input}};

    t0 = std::chrono::steady_clock::now();
    std::map<std::string, Tensor> first = model->run(feeds);
    const double first_s = seconds_since(t0);
    if (!o.output.empty()) {
        const Tensor& out = first.at(model->outputs()[0].name);
        try {
            npy::save_f32(o.output, out.shape, out.data);
        } catch (const std::runtime_error& e) {
            throw InputError(std::string(e.what()) + ": check the --output path");
        }
    }
    for (int i = 1; i < o.warmup; ++i) model->run(feeds);
    std::vector<double> samples;
    for (int i = 0; i < o.runs; ++i) {
        t0 = std::chrono::steady_clock::now();
        model->run(feeds);
        samples.push_back(1000.0 * seconds_since(t0));
    }
    const double peak_mb = peak_rss_mb();
    std::vector<double> sorted = samples;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                            : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
    if (o.json) {
        std::ostringstream js;
        std::string runtime = model->name();
        int gelus_apart = 0, heads_in_5d = 0;
#ifdef VITDEPLOY_WITH_ONNXRUNTIME
        if (model->name() == "onnxruntime-cpu") runtime = "onnxruntime " + OnnxRuntimeBackend::runtime_version();
#endif
#ifdef VITDEPLOY_WITH_OPENVINO
        if (auto* ov = dynamic_cast<const OpenVinoBackend*>(model.get())) {
            runtime = "openvino " + OpenVinoBackend::runtime_version() + " " + ov->inference_precision();
            gelus_apart = ov->gelus_apart();
            heads_in_5d = ov->heads_in_5d();
        }
#endif
        js << "{\"model\": " << Json::string(o.model).dump() << ", \"backend\": " << Json::string(model->name()).dump()
           << ", \"runtime\": " << Json::string(runtime).dump() << ", \"gelus_apart\": " << gelus_apart
           << ", \"heads_in_5d\": " << heads_in_5d
           << ", \"threads\": " << o.threads << ", \"load_s\": " << load_s << ", \"first_run_s\": " << first_s
           << ", \"samples_ms\": [";
        for (std::size_t i = 0; i < samples.size(); ++i) js << (i ? ", " : "") << samples[i];
        js << "], \"median_ms\": " << median << ", \"peak_rss_mb\": " << peak_mb << "}";
        std::cout << js.str() << '\n';
    } else {
        std::cout << o.model << " on " << model->name() << ": load " << load_s << " s, first run " << 1000.0 * first_s
                  << " ms, median of " << samples.size() << " runs " << median << " ms, peak RSS " << peak_mb << " MB\n";
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return app::main_with_exit_codes("model_bench", argc, argv, parse, run); }
