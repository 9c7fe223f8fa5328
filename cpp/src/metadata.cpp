#include "vitdeploy/metadata.hpp"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "vitdeploy/error.hpp"
#include "vitdeploy/runtime_facts.hpp"

namespace vitdeploy {

namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
    return s.substr(0, prefix.size()) == prefix;
}

// vitdeploy.metadata.decode: json.loads(raw), or the raw string when that fails.
Json decode_value(const std::string& raw) {
    try {
        return Json::parse(raw);
    } catch (const MetadataError&) {
        return Json::string(raw);
    }
}

// One protobuf varint at ``pos`` of the stream; false at a clean end of file before it.
bool read_varint(std::istream& in, std::uint64_t& value, const std::string& path) {
    value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        const int c = in.get();
        if (c == std::char_traits<char>::eof()) {
            if (shift == 0) return false;
            break;
        }
        value |= static_cast<std::uint64_t>(c & 0x7f) << shift;
        if (!(c & 0x80)) return true;
    }
    throw InputError("'" + path + "' is not an ONNX model file (truncated protobuf varint): export it again with "
                     "'vitdeploy export'");
}

// (key, value) of a serialized StringStringEntryProto.
std::pair<std::string, std::string> string_pair(const std::string& entry, const std::string& path) {
    std::istringstream in(entry);
    std::string fields[3];
    std::uint64_t tag = 0, length = 0;
    while (read_varint(in, tag, path)) {
        if ((tag & 7) != 2 || !read_varint(in, length, path) || length > entry.size())
            throw InputError("'" + path + "' has an unreadable metadata entry: export it again with 'vitdeploy export'");
        std::string bytes(length, '\0');
        in.read(bytes.data(), static_cast<std::streamsize>(length));
        if ((tag >> 3) == 1 || (tag >> 3) == 2) fields[tag >> 3] = std::move(bytes);
    }
    return {fields[1], fields[2]};
}

}  // namespace

std::vector<std::pair<std::string, std::string>> read_onnx_metadata_props(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("ONNX file '" + path + "' cannot be opened: check the path and its permissions");
    in.seekg(0, std::ios::end);
    const auto size = static_cast<std::uint64_t>(in.tellg());
    in.seekg(0);
    if (size == 0) throw InputError("'" + path + "' is empty (0 bytes), not an ONNX model: export it again ('vitdeploy export')");
    std::vector<std::pair<std::string, std::string>> props;
    std::uint64_t tag = 0, value = 0;
    while (read_varint(in, tag, path)) {
        const auto wire = tag & 7;
        if (wire == 0) {
            read_varint(in, value, path);
        } else if (wire == 1 || wire == 5) {
            in.seekg(wire == 1 ? 8 : 4, std::ios::cur);
        } else if (wire == 2) {
            if (!read_varint(in, value, path) || value > size)
                throw InputError("'" + path + "' is not an ONNX model file (a field runs past the end): export it again");
            if ((tag >> 3) == 14) {  // ModelProto.metadata_props
                std::string entry(value, '\0');
                in.read(entry.data(), static_cast<std::streamsize>(value));
                props.push_back(string_pair(entry, path));
            } else {
                in.seekg(static_cast<std::streamoff>(value), std::ios::cur);
            }
        } else {
            throw InputError("'" + path + "' is not an ONNX model file (protobuf wire type " + std::to_string(wire) +
                             "): give a file written by 'vitdeploy export'");
        }
        if (!in) throw InputError("'" + path + "' is not an ONNX model file (truncated): export it again with 'vitdeploy export'");
    }
    return props;
}

Metadata Metadata::from_onnx_file(const std::string& path) {
    return from_properties(read_onnx_metadata_props(path), "'" + path + "'");
}

Metadata Metadata::from_properties(const std::vector<std::pair<std::string, std::string>>& props,
                                   std::string source) {
    Metadata meta;
    meta.source_ = std::move(source);
    for (const auto& [key, raw] : props) {
        if (!starts_with(key, kMetadataPrefix)) continue;
        meta.set(key.substr(kMetadataPrefix.size()), decode_value(raw));
    }
    return meta;
}

