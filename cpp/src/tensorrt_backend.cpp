// TensorRT backend, written against the TensorRT 10/11 C++ runtime API:
//   createInferRuntime, IRuntime::deserializeCudaEngine, ICudaEngine::getNbIOTensors/getIOTensorName/
//   getTensorIOMode/getTensorDataType/getTensorShape/getTensorLocation/getProfileShape,
//   IExecutionContext::setInputShape/setTensorAddress/getTensorShape/enqueueV3.
// TensorRT 10 and 11 objects are released with delete (destroy() was removed in 10).
#include "vitdeploy/tensorrt_backend.hpp"

#include <NvInferRuntime.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>

#include "vitdeploy/engine_sidecar.hpp"
#include "vitdeploy/error.hpp"

namespace vitdeploy {

namespace {

// Prints TensorRT's warnings and errors on stderr; keeps the last error for the exception message.
class Logger final : public nvinfer1::ILogger {
public:
    void log(Severity severity, nvinfer1::AsciiChar const* msg) noexcept override {
        if (severity > Severity::kWARNING) return;
        std::lock_guard<std::mutex> lock(mutex_);
        if (severity <= Severity::kERROR) last_error_ = msg ? msg : "";
        std::fprintf(stderr, "[TensorRT] %s\n", msg ? msg : "");
    }
    std::string last_error() {
        std::lock_guard<std::mutex> lock(mutex_);
        return last_error_.empty() ? "no message from TensorRT" : last_error_;
    }

private:
    std::mutex mutex_;
    std::string last_error_;
};

void check_cuda(cudaError_t status, const std::string& what) {
    if (status != cudaSuccess)
        throw BackendError("CUDA failed to " + what + " (" + cudaGetErrorName(status) + ": " + cudaGetErrorString(status) + ")");
}

ElementType from_trt(nvinfer1::DataType t) {
    switch (t) {
        case nvinfer1::DataType::kFLOAT: return ElementType::Float32;
        case nvinfer1::DataType::kHALF: return ElementType::Float16;
        case nvinfer1::DataType::kBF16: return ElementType::BFloat16;
        case nvinfer1::DataType::kINT64: return ElementType::Int64;
        case nvinfer1::DataType::kINT32: return ElementType::Int32;
        case nvinfer1::DataType::kINT8: return ElementType::Int8;
        case nvinfer1::DataType::kUINT8: return ElementType::UInt8;
        case nvinfer1::DataType::kBOOL: return ElementType::Bool;
        default: return ElementType::Unsupported;
    }
}

std::vector<std::int64_t> to_vector(const nvinfer1::Dims& dims) {
    std::vector<std::int64_t> out;
    for (int i = 0; i < dims.nbDims; ++i) out.push_back(static_cast<std::int64_t>(dims.d[i]));
    return out;
}

nvinfer1::Dims to_dims(const std::vector<std::int64_t>& shape) {
    nvinfer1::Dims dims{};
    dims.nbDims = static_cast<int32_t>(shape.size());
    for (std::size_t i = 0; i < shape.size(); ++i) dims.d[i] = shape[i];
    return dims;
}

struct Buffer {
    std::string name;
    ElementType type = ElementType::Float32;
    bool is_input = false;
    bool dynamic = false;
    std::vector<std::int64_t> min_shape, max_shape;  // inputs: the optimisation profile's bounds
    void* device = nullptr;
    std::size_t capacity = 0;  // bytes
    std::vector<unsigned char> host;
};

}  // namespace

struct TensorRtBackend::Impl {
    Logger logger;
    std::unique_ptr<nvinfer1::IRuntime> runtime;
    std::unique_ptr<nvinfer1::ICudaEngine> engine;
    std::unique_ptr<nvinfer1::IExecutionContext> context;
    cudaStream_t stream = nullptr;
    std::vector<Buffer> buffers;

