#include "vitdeploy/json.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>

namespace vitdeploy {

namespace {

constexpr int kMaxDepth = 64;  // metadata is shallow; a deeper document is malformed or hostile

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

void dump_string(std::string& out, const std::string& s) {
    out.push_back('"');
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out.push_back(static_cast<char>(c));
                }
        }
    }
    out.push_back('"');
}

void dump_value(std::string& out, const Json& v) {
    switch (v.type()) {
        case Json::Type::Null: out += "null"; break;
        case Json::Type::Bool: out += v.as_bool() ? "true" : "false"; break;
        case Json::Type::Number: {
            double d = v.as_number();
            if (std::isnan(d)) {
                out += "NaN";
            } else if (std::isinf(d)) {
                out += d > 0 ? "Infinity" : "-Infinity";
            } else {
                char buf[32];
                auto res = std::to_chars(buf, buf + sizeof buf, d);  // shortest round-trip form
                out.append(buf, res.ptr);
            }
            break;
        }
        case Json::Type::String: dump_string(out, v.as_string()); break;
        case Json::Type::Array: {
            out.push_back('[');
            const auto& items = v.as_array();
            for (std::size_t i = 0; i < items.size(); ++i) {
                if (i) out += ", ";
                dump_value(out, items[i]);
            }
            out.push_back(']');
            break;
        }
        case Json::Type::Object: {
            out.push_back('{');
            for (std::size_t i = 0; i < v.keys().size(); ++i) {
                if (i) out += ", ";
                dump_string(out, v.keys()[i]);
                out += ": ";
                dump_value(out, v.values()[i]);
            }
            out.push_back('}');
            break;
        }
    }
}

}  // namespace

class JsonParser {
public:
    JsonParser(std::string_view text, const std::string& what) : text_(text), what_(what) {}

    Json parse_document() {
        skip_ws();
        Json value = parse_value(0);
        skip_ws();
        if (pos_ != text_.size()) fail("unexpected text after the value");
        return value;
    }

private:
    [[noreturn]] void fail(const std::string& why) const {
        throw MetadataError(what_ + " is not valid JSON (" + why + " at byte " + std::to_string(pos_) +
                            "): rewrite it with a JSON writer such as Python's json module");
    }

