// The inference backend interface: one model file, its metadata, named float32 tensors in and out.
//
// Mirrors the Python Runner protocol (vitdeploy/runtime/runners.py). Implementations:
//   OnnxRuntimeBackend (.onnx; the ONNX Runtime shared library)  -- when built with ONNX Runtime
//   OpenVinoBackend    (.onnx with runtime "openvino")           -- when built with OpenVINO
//   TensorRtBackend    (.plan/.engine; TensorRT 10/11 + CUDA)   -- when built with TensorRT
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "vitdeploy/metadata.hpp"
#include "vitdeploy/tensor.hpp"

namespace vitdeploy {

struct BackendOptions {
    /// CPU threads for ONNX Runtime (0: its default).
    int threads = 0;
    /// A JSON metadata file to use instead of the model's own metadata (the ONNX file's
    /// metadata_props, or the engine's sidecar '<engine>.json'). Empty: the model's own.
    std::string metadata_path;
    /// CUDA device index for TensorRT.
    int device = 0;
    /// Which runtime runs an .onnx file: "onnxruntime" (empty: the default) or "openvino" (when built with it;
    /// a deployment profile that chose OpenVINO sets it).
    std::string runtime;
    /// OpenVINO's inference precision: "f32" (empty: the file's FP32 math as written) or "bf16".
    std::string inference_precision;
    /// ONNX Runtime custom-op library to register (libvitdeploy_ort_ops.so, built by cpp/build.sh): needed by
    /// files written by 'vitdeploy optimize --fused-attention'. Empty: none.
    std::string ort_ops_library;
    /// OpenVINO: keep each GELU apart from the GEMM before it (1), or not (0); -1: where keep_gelu_apart says it pays
    /// (a deployment profile that chose either sets it).
    int gelu_apart = -1;
};

class Backend {
public:
    virtual ~Backend() = default;
    Backend(const Backend&) = delete;
    Backend& operator=(const Backend&) = delete;

    /// "onnxruntime-cpu", "tensorrt", ...
    virtual std::string name() const = 0;
    virtual const std::string& path() const = 0;
    virtual const std::vector<TensorInfo>& inputs() const = 0;
    virtual const std::vector<TensorInfo>& outputs() const = 0;
    virtual const Metadata& metadata() const = 0;
    /// Things that may still work but deserve a look (printed by the example app).
    virtual const std::vector<std::string>& warnings() const = 0;

    /// Run once. ``feeds`` must hold every input by name, with shapes the model accepts; the result
    /// holds every output by name. Throws InputError for bad feeds, BackendError when the runtime fails.
    virtual std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& feeds) = 0;

    /// The input or output called ``name``; throws MetadataError naming what the model has instead.
    const TensorInfo& input(const std::string& name) const;
    const TensorInfo& output(const std::string& name) const;

protected:
    Backend() = default;
    /// Throws InputError unless ``feeds`` holds exactly the inputs, with matching shapes and sizes.
    void check_feeds(const std::map<std::string, Tensor>& feeds) const;
};

/// A backend over one opened file: what it read when it opened (path, inputs, outputs, metadata, warnings), held
/// here once for every runtime; the runtime's constructor fills it and its run() uses it.
class OpenedFile : public Backend {
public:
    const std::string& path() const final { return path_; }
    const std::vector<TensorInfo>& inputs() const final { return inputs_; }
    const std::vector<TensorInfo>& outputs() const final { return outputs_; }
    const Metadata& metadata() const final { return metadata_; }
    const std::vector<std::string>& warnings() const final { return warnings_; }

protected:
    explicit OpenedFile(std::string path) : path_(std::move(path)) {}

    std::string path_;
    std::vector<TensorInfo> inputs_;
    std::vector<TensorInfo> outputs_;
    Metadata metadata_;
    std::vector<std::string> warnings_;
};

/// Open ``path`` with the backend its extension calls for: .onnx -> ONNX Runtime (OpenVINO with
/// ``options.runtime == "openvino"``); .plan, .engine, .trt -> TensorRT. Throws InputError for a missing file or unknown extension, BackendError when the
/// backend is not compiled into this build.
std::unique_ptr<Backend> open_model(const std::string& path, const BackendOptions& options = {});

/// Names of the backends compiled into this build ("onnxruntime", "openvino", "tensorrt").
std::vector<std::string> available_backends();

/// What a runtime's CPU runs of an ONNX file: the C++ mirror of the Python registry's capability
/// (RuntimeEntry.cpu_gap in vitdeploy/runtime/backends/registry.py: the file precisions each runtime has CPU kernels
/// for, the vitdeploy custom ops it carries; tests/cpp/test_cpp.py's golden 'cpu_gaps' cases hold the two together).
/// Why ``runtime`` ("onnxruntime", "openvino") cannot run a file with ``metadata`` on the CPU, as the phrase after the
/// file's name ("is a BF16 graph and ONNX Runtime's CPU has no BF16 kernels"); empty where it can.
std::string cpu_gap(const std::string& runtime, const Metadata& metadata);
/// The runtimes ("onnxruntime", "openvino", in that order, compiled in or not) whose CPU runs a file with ``metadata``.
std::vector<std::string> cpu_runtimes_for(const Metadata& metadata);
/// "'<file>' <gap>: run it with --runtime <others> (or auto)" where ``runtime``'s CPU cannot run it; empty where it can.
std::string cpu_refusal(const std::string& runtime, const Metadata& metadata, const std::string& file);

}  // namespace vitdeploy