    ~Impl() {
        context.reset();  // before the engine and the buffers it points at
        for (Buffer& b : buffers)
            if (b.device) cudaFree(b.device);
        if (stream) cudaStreamDestroy(stream);
        engine.reset();
        runtime.reset();
    }
};

std::string TensorRtBackend::runtime_version() {
    int v = getInferLibVersion();  // (major * 100 + minor) * 100 + patch
    return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

TensorRtBackend::TensorRtBackend(const std::string& path, const BackendOptions& options)
    : OpenedFile(path), impl_(std::make_unique<Impl>()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
        throw InputError("engine file '" + path + "' not found: build it with 'vitdeploy build-engine' or check the path");
    const std::string plan_name = fs::path(path).filename().string();

    // 1. The sidecar, and the plan's bytes checked against it.
    EngineSidecar sidecar = EngineSidecar::read(path, options.metadata_path);
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes_stream;
    bytes_stream << in.rdbuf();
    const std::string plan = bytes_stream.str();
    sidecar.check_plan(path, plan);
    metadata_ = sidecar.metadata();

    // 2. The running TensorRT and GPU against the ones that built the plan.
    int devices = 0;
    cudaError_t found = cudaGetDeviceCount(&devices);
    if (found != cudaSuccess || devices == 0)
        throw BackendError(std::string("no usable NVIDIA GPU here (") + (found != cudaSuccess ? cudaGetErrorString(found) : "no CUDA device") +
                           "): TensorRT engines run on a machine with an NVIDIA GPU and driver; use the ONNX files on the CPU");
    if (options.device < 0 || options.device >= devices)
        throw InputError("CUDA device " + std::to_string(options.device) + " does not exist (this machine has " +
                         std::to_string(devices) + "): choose another --device");
    check_cuda(cudaSetDevice(options.device), "select CUDA device " + std::to_string(options.device));
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, options.device), "query the GPU");
    RunningEnvironment env{runtime_version(), prop.name, std::to_string(prop.major) + "." + std::to_string(prop.minor)};
    warnings_ = sidecar.check_compat(env, plan_name);

    // 3. Deserialize.
    impl_->runtime.reset(nvinfer1::createInferRuntime(impl_->logger));
    if (!impl_->runtime) throw BackendError("TensorRT could not create a runtime (" + impl_->logger.last_error() + ")");
    impl_->engine.reset(impl_->runtime->deserializeCudaEngine(plan.data(), plan.size()));
    if (!impl_->engine)
        throw BackendError("TensorRT cannot deserialize '" + path + "' (" + impl_->logger.last_error() +
                           "): rebuild it here with 'vitdeploy build-engine'");
    nvinfer1::ICudaEngine& engine = *impl_->engine;

    // 4. The engine's I/O, checked against the sidecar.
    for (int32_t i = 0; i < engine.getNbIOTensors(); ++i) {
        const char* name = engine.getIOTensorName(i);
        TensorInfo info{name, from_trt(engine.getTensorDataType(name)), to_vector(engine.getTensorShape(name))};
        bool is_input = engine.getTensorIOMode(name) == nvinfer1::TensorIOMode::kINPUT;
        if (info.type == ElementType::Unsupported)
            throw BackendError("tensor '" + info.name + "' of '" + path + "' has an element type this backend does not handle");
        if (engine.getTensorLocation(name) != nvinfer1::TensorLocation::kDEVICE)
            throw BackendError("tensor '" + info.name + "' of '" + path +
                               "' lives on the host (a shape tensor): this backend feeds device tensors only");
        (is_input ? inputs_ : outputs_).push_back(info);
        Buffer b;
        b.name = info.name;
        b.type = info.type;
        b.is_input = is_input;
        for (auto d : info.shape) b.dynamic = b.dynamic || d < 0;
        if (is_input) {
            b.min_shape = b.dynamic ? to_vector(engine.getProfileShape(name, 0, nvinfer1::OptProfileSelector::kMIN)) : info.shape;
            b.max_shape = b.dynamic ? to_vector(engine.getProfileShape(name, 0, nvinfer1::OptProfileSelector::kMAX)) : info.shape;
        }
        impl_->buffers.push_back(std::move(b));
    }
    sidecar.check_io(inputs_, outputs_);

