// The deployment profile 'vitdeploy tune' writes beside a model (<stem>.profile.json), read as the Python runtime
// reads it (vitdeploy/runtime/deploy/profiles.py): used only where it was measured -- the same model bytes
// (SHA-256), the same CPU (model name, family/model, the reported flags after VITDEPLOY_CPU_MASK), the same
// number of cores this process may use, and the same version of the runtime it chose. The C++ library follows a
// profile that chose ONNX Runtime, or OpenVINO when it was built with OpenVINO (f32 or bf16 inference precision);
// other choices are said and not followed.
#pragma once

#include <string>

namespace vitdeploy {

struct DeploymentProfile {
    /// A profile file exists beside the model.
    bool found = false;
    /// It fits this model and machine, and chose a runtime this build runs: ``runtime``, ``precision`` and
    /// ``threads`` apply.
    bool used = false;
    std::string path;
    std::string runtime;    // "onnxruntime", "openvino"
    std::string precision;  // "file", "bf16"
    int threads = 0;        // 0: the profile gave none
    int gelu_apart = -1;    // OpenVINO's GELU form the profile chose (settings.gelu_apart): 1, 0, or -1 (none given)
    /// One line for the user: what was used, or why not (empty when no profile was found).
    std::string note;
};

/// ``<dir>/<stem>.profile.json`` for ``model_path``.
std::string deployment_profile_path(const std::string& model_path);

/// Where vitdeploy keeps what it may make again, as vitdeploy.fileio.user_cache_dir: $VITDEPLOY_CACHE_DIR/kind
/// (none, off, 0 or empty: no cache), else $XDG_CACHE_HOME/vitdeploy/kind, else ~/.cache/vitdeploy/kind, made if
/// missing; empty where the cache is off or cannot be made or written.
std::string user_cache_dir(const std::string& kind);

/// Read and match the profile beside ``model_path`` against this machine, ``ort_version`` (the ONNX Runtime library
/// loaded here) and ``openvino_version`` (OpenVINO's, empty when this build has no OpenVINO backend). Never throws
/// for the profile's content: a damaged or foreign profile is reported in ``note`` and not used.
DeploymentProfile read_deployment_profile(const std::string& model_path, const std::string& ort_version,
                                          const std::string& openvino_version = "");

/// The decision the Python runtime's first-use probe cached for ``model_path`` on this machine
/// (vitdeploy/runtime/deploy/decisions.py; ``$VITDEPLOY_CACHE_DIR/decisions``): one whose key names this CPU (model
/// name, family/model, flags, cores), ``threads`` (0: every core), ``ort_version`` (and ``openvino_version`` where this
/// build has OpenVINO) and the file (its metadata digest and size). ``found`` false: none; ``used`` false with a
/// ``note``: it chose what this build cannot run. The C++ library follows a decision; it does not probe.
DeploymentProfile read_cached_decision(const std::string& model_path, int threads, const std::string& ort_version,
                                       const std::string& openvino_version = "");

/// This CPU's measured default for a file with ``metadata`` (its family, precision and custom ops): the rows of
/// vitdeploy.runtime.deploy.cpu_rows.CPU_DEFAULTS (first match wins; FP32 files only, and only where the row's
/// runtime runs the file: cpu_gap in backend.hpp), else the file as written on ONNX Runtime, or on the first runtime
/// that runs it where ONNX Runtime's CPU cannot (a BF16 file). ``describe`` is the row as Python's
/// CpuDefault.describe says it ("avx2 without avx512f: openvino file"), or why ONNX Runtime was passed over;
/// tests/cpp/test_cpp.py checks that both sides choose the same under several CPU masks.
struct CpuDefault {
    std::string runtime = "onnxruntime";
    std::string precision = "file";
    std::string describe;  // empty: no row applies
};
class Metadata;
CpuDefault cpu_default(const Metadata& metadata);

/// ``options`` set as ``--runtime auto`` sets them in Python: the profile beside ``model_path`` where it fits
/// (runtime, inference precision, and threads where ``options.threads`` is 0), else the probe's cached decision for
/// this machine (read_cached_decision), else this CPU's default for the file (cpu_default) where this build has its
/// runtime. Returns the line to tell the user (empty: nothing to say).
struct BackendOptions;
std::string apply_deployment_profile(const std::string& model_path, BackendOptions& options);

/// The machine facts a profile records, as the Python side computes them (for tests and messages).
struct MachineFingerprint {
    std::string cpu, family_model, machine;
    std::string flags;  // the reported flags present, comma-separated, in the Python REPORTED order
    int cores = 0;
};
MachineFingerprint machine_fingerprint();

/// Whether this CPU's INT8 u8 x s8 kernels saturate (x86 without VNNI or AMX, after VITDEPLOY_CPU_MASK), as
/// vitdeploy.cpu_features.CpuFeatures.u8s8_saturates: ONNX Runtime then takes u8 x u8 kernels, OpenVINO refuses
/// INT8 files in C++.
bool u8s8_saturates();

/// Whether OpenVINO runs a file of ``file_precision`` faster with each GELU kept apart from the GEMM before it:
/// x86 with AVX2 and without AVX-512 (after VITDEPLOY_CPU_MASK), FP32 files only, as
/// vitdeploy.runtime.forms.openvino_gelu.keep_gelu_apart (the measurement is in that module's docstring).
bool keep_gelu_apart(const std::string& file_precision);

}  // namespace vitdeploy
