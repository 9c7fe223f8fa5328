// vitdeploy's JSON value: artifact metadata (ONNX metadata values, engine sidecars), read-only.
//
// Parsed by nlohmann/json (src/json.cpp), plus the NaN/Infinity tokens that Python's json.dumps writes
// by default; object keys stay in file order (the last of duplicate keys wins, as in Python); errors
// name the document and the byte offset. This small tree keeps nlohmann/json out of vitdeploy's public
// headers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vitdeploy/error.hpp"

namespace vitdeploy {

class Json {
public:
    enum class Type { Null, Bool, Number, String, Array, Object };

    Json() = default;
    static Json boolean(bool value);
    static Json number(double value);
    static Json string(std::string value);

    /// Parse a whole document; throws MetadataError naming ``what`` (a file or key) and the offset.
    static Json parse(std::string_view text, const std::string& what = "JSON text");

    Type type() const { return type_; }
    bool is_null() const { return type_ == Type::Null; }
    bool is_bool() const { return type_ == Type::Bool; }
    bool is_number() const { return type_ == Type::Number; }
    bool is_string() const { return type_ == Type::String; }
    bool is_array() const { return type_ == Type::Array; }
    bool is_object() const { return type_ == Type::Object; }

    // Accessors throw MetadataError on a type mismatch.
    bool as_bool() const;
    double as_number() const;
    /// The number as an integer; throws unless it is integral and fits in int64.
    std::int64_t as_integer() const;
    const std::string& as_string() const;
    const std::vector<Json>& as_array() const;
    /// Object keys in file order; values()[i] belongs to keys()[i].
    const std::vector<std::string>& keys() const;
    const std::vector<Json>& values() const;
    /// The value for ``key`` in an object, or nullptr when absent (or when this is not an object).
    const Json* find(std::string_view key) const;

    /// Compact JSON text (for messages and round trips).
    std::string dump() const;
    static const char* type_name(Type type);

private:
    friend class JsonBuilder;
    Type type_ = Type::Null;
    bool bool_ = false;
    double number_ = 0.0;
    std::string string_;
    std::vector<Json> items_;       // array items, or object values
    std::vector<std::string> keys_;  // object keys
};

}  // namespace vitdeploy
