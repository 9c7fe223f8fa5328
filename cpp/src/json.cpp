// vitdeploy::Json on nlohmann/json (https://github.com/nlohmann/json, Debian nlohmann-json3-dev): the library
// parses; this file converts its document into the small read-only tree the rest of vitdeploy uses and
// adds what Python's json module writes beyond RFC 8259 (NaN, Infinity, -Infinity) and a depth limit.
#include "vitdeploy/json.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace vitdeploy {

namespace {

constexpr int kMaxDepth = 64;  // metadata is shallow; a deeper document is malformed or hostile
struct TooDeep {};

// Python's json.dumps writes NaN, Infinity and -Infinity, which RFC 8259 (and so nlohmann/json) rejects.
// Outside strings they are replaced by marker strings ("\u0000NaN", ...) that JsonBuilder turns back
// into numbers; a real string cannot collide unless it starts with a NUL character.
const char* const kSpecials[] = {"-Infinity", "Infinity", "NaN"};

struct PythonSpecials {
    std::string text;
    std::vector<std::pair<std::size_t, std::size_t>> shifts;  // (offset in text after a marker, bytes added so far)

    std::size_t original_offset(std::size_t offset) const {
        std::size_t added = 0;
        for (const auto& [at, total] : shifts)
            if (at <= offset) added = total;
        return offset - std::min(added, offset);
    }
};

PythonSpecials mark_python_specials(std::string_view text) {
    PythonSpecials out;
    out.text.reserve(text.size());
    bool in_string = false;
    std::size_t added = 0;
    for (std::size_t i = 0; i < text.size();) {
        char c = text[i];
        if (in_string) {
            out.text.push_back(c);
            if (c == '\\' && i + 1 < text.size()) {
                out.text.push_back(text[i + 1]);
                i += 2;
                continue;
            }
            in_string = c != '"';
            ++i;
            continue;
        }
        if (c == '"') in_string = true;
        bool replaced = false;
        for (const char* token : kSpecials) {
            std::string_view t(token);
            if (text.substr(i, t.size()) == t) {
                std::string marker = std::string("\"\\u0000") + token + "\"";
                out.text += marker;
                added += marker.size() - t.size();
                i += t.size();
                out.shifts.emplace_back(out.text.size(), added);
                replaced = true;
                break;
            }
        }
        if (!replaced) {
            out.text.push_back(c);
            ++i;
        }
    }
    return out;
}

std::string reason(const nlohmann::ordered_json::parse_error& e) {
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 7: syntax error while
    // parsing value - unexpected ']'; expected '[', '{', or a literal": keep the part after the position.
    std::string what = e.what();
    std::size_t colon = what.find(": ");
    std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
    if (detail.find("expected end of input") != std::string::npos) return "unexpected text after the value (" + detail + ")";
    if (detail.find("missing closing quote") != std::string::npos) return "unterminated string (" + detail + ")";
    return detail;
}

}  // namespace

class JsonBuilder {
public:
    static Json build(const nlohmann::ordered_json& j) {
        Json out;
        switch (j.type()) {
            case nlohmann::ordered_json::value_t::null:
            case nlohmann::ordered_json::value_t::discarded: break;
            case nlohmann::ordered_json::value_t::boolean: return Json::boolean(j.get<bool>());
            case nlohmann::ordered_json::value_t::number_integer:
            case nlohmann::ordered_json::value_t::number_unsigned:
            case nlohmann::ordered_json::value_t::number_float: return Json::number(j.get<double>());
            case nlohmann::ordered_json::value_t::string: {
                const auto& s = j.get_ref<const std::string&>();
                if (!s.empty() && s[0] == '\0')
                    for (const char* token : kSpecials)
                        if (s.compare(1, std::string::npos, token) == 0)
                            return Json::number(s[1] == 'N' ? std::numeric_limits<double>::quiet_NaN()
                                                            : (s[1] == '-' ? -1.0 : 1.0) * std::numeric_limits<double>::infinity());
                return Json::string(s);
            }
            case nlohmann::ordered_json::value_t::array:
                out.type_ = Json::Type::Array;
                for (const auto& item : j) out.items_.push_back(build(item));
                break;
            case nlohmann::ordered_json::value_t::object:
                out.type_ = Json::Type::Object;
                for (const auto& [key, value] : j.items()) {
                    out.keys_.push_back(key);
                    out.items_.push_back(build(value));
                }
                break;
            case nlohmann::ordered_json::value_t::binary:
                throw MetadataError("JSON binary values are not metadata");
        }
        return out;
    }
};

