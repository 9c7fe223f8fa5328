#include "vitdeploy/backend.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "vitdeploy/error.hpp"
#include "vitdeploy/onnxruntime_backend.hpp"
#include "vitdeploy/openvino_backend.hpp"
#include "vitdeploy/runtime_facts.hpp"
#include "vitdeploy/tensorrt_backend.hpp"

namespace vitdeploy {

namespace {

std::string names_of(const std::vector<TensorInfo>& infos) {
    std::string out;
    for (const auto& info : infos) out += (out.empty() ? "" : ", ") + info.name;
    return out.empty() ? "none" : out;
}

const TensorInfo& find_info(const std::vector<TensorInfo>& infos, const std::string& name, const char* kind,
                            const std::string& path) {
    for (const auto& info : infos)
        if (info.name == name) return info;
    throw MetadataError("'" + path + "' has no " + kind + " named '" + name + "' (it has: " + names_of(infos) +
                        "): its metadata does not match the model; re-export it with vitdeploy");
}

}  // namespace

std::string cpu_gap(const std::string& runtime, const Metadata& metadata) {
    // the CPU runtimes of vitdeploy/data/runtime_facts.json (RUNTIMES in vitdeploy/runtime/backends/registry.py reads it too)
    const auto& table = runtime_facts().cpu_runtimes;
    auto row = std::find_if(table.begin(), table.end(), [&](const CpuRuntimeFacts& r) { return runtime == r.name; });
    if (row == table.end()) throw InputError("unknown runtime '" + runtime + "': give onnxruntime or openvino");
    const std::string precision = metadata.get_string_or("precision", "fp32");
    if (!listed(row->precisions, precision))
        return "is a " + upper(precision) + " graph and " + row->title + "'s CPU has no " + upper(precision) + " kernels";
    if (metadata.cpu_form_attention() == "fused-kernel" && !listed(row->custom_ops, "fused-kernel"))
        return std::string("runs vitdeploy's fused attention kernel, an ONNX Runtime custom op ") + row->title +
               " does not have";
    return "";
}

std::vector<std::string> cpu_runtimes_for(const Metadata& metadata) {
    std::vector<std::string> out;
    for (const CpuRuntimeFacts& r : runtime_facts().cpu_runtimes)
        if (cpu_gap(r.name, metadata).empty()) out.emplace_back(r.name);
    return out;
}

std::string cpu_refusal(const std::string& runtime, const Metadata& metadata, const std::string& file) {
    const std::string gap = cpu_gap(runtime, metadata);
    if (gap.empty()) return "";
    std::string others;
    for (const std::string& name : cpu_runtimes_for(metadata))
        if (name != runtime) others += (others.empty() ? "" : " or ") + name;
    return "'" + file + "' " + gap + ": " + (others.empty() ? "no CPU runtime runs it" : "run it with --runtime " + others + " (or auto)");
}

const TensorInfo& Backend::input(const std::string& name) const { return find_info(inputs(), name, "input", path()); }

const TensorInfo& Backend::output(const std::string& name) const { return find_info(outputs(), name, "output", path()); }

void Backend::check_feeds(const std::map<std::string, Tensor>& feeds) const {
    for (const auto& info : inputs()) {
        auto it = feeds.find(info.name);
        if (it == feeds.end())
            throw InputError("missing input '" + info.name + "' for '" + path() + "' (it takes " + names_of(inputs()) + ")");
        const Tensor& t = it->second;
        if (!shape_matches(info.shape, t.shape))
            throw InputError("input '" + info.name + "' of '" + path() + "' has shape " + shape_string(t.shape) +
                             ", but the model takes " + shape_string(info.shape) + " (-1: any size)");
        if (t.data.size() != shape_volume(t.shape))
            throw InputError("input '" + info.name + "' holds " + std::to_string(t.data.size()) + " values for shape " +
                             shape_string(t.shape));
    }
    for (const auto& [name, tensor] : feeds) {
        (void)tensor;
        bool known = std::any_of(inputs().begin(), inputs().end(), [&](const TensorInfo& i) { return i.name == name; });
        if (!known)
            throw InputError("'" + path() + "' has no input '" + name + "' (it takes " + names_of(inputs()) + ")");
    }
}

std::vector<std::string> available_backends() {
    std::vector<std::string> out;
#ifdef VITDEPLOY_WITH_ONNXRUNTIME
    out.emplace_back("onnxruntime");
#endif
#ifdef VITDEPLOY_WITH_OPENVINO
    out.emplace_back("openvino");
#endif
#ifdef VITDEPLOY_WITH_TENSORRT
    out.emplace_back("tensorrt");
#endif
    return out;
}

std::unique_ptr<Backend> open_model(const std::string& path, const BackendOptions& options) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
        throw InputError("model file '" + path + "' not found: export it with 'vitdeploy export' (ONNX) or "
                         "'vitdeploy build-engine' (TensorRT), or check the path");
    std::string ext = fs::path(path).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (!options.runtime.empty() && options.runtime != "onnxruntime" && options.runtime != "openvino")
        throw InputError("unknown runtime '" + options.runtime + "': give onnxruntime or openvino");
    if (ext == ".onnx" && options.runtime == "openvino") {
#ifdef VITDEPLOY_WITH_OPENVINO
        return std::make_unique<OpenVinoBackend>(path, options);
#else
        throw BackendError("'" + path + "' was asked to run on OpenVINO, but this build has no OpenVINO backend "
                           "(OpenVINO was not found when it was built): pip install openvino and rebuild, or run it "
                           "on ONNX Runtime");
#endif
    }
    if (ext == ".onnx") {
#ifdef VITDEPLOY_WITH_ONNXRUNTIME
        return std::make_unique<OnnxRuntimeBackend>(path, options);
#else
        throw BackendError("'" + path + "' is an ONNX file, but this build has no ONNX Runtime backend: "
                           "rebuild with -DVITDEPLOY_WITH_ONNXRUNTIME=ON, or use a TensorRT engine");
#endif
    }
    if (ext == ".plan" || ext == ".engine" || ext == ".trt") {
#ifdef VITDEPLOY_WITH_TENSORRT
        return std::make_unique<TensorRtBackend>(path, options);
#else
        throw BackendError("'" + path + "' is a TensorRT engine, but this build has no TensorRT backend (TensorRT "
                           "was not found when it was built): build on a machine with TensorRT, or use the ONNX file");
#endif
    }
    throw InputError("'" + path + "' has an unknown extension '" + ext +
                     "': give an ONNX file (.onnx) or a TensorRT engine (.plan, .engine)");
}

}  // namespace vitdeploy