Metadata Metadata::from_json(const Json& document, std::string source) {
    if (!document.is_object())
        throw MetadataError("metadata in " + source + " must be a JSON object, got " +
                            Json::type_name(document.type()) + ": write it with vitdeploy");
    const Json* root = &document;
    const Json* wrapped = document.find("metadata");
    if (wrapped && wrapped->is_object() && !document.find("family") &&
        !document.find(std::string(kMetadataPrefix) + "family"))
        root = wrapped;
    Metadata meta;
    meta.source_ = std::move(source);
    for (std::size_t i = 0; i < root->keys().size(); ++i) {
        const std::string& key = root->keys()[i];
        const Json& value = root->values()[i];
        if (starts_with(key, kMetadataPrefix)) {
            // Prefixed form: values are strings as in metadata_props (decode them), or already JSON.
            meta.set(key.substr(kMetadataPrefix.size()), value.is_string() ? decode_value(value.as_string()) : value);
        } else {
            meta.set(key, value);
        }
    }
    return meta;
}

Metadata Metadata::from_sidecar_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw MetadataError("metadata file '" + path +
                            "' not found: it is written next to the engine by 'vitdeploy build-engine'; "
                            "pass its path with --encoder-metadata/--decoder-metadata");
    std::stringstream buffer;
    buffer << in.rdbuf();
    return from_json(Json::parse(buffer.str(), "metadata file '" + path + "'"), "metadata file '" + path + "'");
}

bool Metadata::has(std::string_view key) const {
    for (const auto& k : keys_)
        if (k == key) return true;
    return false;
}

const Json& Metadata::get(std::string_view key) const {
    for (std::size_t i = 0; i < keys_.size(); ++i)
        if (keys_[i] == key) return values_[i];
    throw MetadataError(source_ + " has no '" + std::string(key) +
                        "' metadata: re-export the model with a current vitdeploy (it stamps every artifact)");
}

void Metadata::bad_value(std::string_view key, const std::string& why) const {
    throw MetadataError("metadata '" + std::string(key) + "' in " + source_ + " is " + get(key).dump() +
                        ", " + why + ": re-export the model with vitdeploy");
}

std::string Metadata::get_string(std::string_view key) const {
    const Json& v = get(key);
    if (!v.is_string()) bad_value(key, "expected a string");
    return v.as_string();
}

bool Metadata::get_bool(std::string_view key) const {
    const Json& v = get(key);
    if (!v.is_bool()) bad_value(key, "expected true or false");
    return v.as_bool();
}

std::int64_t Metadata::get_int(std::string_view key) const {
    const Json& v = get(key);
    try {
        return v.as_integer();
    } catch (const MetadataError&) {
        bad_value(key, "expected an integer");
    }
}

std::vector<double> Metadata::get_numbers(std::string_view key) const {
    const Json& v = get(key);
    if (!v.is_array()) bad_value(key, "expected a list of numbers");
    std::vector<double> out;
    for (const Json& item : v.as_array()) {
        if (!item.is_number()) bad_value(key, "expected a list of numbers");
        out.push_back(item.as_number());
    }
    return out;
}

std::vector<std::int64_t> Metadata::get_ints(std::string_view key) const {
    const Json& v = get(key);
    if (!v.is_array()) bad_value(key, "expected a list of integers");
    std::vector<std::int64_t> out;
    for (const Json& item : v.as_array()) {
        try {
            out.push_back(item.as_integer());
        } catch (const MetadataError&) {
            bad_value(key, "expected a list of integers");
        }
    }
    return out;
}

std::string Metadata::get_string_or(std::string_view key, const std::string& fallback) const {
    for (std::size_t i = 0; i < keys_.size(); ++i)
        if (keys_[i] == key && values_[i].is_string()) return values_[i].as_string();
    return fallback;
}

std::string Metadata::cpu_form_attention() const {
    const Json* form = has("cpu_form") ? get("cpu_form").find("attention") : nullptr;
    return form && form->is_string() ? form->as_string() : std::string();
}

void Metadata::set(const std::string& key, Json value) {
    for (std::size_t i = 0; i < keys_.size(); ++i) {
        if (keys_[i] == key) {
            values_[i] = std::move(value);
            return;
        }
    }
    keys_.push_back(key);
    values_.push_back(std::move(value));
}

void Metadata::require_part(const std::string& model, const std::string& part, const std::string& role) const {
    if (empty())
        throw MetadataError(source_ + " carries no vitdeploy metadata: export it with 'vitdeploy export' "
                            "(or give a metadata JSON file) so the application knows how to feed it");
    const std::string family = get_string(std::string_view("family"));
    // which model and part a family is: vitdeploy/data/runtime_facts.json (the Python families read it too)
    if (runtime_facts().model_part(family) != std::make_pair(model, part))
        throw MetadataError(source_ + " is a '" + family + "' model, but " + role + " needs the " + part + " of a " +
                            model + " model: check which file you passed where");
}

}  // namespace vitdeploy
