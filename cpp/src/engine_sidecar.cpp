#include "vitdeploy/engine_sidecar.hpp"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "vitdeploy/error.hpp"
#include "vitdeploy/sha256.hpp"

namespace vitdeploy {

namespace {

std::string rebuild_hint() { return "rebuild the engine with 'vitdeploy build-engine', which writes both files"; }

// "10.13.0.35" -> {10, 13, 0, 35}; stops at the first part without leading digits (versions.parse_version).
std::vector<int> parse_version(const std::string& text) {
    std::vector<int> parts;
    std::stringstream ss(text);
    std::string piece;
    while (std::getline(ss, piece, '.')) {
        std::size_t n = 0;
        while (n < piece.size() && std::isdigit(static_cast<unsigned char>(piece[n]))) ++n;
        if (n == 0) break;
        parts.push_back(std::stoi(piece.substr(0, n)));
    }
    return parts;
}

std::vector<int> release(const std::string& text) {
    std::vector<int> v = parse_version(text);
    if (v.size() > 3) v.resize(3);
    return v;
}

std::vector<int> cc(const std::string& text) {
    std::vector<int> v = parse_version(text);
    if (v.size() > 2) v.resize(2);
    return v;
}

const Json& section(const Json& doc, const char* name) {
    static const Json empty;
    const Json* s = doc.find(name);
    return s ? *s : empty;
}

std::string string_in(const Json& doc, const char* sec, const char* key, const std::string& fallback = "") {
    const Json* v = section(doc, sec).find(key);
    if (!v || v->is_null()) return fallback;
    return v->is_string() ? v->as_string() : v->dump();
}

ElementType type_from_name(const std::string& name) {
    for (ElementType t : {ElementType::Float32, ElementType::Float16, ElementType::BFloat16, ElementType::Int64,
                          ElementType::Int32, ElementType::Int8, ElementType::UInt8, ElementType::Bool})
        if (name == element_type_name(t)) return t;
    return ElementType::Unsupported;
}

}  // namespace

bool tensorrt_version_can_run(const std::string& built, const std::string& running, bool version_compatible) {
    std::vector<int> b = release(built), r = release(running);
    if (b.empty() || r.empty()) return false;
    if (!version_compatible) return b == r;
    if (r < b) return false;
    return b[0] == r[0] || (b[0] == 8 && r[0] == 10) || (b[0] == 10 && r[0] == 11);
}

std::string EngineSidecar::default_path(const std::string& plan_path) { return plan_path + ".json"; }

EngineSidecar EngineSidecar::read(const std::string& plan_path, const std::string& sidecar_path) {
    EngineSidecar sc;
    sc.path_ = sidecar_path.empty() ? default_path(plan_path) : sidecar_path;
    sc.plan_name_ = std::filesystem::path(plan_path).filename().string();
    std::ifstream in(sc.path_, std::ios::binary);
    if (!in)
        throw MetadataError("'" + sc.plan_name_ + "' has no sidecar '" + sc.path_ + "': " + rebuild_hint() +
                            " (or pass the sidecar's path)");
    std::stringstream buffer;
    buffer << in.rdbuf();
    sc.doc_ = Json::parse(buffer.str(), "sidecar '" + sc.path_ + "'");
    const Json* schema = sc.doc_.find("schema");
    if (!sc.doc_.is_object() || !schema || !schema->is_string() || schema->as_string() != kSidecarSchema) {
        std::string found = schema ? (schema->is_string() ? schema->as_string() : schema->dump())
                                   : (sc.doc_.is_object() ? "none" : Json::type_name(sc.doc_.type()));
        throw MetadataError("sidecar '" + sc.path_ + "' has schema '" + found + "', expected '" + kSidecarSchema +
                            "': " + rebuild_hint());
    }
    std::string missing;
    for (auto [sec, key] : {std::pair{"plan", "size_bytes"}, std::pair{"plan", "sha256"},
                            std::pair{"tensorrt", "version"}, std::pair{"gpu", "compute_capability"}}) {
        if (!section(sc.doc_, sec).find(key)) missing += (missing.empty() ? "" : ", ") + std::string(sec) + "." + key;
    }
    if (!missing.empty()) throw MetadataError("sidecar '" + sc.path_ + "' lacks " + missing + ": " + rebuild_hint());
    return sc;
}

Metadata EngineSidecar::metadata() const {
    const Json* meta = doc_.find("metadata");
    if (!meta || !meta->is_object())
        throw MetadataError("sidecar '" + path_ + "' has no 'metadata' section: " + rebuild_hint());
    return Metadata::from_json(*meta, "sidecar '" + path_ + "'");
}

void EngineSidecar::check_plan(const std::string& plan_path, const std::string& plan_bytes) const {
    const std::string again = "copy it again or rebuild it with 'vitdeploy build-engine'";
    const Json* size = section(doc_, "plan").find("size_bytes");
    std::int64_t expected = 0;
    try {
        expected = size->as_integer();
    } catch (const MetadataError&) {
        throw MetadataError("sidecar '" + path_ + "' has a malformed plan.size_bytes: " + rebuild_hint());
    }
    if (static_cast<std::int64_t>(plan_bytes.size()) != expected)
        throw MetadataError("'" + plan_path + "' is " + std::to_string(plan_bytes.size()) + " bytes but its sidecar records " +
                            std::to_string(expected) + ": the plan is truncated or was replaced; " + again);
    std::string digest = string_in(doc_, "plan", "sha256");
    if (sha256_hex(plan_bytes.data(), plan_bytes.size()) != digest)
        throw MetadataError("'" + plan_path + "' does not match the SHA-256 in its sidecar: the plan was modified or "
                            "replaced; " + again);
}

std::vector<std::string> EngineSidecar::check_compat(const RunningEnvironment& env, const std::string& plan_name) const {
    const std::string built_trt = string_in(doc_, "tensorrt", "version");
    // An engine built by TensorRT for RTX needs libtensorrt_rtx; this backend links classic TensorRT (libnvinfer).
    if (string_in(doc_, "tensorrt", "library", "tensorrt") == "tensorrt-rtx")
        throw MetadataError("'" + plan_name + "' was built by TensorRT-RTX " + built_trt +
                            ", and the C++ library's TensorRT backend runs classic TensorRT engines only: rebuild it with "
                            "'vitdeploy build-engine --builder tensorrt' on the GPU, or run it from Python (vitdeploy's runner "
                            "loads TensorRT-RTX engines)");
    const Json& options = section(doc_, "build_options");
    const Json* vc = options.find("version_compatible");
    const bool version_compatible = vc && vc->is_bool() && vc->as_bool();
    const std::string rebuild = "rebuild it here with 'vitdeploy build-engine' from '" +
                                string_in(doc_, "onnx", "file", "its ONNX file") + "'";
    if (!tensorrt_version_can_run(built_trt, env.tensorrt_version, version_compatible)) {
        std::string rule = version_compatible
                               ? "a version-compatible engine runs only with the same or a newer TensorRT of a supported major version"
                               : "an engine runs only with the TensorRT release that built it (build with --version-compatible to relax this)";
        throw MetadataError("'" + plan_name + "' was built with TensorRT " + (built_trt.empty() ? "unknown" : built_trt) +
                            " and this is TensorRT " + env.tensorrt_version + ": " + rule + "; " + rebuild);
    }
    const std::string built_name = string_in(doc_, "gpu", "name", "unknown GPU");
    const std::string built_cc = string_in(doc_, "gpu", "compute_capability");
    const std::string level = options.find("hardware_compatibility") && options.find("hardware_compatibility")->is_string()
                                  ? options.find("hardware_compatibility")->as_string()
                                  : "none";
    const std::string here = "this GPU is " + env.gpu_name + " (compute capability " + env.compute_capability + ")";
    const std::string built = "'" + plan_name + "' was built on " + built_name + " (compute capability " +
                              (built_cc.empty() ? "unknown" : built_cc) + ")";
    if (level != "none" && level != "ampere_plus" && level != "same_compute_capability")
        throw MetadataError("'" + plan_name + "' has an unknown hardware compatibility level '" + level +
                            "' in its sidecar; " + rebuild);
    if (level == "ampere_plus") {
        if (cc(env.compute_capability) < std::vector<int>{8, 0})
            throw MetadataError(built + " for Ampere and newer GPUs, but " + here + ": " + rebuild);
        return {};
    }
    if (cc(built_cc).empty() || cc(built_cc) != cc(env.compute_capability)) {
        std::string hint = level == "same_compute_capability" ? "" : " (or build with --hardware-compatibility ampere_plus)";
        throw MetadataError(built + " and " + here + ": TensorRT engines do not move between GPU architectures; " +
                            rebuild + hint);
    }
    if (level == "none" && built_name != env.gpu_name)
        return {built + " and " + here +
                ": TensorRT advises against moving engines between GPU models (it may run slower or fail); rebuild on "
                "this GPU for best results"};
    return {};
}

std::vector<TensorInfo> EngineSidecar::recorded_io(const std::string& which) const {
    std::vector<TensorInfo> out;
    const Json* list = section(doc_, "io").find(which);
    if (!list) return out;
    try {
        for (const Json& item : list->as_array()) {
            TensorInfo info;
            info.name = item.find("name") ? item.find("name")->as_string() : "";
            info.type = item.find("dtype") ? type_from_name(item.find("dtype")->as_string()) : ElementType::Unsupported;
            if (const Json* shape = item.find("shape"))
                for (const Json& d : shape->as_array()) info.shape.push_back(d.is_number() ? d.as_integer() : -1);
            out.push_back(std::move(info));
        }
    } catch (const MetadataError& e) {
        throw MetadataError("sidecar '" + path_ + "' has a malformed io." + which + " section (" + e.what() + "): " +
                            rebuild_hint());
    }
    return out;
}

void EngineSidecar::check_io(const std::vector<TensorInfo>& engine_inputs,
                             const std::vector<TensorInfo>& engine_outputs) const {
    auto compare = [&](const std::string& which, const std::vector<TensorInfo>& actual) {
        std::vector<TensorInfo> recorded = recorded_io(which);
        if (recorded.empty()) return;  // an older sidecar without io: nothing to compare
        auto describe = [](const std::vector<TensorInfo>& infos) {
            std::string s;
            for (const auto& i : infos)
                s += (s.empty() ? "" : ", ") + i.name + " " + element_type_name(i.type) + " " + shape_string(i.shape);
            return s;
        };
        bool same = recorded.size() == actual.size();
        for (const auto& r : recorded) {
            bool found = false;
            for (const auto& a : actual) {
                if (a.name != r.name) continue;
                found = a.type == r.type && a.shape.size() == r.shape.size();
                for (std::size_t d = 0; found && d < r.shape.size(); ++d)
                    if (r.shape[d] >= 0 && a.shape[d] >= 0 && r.shape[d] != a.shape[d]) found = false;
            }
            same = same && found;
        }
        if (!same)
            throw MetadataError("sidecar '" + path_ + "' does not match the engine '" + plan_name_ + "': it records " +
                                which + " {" + describe(recorded) + "}, the engine has {" + describe(actual) +
                                "}; the sidecar belongs to another engine: " + rebuild_hint());
    };
    compare("inputs", engine_inputs);
    compare("outputs", engine_outputs);
}

}  // namespace vitdeploy