    void skip_ws() {
        while (pos_ < text_.size() &&
               (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
            ++pos_;
    }

    bool consume(std::string_view token) {
        if (text_.substr(pos_, token.size()) == token) {
            pos_ += token.size();
            return true;
        }
        return false;
    }

    Json parse_value(int depth) {
        if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
        if (pos_ >= text_.size()) fail("unexpected end");
        char c = text_[pos_];
        if (c == '{') return parse_object(depth);
        if (c == '[') return parse_array(depth);
        if (c == '"') return Json::string(parse_string());
        if (consume("true")) return Json::boolean(true);
        if (consume("false")) return Json::boolean(false);
        if (consume("null")) return Json();
        if (consume("NaN")) return Json::number(std::numeric_limits<double>::quiet_NaN());
        if (consume("Infinity")) return Json::number(std::numeric_limits<double>::infinity());
        if (consume("-Infinity")) return Json::number(-std::numeric_limits<double>::infinity());
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
        fail(std::string("unexpected character '") + c + "'");
    }

    Json parse_number() {
        std::size_t start = pos_;
        if (text_[pos_] == '-') ++pos_;
        auto digits = [&] {
            std::size_t s = pos_;
            while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
            return pos_ - s;
        };
        if (digits() == 0) fail("a number needs digits");
        if (pos_ < text_.size() && text_[pos_] == '.') {
            ++pos_;
            if (digits() == 0) fail("a fraction needs digits");
        }
        if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
            ++pos_;
            if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
            if (digits() == 0) fail("an exponent needs digits");
        }
        double value = 0.0;
        // from_chars is locale-independent and correctly rounded, like Python's float().
        auto res = std::from_chars(text_.data() + start, text_.data() + pos_, value);
        if (res.ec == std::errc::result_out_of_range) {
            value = text_[start] == '-' ? -std::numeric_limits<double>::infinity()
                                        : std::numeric_limits<double>::infinity();
        } else if (res.ec != std::errc() || res.ptr != text_.data() + pos_) {
            fail("malformed number");
        }
        return Json::number(value);
    }

    std::uint32_t parse_hex4() {
        if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
        std::uint32_t cp = 0;
        for (int i = 0; i < 4; ++i) {
            char h = text_[pos_++];
            cp <<= 4;
            if (h >= '0' && h <= '9') cp |= static_cast<std::uint32_t>(h - '0');
            else if (h >= 'a' && h <= 'f') cp |= static_cast<std::uint32_t>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') cp |= static_cast<std::uint32_t>(h - 'A' + 10);
            else fail("bad hex digit in \\u escape");
        }
        return cp;
    }

    std::string parse_string() {
        ++pos_;  // opening quote
        std::string out;
        while (true) {
            if (pos_ >= text_.size()) fail("unterminated string");
            char c = text_[pos_++];
            if (c == '"') return out;
            if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
            if (c != '\\') {
                out.push_back(c);
                continue;
            }
            if (pos_ >= text_.size()) fail("unterminated escape");
            char e = text_[pos_++];
            switch (e) {
                case '"': out.push_back('"'); break;
                case '\\': out.push_back('\\'); break;
                case '/': out.push_back('/'); break;
                case 'b': out.push_back('\b'); break;
                case 'f': out.push_back('\f'); break;
                case 'n': out.push_back('\n'); break;
                case 'r': out.push_back('\r'); break;
                case 't': out.push_back('\t'); break;
                case 'u': {
                    std::uint32_t cp = parse_hex4();
                    if (cp >= 0xD800 && cp <= 0xDBFF) {  // surrogate pair
                        if (!consume("\\u")) fail("lone high surrogate");
                        std::uint32_t low = parse_hex4();
                        if (low < 0xDC00 || low > 0xDFFF) fail("bad low surrogate");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                        fail("lone low surrogate");
                    }
                    append_utf8(out, cp);
                    break;
                }
                default: fail(std::string("unknown escape '\\") + e + "'");
            }
        }
    }

    Json parse_array(int depth) {
        ++pos_;
        Json out;
        out.type_ = Json::Type::Array;
        skip_ws();
        if (consume("]")) return out;
        while (true) {
            skip_ws();
            out.items_.push_back(parse_value(depth + 1));
            skip_ws();
            if (consume("]")) return out;
            if (!consume(",")) fail("expected ',' or ']'");
        }
    }

    Json parse_object(int depth) {
        ++pos_;
        Json out;
        out.type_ = Json::Type::Object;
        skip_ws();
        if (consume("}")) return out;
        while (true) {
            skip_ws();
            if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected a string key");
            std::string key = parse_string();
            skip_ws();
            if (!consume(":")) fail("expected ':'");
            skip_ws();
            Json value = parse_value(depth + 1);
            // Like Python's json: the last duplicate wins.
            bool replaced = false;
            for (std::size_t i = 0; i < out.keys_.size(); ++i) {
                if (out.keys_[i] == key) {
                    out.items_[i] = std::move(value);
                    replaced = true;
                    break;
                }
            }
            if (!replaced) {
                out.keys_.push_back(std::move(key));
                out.items_.push_back(std::move(value));
            }
            skip_ws();
            if (consume("}")) return out;
            if (!consume(",")) fail("expected ',' or '}'");
        }
    }

    std::string_view text_;
    std::string what_;
    std::size_t pos_ = 0;
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
    return JsonParser(text, what).parse_document();
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
    std::string out;
    dump_value(out, *this);
    return out;
}

}  // namespace vitdeploy
