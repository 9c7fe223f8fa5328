// The facts the C++ library and the Python package both decide by (vitdeploy/data/runtime_facts.json, compiled
// in when the library is built and installed beside it as share/vitdeploy/runtime_facts.json): the CPU flags that
// matter, which CPU runtime runs which file, this CPU's measured defaults, and which model and part each file
// family is. A measured row changes in that one file.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

namespace vitdeploy {

struct CpuRuntimeFacts {
    std::string name, title;
    std::vector<std::string> precisions;  // the file precisions its CPU has kernels for
    std::vector<std::string> custom_ops;  // the vitdeploy custom ops it runs (by their CPU-form name)
    std::vector<std::string> policies;    // the precision policies it takes ("file", "bf16", "fp16")
};

struct CpuDefaultRow {
    std::vector<std::string> flags, without;  // x86 CPUs with every one of flags and none of without
    std::string runtime, precision;
    std::vector<std::string> measured_on;  // the families whose FP32 files it was measured on
};

struct GeluApartFacts {  // where OpenVINO runs each GEMM-fed GELU apart (vitdeploy/runtime/forms/openvino_gelu.py)
    std::vector<std::string> flags, without, file_precisions;
};

struct PolicyFacts {  // a reduced precision policy (proven_policies; where each is proven is the Python probe's)
    std::string name;                       // "bf16", "fp16"
    std::vector<std::string> units;         // the CPU flags it runs on (any one)
    std::string openvino_precision;         // what OpenVINO's CPU plugin is asked for ("bf16", "f16")
};

struct RuntimeFacts {
    std::vector<std::string> reported_flags, int8_dot_flags;
    std::vector<std::string> arm64_hwcap, arm64_hwcap2;  // AT_HWCAP / AT_HWCAP2 bit names, bit 0 first
    std::vector<CpuRuntimeFacts> cpu_runtimes;
    std::vector<CpuDefaultRow> cpu_defaults;
    GeluApartFacts gelu_apart;
    std::vector<PolicyFacts> policies;
    std::vector<std::string> profile_settings;  // the runner settings 'vitdeploy tune' writes into a profile
    std::vector<std::pair<std::string, std::pair<std::string, std::string>>> model_parts;  // family -> (model, part)

    /// (model, part) of a file family ("sam_image_encoder" -> ("sam", "image_encoder")); ("", "") when unknown.
    std::pair<std::string, std::string> model_part(const std::string& family) const;
    /// Whether the CPU runtime ``runtime`` takes the precision policy ``policy`` (onnxruntime: "file" only).
    bool takes(const std::string& runtime, const std::string& policy) const;
    /// The reduced precision policy ``name``; nullptr for "file" and for a name the facts do not hold.
    const PolicyFacts* policy(const std::string& name) const;
};

/// Whether ``item`` is one of ``items`` (a facts list: flags, precisions, families, settings).
inline bool listed(const std::vector<std::string>& items, const std::string& item) {
    return std::find(items.begin(), items.end(), item) != items.end();
}

/// A facts name in sentences: "bf16" -> "BF16".
inline std::string upper(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    return text;
}

/// The facts compiled into this library (parsed once).
const RuntimeFacts& runtime_facts();

/// The JSON text they were parsed from (byte for byte the file this library was built with).
const char* runtime_facts_json();

}  // namespace vitdeploy