    // 5. One context, one stream, every buffer allocated once at its largest shape.
    impl_->context.reset(engine.createExecutionContext());
    if (!impl_->context) throw BackendError("TensorRT could not create an execution context (" + impl_->logger.last_error() + ")");
    check_cuda(cudaStreamCreate(&impl_->stream), "create a stream");
    for (Buffer& b : impl_->buffers)
        if (b.is_input && !impl_->context->setInputShape(b.name.c_str(), to_dims(b.max_shape)))
            throw BackendError("TensorRT rejected the profile's maximum shape for '" + b.name + "' (" + impl_->logger.last_error() + ")");
    for (Buffer& b : impl_->buffers) {
        std::vector<std::int64_t> shape = b.is_input ? b.max_shape : to_vector(impl_->context->getTensorShape(b.name.c_str()));
        for (auto d : shape)
            if (d < 0)
                throw BackendError("TensorRT cannot bound the size of output '" + b.name + "' of '" + path +
                                   "' (data-dependent shape): this backend needs outputs sized by the inputs");
        b.capacity = std::max<std::size_t>(1, shape_volume(shape) * element_size(b.type));
        check_cuda(cudaMalloc(&b.device, b.capacity), "allocate " + std::to_string(b.capacity) + " bytes for '" + b.name + "'");
        if (!impl_->context->setTensorAddress(b.name.c_str(), b.device))
            throw BackendError("TensorRT rejected the buffer address of '" + b.name + "' (" + impl_->logger.last_error() + ")");
        b.host.resize(b.capacity);
    }
}

TensorRtBackend::~TensorRtBackend() = default;

std::map<std::string, Tensor> TensorRtBackend::run(const std::map<std::string, Tensor>& feeds) {
    check_feeds(feeds);
    nvinfer1::IExecutionContext& context = *impl_->context;
    for (Buffer& b : impl_->buffers) {
        if (!b.is_input) continue;
        const Tensor& t = feeds.at(b.name);
        for (std::size_t d = 0; d < t.shape.size(); ++d)
            if (t.shape[d] < b.min_shape[d] || t.shape[d] > b.max_shape[d])
                throw InputError("input '" + b.name + "' has shape " + shape_string(t.shape) + ", outside the engine's profile " +
                                 shape_string(b.min_shape) + " .. " + shape_string(b.max_shape) +
                                 ": use fewer prompt points or rebuild the engine with a larger profile");
        if (!context.setInputShape(b.name.c_str(), to_dims(t.shape)))
            throw InputError("TensorRT rejected shape " + shape_string(t.shape) + " for input '" + b.name + "' (" +
                             impl_->logger.last_error() + ")");
        const std::size_t bytes = t.data.size() * element_size(b.type);
        encode_elements(t.data.data(), t.data.size(), b.type, b.host.data());
        check_cuda(cudaMemcpyAsync(b.device, b.host.data(), bytes, cudaMemcpyHostToDevice, impl_->stream),
                   "copy input '" + b.name + "' to the GPU");
    }
    if (!context.allInputDimensionsSpecified()) throw BackendError("TensorRT reports input shapes left unspecified");
    if (!context.enqueueV3(impl_->stream))
        throw BackendError("TensorRT failed to run '" + path_ + "' (" + impl_->logger.last_error() + ")");
    std::map<std::string, Tensor> out;
    std::vector<std::pair<Buffer*, Tensor>> pending;
    for (Buffer& b : impl_->buffers) {
        if (b.is_input) continue;
        Tensor t;
        t.shape = to_vector(context.getTensorShape(b.name.c_str()));
        const std::size_t n = shape_volume(t.shape);
        if (n * element_size(b.type) > b.capacity)
            throw BackendError("output '" + b.name + "' grew past the buffer allocated for it");
        t.data.resize(n);
        check_cuda(cudaMemcpyAsync(b.host.data(), b.device, n * element_size(b.type), cudaMemcpyDeviceToHost, impl_->stream),
                   "copy output '" + b.name + "' from the GPU");
        pending.emplace_back(&b, std::move(t));
    }
    check_cuda(cudaStreamSynchronize(impl_->stream), "finish the inference");
    for (auto& [b, t] : pending) {
        decode_elements(b->host.data(), t.data.size(), b->type, t.data.data());
        out.emplace(b->name, std::move(t));
    }
    return out;
}

}  // namespace vitdeploy
