// OpenVINO backend (CPU): the same .onnx files through OpenVINO's CPU plugin, as the Python OpenVinoRunner runs them
// (vitdeploy/runtime/backends/openvino_runner.py): one request at a time (the LATENCY hint), the inference precision
// pinned ("f32": the file's FP32 math as written; "bf16" where the profile chose it), CPU pinning off when fewer
// threads than cores are asked for, and each GELU kept apart from the GEMM before it where that pays (AVX2 without
// AVX-512, FP32 files: vitdeploy/runtime/forms/openvino_gelu.py).
//
// Built when CMake finds OpenVINO (the Python 'openvino' wheel ships its headers and CMake package, so the same
// Python that provides ONNX Runtime provides it). The OpenVINO types stay in the .cpp (pimpl). Not done here: the
// 7-bit weight rewrite the Python runner applies to INT8 files on CPUs without VNNI/AMX (where OpenVINO's u8 x s8
// kernels saturate): such a file is refused with that reason (run it on ONNX Runtime).
#pragma once

#include <memory>
#include <string>

#include "vitdeploy/backend.hpp"

namespace vitdeploy {

#ifdef VITDEPLOY_WITH_OPENVINO
class OpenVinoBackend final : public OpenedFile {
public:
    /// Load and compile ``path`` for the CPU; throws InputError (missing file, an INT8 file on a saturating CPU, an
    /// unknown inference precision), BackendError (OpenVINO cannot read or compile it).
    OpenVinoBackend(const std::string& path, const BackendOptions& options = {});
    ~OpenVinoBackend() override;

    std::string name() const override { return "openvino-cpu"; }
    std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& feeds) override;

    /// The inference precision the compiled model runs ("f32", "bf16"), read back from the plugin.
    const std::string& inference_precision() const { return inference_precision_; }
    /// How many GELUs run apart from the GEMM before them (the load-time form of
    /// vitdeploy/runtime/forms/openvino_gelu.py, applied where keep_gelu_apart says it pays), or as the file holds
    /// them ('vitdeploy optimize --runtime openvino').
    int gelus_apart() const { return gelus_apart_; }
    /// How many heads transposes whose token and head axes may be equal were written in 5-D (the load-time form of
    /// vitdeploy/runtime/forms/openvino_heads.py: OpenVINO's fused attention misread the 4-D ones).
    int heads_in_5d() const { return heads_in_5d_; }
    /// "2026.4.1-...": the OpenVINO library loaded at run time.
    static std::string runtime_version();
    /// Where OpenVINO keeps models compiled at ``inference_precision`` (f32, bf16, f16; its model cache, ``CACHE_DIR``):
    /// the folder the Python runner uses, so a model compiled by either is loaded by the other; one per precision,
    /// because OpenVINO does not key a blob by its precision hint; empty where the cache is off
    /// (VITDEPLOY_CACHE_DIR=none) or cannot be written.
    static std::string compile_cache_folder(const std::string& inference_precision);
    /// The cache folder this backend's model was compiled with (empty: none).
    const std::string& compile_cache() const { return compile_cache_; }

private:
    std::string compile_cache_;
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::string inference_precision_;
    int gelus_apart_ = 0;
    int heads_in_5d_ = 0;
};
#endif

}  // namespace vitdeploy
