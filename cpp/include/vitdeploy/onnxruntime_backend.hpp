// ONNX Runtime backend (CPU): the one that runs everywhere, including machines without a GPU.
//
// The ONNX Runtime types stay in the .cpp (pimpl), so code including this header needs no ONNX
// Runtime headers. Compiled only when VITDEPLOY_WITH_ONNXRUNTIME is defined.
#pragma once

#include <memory>
#include <string>

#include "vitdeploy/backend.hpp"

namespace vitdeploy {

#ifdef VITDEPLOY_WITH_ONNXRUNTIME
class OnnxRuntimeBackend final : public OpenedFile {
public:
    /// Load ``path``; throws InputError (missing file), BackendError (ONNX Runtime cannot load it or
    /// is older than the headers this was compiled with), MetadataError (bad metadata file).
    OnnxRuntimeBackend(const std::string& path, const BackendOptions& options = {});
    ~OnnxRuntimeBackend() override;

    std::string name() const override { return "onnxruntime-cpu"; }
    std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& feeds) override;

    /// "1.31.1": the version of the ONNX Runtime library loaded at run time.
    static std::string runtime_version();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};
#endif

}  // namespace vitdeploy
