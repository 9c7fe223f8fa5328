// ONNX Runtime backend through its C++ API (a header-only wrapper over the versioned C API).
//
// ORT_API_MANUAL_INIT: the API table is fetched here, so a library older than the headers gives an
// error for people instead of a null-pointer crash on first use.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

#include "vitdeploy/onnxruntime_backend.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <utility>

#include "vitdeploy/deployment.hpp"
#include "vitdeploy/error.hpp"

namespace vitdeploy {

namespace {

std::once_flag g_api_once;
const OrtApi* g_api = nullptr;

void init_api() {
    std::call_once(g_api_once, [] {
        const OrtApiBase* base = OrtGetApiBase();
        g_api = base ? base->GetApi(ORT_API_VERSION) : nullptr;
        if (g_api) Ort::InitApi(g_api);
    });
    if (!g_api) {
        const OrtApiBase* base = OrtGetApiBase();
        throw BackendError(std::string("the ONNX Runtime library loaded here (") + (base ? base->GetVersionString() : "unknown") +
                           ") is older than the headers this program was built with (C API version " +
                           std::to_string(ORT_API_VERSION) + "): install a newer onnxruntime or rebuild against its headers");
    }
}

Ort::Env& environment() {
    static Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "vitdeploy");
    return env;
}

ElementType from_onnx(ONNXTensorElementDataType t) {
    switch (t) {
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return ElementType::Float32;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return ElementType::Float16;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return ElementType::BFloat16;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return ElementType::Int64;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return ElementType::Int32;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return ElementType::Int8;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return ElementType::UInt8;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return ElementType::Bool;
        default: return ElementType::Unsupported;
    }
}

std::string first_line(const std::string& text) {
    auto end = text.find('\n');
    return end == std::string::npos ? text : text.substr(0, end);
}

TensorInfo describe(const std::string& name, const Ort::TypeInfo& type) {
    TensorInfo info;
    info.name = name;
    if (type.GetONNXType() != ONNX_TYPE_TENSOR) {
        info.type = ElementType::Unsupported;
        return info;
    }
    auto tensor = type.GetTensorTypeAndShapeInfo();
    info.type = from_onnx(tensor.GetElementType());
    info.shape = tensor.GetShape();  // dynamic dimensions are -1
    return info;
}

ONNXTensorElementDataType to_onnx(ElementType t) {
    switch (t) {
        case ElementType::Float32: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
        case ElementType::Float16: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
        case ElementType::BFloat16: return ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
        case ElementType::Int64: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
        case ElementType::Int32: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
        case ElementType::Int8: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
        case ElementType::UInt8: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
        case ElementType::Bool: return ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL;
        case ElementType::Unsupported: break;
    }
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}

}  // namespace

struct OnnxRuntimeBackend::Impl {
    Ort::Session session{nullptr};
    Ort::MemoryInfo memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
};

std::string OnnxRuntimeBackend::runtime_version() {
    const OrtApiBase* base = OrtGetApiBase();
    return base ? base->GetVersionString() : "unknown";
}

