// TensorRT backend (TensorRT 10 and 11 C++ API, CUDA runtime). Compiled only when CMake finds
// TensorRT (VITDEPLOY_WITH_TENSORRT); the TensorRT and CUDA types stay in the .cpp (pimpl).
//
// Loading: read the sidecar ('<plan>.json'), check the plan's size and SHA-256 against it, check
// its TensorRT release and GPU against the running ones, deserialize, check the engine's I/O against
// the sidecar, create one execution context and one CUDA stream, and allocate every I/O buffer once
// (dynamic inputs at their optimisation profile's maximum). run(): copy in, setInputShape,
// enqueueV3 on the stream, copy out, synchronize.
#pragma once

#include <memory>
#include <string>

#include "vitdeploy/backend.hpp"

namespace vitdeploy {

#ifdef VITDEPLOY_WITH_TENSORRT
class TensorRtBackend final : public OpenedFile {
public:
    TensorRtBackend(const std::string& path, const BackendOptions& options = {});
    ~TensorRtBackend() override;

    std::string name() const override { return "tensorrt"; }
    std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& feeds) override;

    /// "10.13.0": the TensorRT library loaded at run time (getInferLibVersion).
    static std::string runtime_version();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};
#endif

}  // namespace vitdeploy
