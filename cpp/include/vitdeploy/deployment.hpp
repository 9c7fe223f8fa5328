// The deployment profile 'vitdeploy tune' writes beside a model (<stem>.profile.json), read as the Python runtime
// reads it (vitdeploy/runtime/backends/deployment.py): used only where it was measured -- the same model bytes
// (SHA-256), the same CPU (model name, family/model, the reported flags after VITDEPLOY_CPU_MASK), the same
// number of cores this process may use, and the same ONNX Runtime version. The C++ library runs ONNX Runtime
// only: a profile that chose another runtime (OpenVINO) is said and not followed.
#pragma once

#include <string>

namespace vitdeploy {

struct DeploymentProfile {
    /// A profile file exists beside the model.
    bool found = false;
    /// It fits this model and machine, and chose ONNX Runtime: ``threads`` apply.
    bool used = false;
    std::string path;
    std::string runtime;    // "onnxruntime", "openvino"
    std::string precision;  // "file", "bf16"
    int threads = 0;        // 0: the profile gave none
    /// One line for the user: what was used, or why not (empty when no profile was found).
    std::string note;
};

/// ``<dir>/<stem>.profile.json`` for ``model_path``.
std::string deployment_profile_path(const std::string& model_path);

/// Read and match the profile beside ``model_path`` against this machine and ``ort_version`` (the ONNX Runtime
/// library loaded here). Never throws for the profile's content: a damaged or foreign profile is reported in
/// ``note`` and not used.
DeploymentProfile read_deployment_profile(const std::string& model_path, const std::string& ort_version);

/// The machine facts a profile records, as the Python side computes them (for tests and messages).
struct MachineFingerprint {
    std::string cpu, family_model, machine;
    std::string flags;  // the reported flags present, comma-separated, in the Python REPORTED order
    int cores = 0;
};
MachineFingerprint machine_fingerprint();

}  // namespace vitdeploy
