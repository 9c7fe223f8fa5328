// Artifact metadata: what an exported model says about itself, so the application hard-codes nothing.
//
// The contract is vitdeploy/metadata.py: string key/value pairs whose keys start with "vitdeploy."
// and whose non-string values are JSON-encoded. ONNX files carry them in metadata_props (read through
// the inference runtime's model-metadata API); a TensorRT engine carries them in a JSON sidecar.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vitdeploy/json.hpp"

namespace vitdeploy {

inline constexpr std::string_view kMetadataPrefix = "vitdeploy.";

class Metadata {
public:
    Metadata() = default;

    /// From raw key/value string pairs (ONNX metadata_props). Keys without the prefix are ignored;
    /// each value is JSON-decoded when it parses, else kept as a string (vitdeploy.metadata.decode).
    static Metadata from_properties(const std::vector<std::pair<std::string, std::string>>& props,
                                    std::string source);

    /// From a parsed JSON object. Accepts the prefixed string form (as in metadata_props), the
    /// decoded form ({"family": "sam_image_encoder", "input_size": [1024, 1024], ...}), or either one
    /// wrapped as {"metadata": {...}}.
    static Metadata from_json(const Json& document, std::string source);

    /// From a JSON sidecar file; throws MetadataError when it is missing or not valid JSON.
    static Metadata from_sidecar_file(const std::string& path);

    /// From an ONNX file's metadata_props, read without parsing the graph or loading the weights
    /// (read_onnx_metadata_props); throws InputError when the file is not an ONNX model.
    static Metadata from_onnx_file(const std::string& path);

    const std::string& source() const { return source_; }
    bool empty() const { return keys_.empty(); }
    bool has(std::string_view key) const;
    const std::vector<std::string>& keys() const { return keys_; }

    /// The value for ``key``; throws MetadataError naming the source and the key when absent.
    const Json& get(std::string_view key) const;
    std::string get_string(std::string_view key) const;
    bool get_bool(std::string_view key) const;
    std::int64_t get_int(std::string_view key) const;
    std::vector<double> get_numbers(std::string_view key) const;
    std::vector<std::int64_t> get_ints(std::string_view key) const;
    /// get_string(key) if present and a string, else ``fallback``.
    std::string get_string_or(std::string_view key, const std::string& fallback) const;
    /// The attention form a file 'vitdeploy optimize' wrote records (cpu_form.attention: "fused-kernel", "unfolded";
    /// vitdeploy.runtime.forms.cpu_form), empty for any other file.
    std::string cpu_form_attention() const;

    void set(const std::string& key, Json value);

    /// Throws MetadataError unless the file's family is the ``part`` of a ``model`` ("sam", "image_encoder"; the
    /// families' model parts are in vitdeploy/data/runtime_facts.json); ``role`` names the slot ("--encoder").
    void require_part(const std::string& model, const std::string& part, const std::string& role) const;

private:
    [[noreturn]] void bad_value(std::string_view key, const std::string& why) const;
    std::string source_;
    std::vector<std::string> keys_;
    std::vector<Json> values_;
};

/// The metadata_props (field 14) of the ModelProto in ``path``: walks the top-level protobuf fields and
/// skips every other one by its length, so a GB-sized model costs a few reads (as the Python runtime's
/// vitdeploy.runtime.ort_settings.read_metadata_props). Throws InputError for a file that is not one.
std::vector<std::pair<std::string, std::string>> read_onnx_metadata_props(const std::string& path);

}  // namespace vitdeploy
