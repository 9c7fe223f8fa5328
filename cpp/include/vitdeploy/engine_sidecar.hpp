// The JSON sidecar next to a TensorRT engine ('model.plan' -> 'model.plan.json'), and the checks a
// runtime makes with it before and after deserializing the plan.
//
// The layout and the rules are vitdeploy/engine/sidecar.py and vitdeploy/engine/compat.py (schema
// "vitdeploy.engine-sidecar/1"); this is their C++ reading. It needs no TensorRT, so it is compiled
// and tested everywhere; the TensorRT backend calls it with the running TensorRT version and GPU.
#pragma once

#include <string>
#include <vector>

#include "vitdeploy/json.hpp"
#include "vitdeploy/metadata.hpp"
#include "vitdeploy/tensor.hpp"

namespace vitdeploy {

inline constexpr const char* kSidecarSchema = "vitdeploy.engine-sidecar/1";

/// What is here: the TensorRT release and the GPU an engine is about to run on.
struct RunningEnvironment {
    std::string tensorrt_version;    // "10.13.0"
    std::string gpu_name;            // "NVIDIA H100 80GB HBM3"
    std::string compute_capability;  // "9.0"
};

class EngineSidecar {
public:
    /// '<plan>.json'.
    static std::string default_path(const std::string& plan_path);

    /// Read and check the schema and the keys a runtime needs. ``sidecar_path`` empty: the default.
    /// Throws MetadataError (missing, not JSON, wrong schema, missing keys) naming the fix.
    static EngineSidecar read(const std::string& plan_path, const std::string& sidecar_path = "");

    const std::string& path() const { return path_; }
    const Json& document() const { return doc_; }
    /// The ONNX file's vitdeploy metadata, carried in the sidecar's "metadata" section.
    Metadata metadata() const;

    /// Throws MetadataError unless ``plan_bytes`` have the size and SHA-256 the sidecar records.
    void check_plan(const std::string& plan_path, const std::string& plan_bytes) const;

    /// Throws MetadataError when the engine cannot run in ``env`` (TensorRT release, GPU architecture);
    /// returns warnings for what may still run (another GPU model of the same compute capability).
    std::vector<std::string> check_compat(const RunningEnvironment& env, const std::string& plan_name) const;

    /// The io section: inputs or outputs as recorded at build time (dtype names as NumPy's).
    std::vector<TensorInfo> recorded_io(const std::string& section) const;

    /// Throws MetadataError unless the engine's actual I/O (names, element types, shapes with -1 for
    /// dynamic) is what the sidecar recorded: a sidecar that belongs to another engine.
    void check_io(const std::vector<TensorInfo>& engine_inputs, const std::vector<TensorInfo>& engine_outputs) const;

private:
    std::string path_;
    std::string plan_name_;
    Json doc_;
};

/// Whether TensorRT ``running`` can deserialize a plan built by TensorRT ``built`` (compat.py).
bool tensorrt_version_can_run(const std::string& built, const std::string& running, bool version_compatible);

}  // namespace vitdeploy