Json Json::boolean(bool value) {
    Json j;
    j.type_ = Type::Bool;
    j.bool_ = value;
    return j;
}

Json Json::number(double value) {
    Json j;
    j.type_ = Type::Number;
    j.number_ = value;
    return j;
}

Json Json::string(std::string value) {
    Json j;
    j.type_ = Type::String;
    j.string_ = std::move(value);
    return j;
}

Json Json::parse(std::string_view text, const std::string& what) {
    PythonSpecials specials = mark_python_specials(text);
    auto depth_guard = [](int depth, nlohmann::ordered_json::parse_event_t, nlohmann::ordered_json&) {
        if (depth > kMaxDepth) throw TooDeep{};
        return true;
    };
    try {
        return JsonBuilder::build(nlohmann::ordered_json::parse(specials.text, depth_guard));
    } catch (const TooDeep&) {
        throw MetadataError(what + " is not valid JSON: nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    } catch (const nlohmann::ordered_json::parse_error& e) {
        throw MetadataError(what + " is not valid JSON at byte " + std::to_string(specials.original_offset(e.byte)) + ": " +
                            reason(e));
    }
}

const char* Json::type_name(Type type) {
    switch (type) {
        case Type::Null: return "null";
        case Type::Bool: return "a boolean";
        case Type::Number: return "a number";
        case Type::String: return "a string";
        case Type::Array: return "a list";
        case Type::Object: return "an object";
    }
    return "?";
}

namespace {
[[noreturn]] void type_mismatch(Json::Type want, Json::Type got) {
    throw MetadataError(std::string("expected ") + Json::type_name(want) + ", got " + Json::type_name(got));
}
}  // namespace

bool Json::as_bool() const {
    if (type_ != Type::Bool) type_mismatch(Type::Bool, type_);
    return bool_;
}

double Json::as_number() const {
    if (type_ != Type::Number) type_mismatch(Type::Number, type_);
    return number_;
}

std::int64_t Json::as_integer() const {
    double d = as_number();
    // 2^63 is exactly representable; anything at or above it does not fit.
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) || std::floor(d) != d)
        throw MetadataError("expected an integer, got " + dump());
    return static_cast<std::int64_t>(d);
}

const std::string& Json::as_string() const {
    if (type_ != Type::String) type_mismatch(Type::String, type_);
    return string_;
}

const std::vector<Json>& Json::as_array() const {
    if (type_ != Type::Array) type_mismatch(Type::Array, type_);
    return items_;
}

const std::vector<std::string>& Json::keys() const {
    if (type_ != Type::Object) type_mismatch(Type::Object, type_);
    return keys_;
}

const std::vector<Json>& Json::values() const {
    if (type_ != Type::Object) type_mismatch(Type::Object, type_);
    return items_;
}

const Json* Json::find(std::string_view key) const {
    if (type_ != Type::Object) return nullptr;
    for (std::size_t i = 0; i < keys_.size(); ++i)
        if (keys_[i] == key) return &items_[i];
    return nullptr;
}

std::string Json::dump() const {
    // Python's separators (", " and ": "), as the metadata was written; NaN/Infinity as Python writes them.
    switch (type_) {
        case Type::Number:
            if (std::isnan(number_)) return "NaN";
            if (std::isinf(number_)) return number_ > 0 ? "Infinity" : "-Infinity";
            {
                char buf[32];
                auto res = std::to_chars(buf, buf + sizeof buf, number_);  // shortest round trip: 8, not 8.0 (as Python's int)
                return std::string(buf, res.ptr);
            }
        case Type::Array: {
            std::string out = "[";
            for (std::size_t i = 0; i < items_.size(); ++i) out += (i ? ", " : "") + items_[i].dump();
            return out + "]";
        }
        case Type::Object: {
            std::string out = "{";
            for (std::size_t i = 0; i < keys_.size(); ++i)
                out += (i ? ", " : "") + nlohmann::ordered_json(keys_[i]).dump() + ": " + items_[i].dump();
            return out + "}";
        }
        case Type::String: return nlohmann::ordered_json(string_).dump();
        case Type::Bool: return bool_ ? "true" : "false";
        case Type::Null: break;
    }
    return "null";
}

}  // namespace vitdeploy