OnnxRuntimeBackend::OnnxRuntimeBackend(const std::string& path, const BackendOptions& options) : OpenedFile(path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
        throw InputError("ONNX file '" + path + "' not found: run 'vitdeploy export' first or check the path");
    init_api();
    impl_ = std::make_unique<Impl>();
    // Read before the session exists: an INT8 graph needs its session options set when the session is made.
    Metadata file_metadata;
    try {
        file_metadata = Metadata::from_onnx_file(path);
    } catch (const InputError& e) {  // not an ONNX file: what ONNX Runtime would say next, as documented
        throw BackendError("ONNX Runtime cannot load '" + path + "' (" + e.what() + ")");
    }
    const bool int8 = file_metadata.get_string_or("precision", "") == "int8";
    // As the Python runner: what ONNX Runtime's CPU cannot run (a BF16 graph) is refused before a session is made.
    if (const std::string refusal = cpu_refusal("onnxruntime", file_metadata, path); !refusal.empty())
        throw InputError(refusal + ", or as a TensorRT engine; the FP32 file runs here as it is");
    // A file 'vitdeploy optimize --fused-attention' wrote (vitdeploy.runtime.forms.cpu_form) holds vitdeploy's kernel op.
    if (file_metadata.cpu_form_attention() == "fused-kernel" && options.ort_ops_library.empty())
        throw InputError("'" + path + "' runs vitdeploy's fused attention kernel ('vitdeploy optimize --fused-attention'): "
                         "give its library with --ort-ops cpp/build/libvitdeploy_ort_ops.so (or VITDEPLOY_ORT_OPS), or "
                         "run the file 'vitdeploy optimize' writes without --fused-attention");
    try {
        Ort::SessionOptions so;
        if (options.threads > 0) {
            so.SetIntraOpNumThreads(options.threads);
            so.SetInterOpNumThreads(1);
        }
        so.SetGraphOptimizationLevel(GraphOptimizationLevel::ORT_ENABLE_ALL);
        // As vitdeploy's Python runner on the CPU: ONNX Runtime's memory pattern (on by default) held twice the
        // memory of the full-size SAM encoder and made its second run seconds slower (README, "Benchmarks").
        so.DisableMemPattern();
        if (int8) {
            // As vitdeploy's Python runner (vitdeploy.runtime.backends.ort_settings): MatMulAddFusion turns DQ -> MatMul -> Add
            // into a float Gemm before the Q/DQ fusion can make the MatMul an integer kernel (the graph then runs
            // fake-quantized, slower than FP32); on CPUs whose u8 x s8 kernels saturate (they add pairs of products in
            // int16 without VNNI/AMX, as ONNX Runtime documents), u8 x u8 kernels.
            so.AddConfigEntry("optimization.disable_specified_optimizers", "MatMulAddFusion");
            if (u8s8_saturates()) so.AddConfigEntry("session.x64quantprecision", "1");
        }
        if (!options.ort_ops_library.empty()) {
            if (!std::filesystem::is_regular_file(options.ort_ops_library, ec))
                throw InputError("custom-op library '" + options.ort_ops_library +
                                 "' not found: build it with 'bash cpp/build.sh' (cpp/build/libvitdeploy_ort_ops.so)");
            so.RegisterCustomOpsLibrary(options.ort_ops_library.c_str());
        }
        impl_->session = Ort::Session(environment(), path.c_str(), so);
    } catch (const Ort::Exception& e) {
        throw BackendError("ONNX Runtime cannot load '" + path + "' (" + first_line(e.what()) +
                           "): re-export it with 'vitdeploy export'");
    }
    Ort::AllocatorWithDefaultOptions allocator;
    Ort::Session& s = impl_->session;
    for (std::size_t i = 0; i < s.GetInputCount(); ++i)
        inputs_.push_back(describe(s.GetInputNameAllocated(i, allocator).get(), s.GetInputTypeInfo(i)));
    for (std::size_t i = 0; i < s.GetOutputCount(); ++i)
        outputs_.push_back(describe(s.GetOutputNameAllocated(i, allocator).get(), s.GetOutputTypeInfo(i)));
    for (const auto& info : inputs_)
        if (info.type == ElementType::Unsupported)
            throw BackendError("input '" + info.name + "' of '" + path + "' has an element type this backend does not feed");

    metadata_ = options.metadata_path.empty() ? file_metadata : Metadata::from_sidecar_file(options.metadata_path);
}

OnnxRuntimeBackend::~OnnxRuntimeBackend() = default;

std::map<std::string, Tensor> OnnxRuntimeBackend::run(const std::map<std::string, Tensor>& feeds) {
    check_feeds(feeds);
    // Each input converted to the model's element type; the buffers outlive the Ort::Values viewing them.
    std::vector<std::vector<unsigned char>> buffers(inputs_.size());
    std::vector<Ort::Value> values;
    std::vector<const char*> in_names, out_names;
    values.reserve(inputs_.size());
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
        const TensorInfo& info = inputs_[i];
        const Tensor& t = feeds.at(info.name);
        std::vector<unsigned char>& bytes = buffers[i];
        bytes.resize(std::max<std::size_t>(1, t.data.size() * element_size(info.type)));
        encode_elements(t.data.data(), t.data.size(), info.type, bytes.data());
        values.push_back(Ort::Value::CreateTensor(impl_->memory, bytes.data(), t.data.size() * element_size(info.type),
                                                  t.shape.data(), t.shape.size(), to_onnx(info.type)));
        in_names.push_back(info.name.c_str());
    }
    for (const auto& info : outputs_) out_names.push_back(info.name.c_str());

    std::vector<Ort::Value> results;
    try {
        results = impl_->session.Run(Ort::RunOptions{nullptr}, in_names.data(), values.data(), values.size(),
                                     out_names.data(), out_names.size());
    } catch (const Ort::Exception& e) {
        throw BackendError("ONNX Runtime failed to run '" + path_ + "' (" + first_line(e.what()) + ")");
    }

    std::map<std::string, Tensor> out;
    for (std::size_t i = 0; i < results.size(); ++i) {
        auto info = results[i].GetTensorTypeAndShapeInfo();
        ElementType type = from_onnx(info.GetElementType());
        if (type == ElementType::Unsupported)
            throw BackendError("output '" + outputs_[i].name + "' of '" + path_ + "' has an unsupported element type");
        Tensor t;
        t.shape = info.GetShape();
        t.data.resize(info.GetElementCount());
        decode_elements(results[i].GetTensorRawData(), t.data.size(), type, t.data.data());
        out.emplace(outputs_[i].name, std::move(t));
    }
    return out;
}

}  // namespace vitdeploy
