#include "vitdeploy/tensor.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "vitdeploy/error.hpp"

namespace vitdeploy {

const char* element_type_name(ElementType type) {
    switch (type) {
        case ElementType::Float32: return "float32";
        case ElementType::Float16: return "float16";
        case ElementType::BFloat16: return "bfloat16";
        case ElementType::Int64: return "int64";
        case ElementType::Int32: return "int32";
        case ElementType::Int8: return "int8";
        case ElementType::UInt8: return "uint8";
        case ElementType::Bool: return "bool";
        case ElementType::Unsupported: return "unsupported";
    }
    return "unsupported";
}

std::size_t Tensor::numel() const { return shape_volume(shape); }

std::string shape_string(const std::vector<std::int64_t>& shape) {
    std::string out = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) out += ", ";
        out += std::to_string(shape[i]);
    }
    return out + "]";
}

std::size_t shape_volume(const std::vector<std::int64_t>& shape) {
    std::size_t volume = 1;
    for (std::int64_t d : shape) {
        if (d < 0) throw InputError("shape " + shape_string(shape) + " has a negative dimension");
        if (d != 0 && volume > std::numeric_limits<std::size_t>::max() / static_cast<std::size_t>(d))
            throw InputError("shape " + shape_string(shape) + " is too large");
        volume *= static_cast<std::size_t>(d);
    }
    return volume;
}

bool shape_matches(const std::vector<std::int64_t>& pattern, const std::vector<std::int64_t>& shape) {
    if (pattern.size() != shape.size()) return false;
    for (std::size_t i = 0; i < pattern.size(); ++i)
        if (pattern[i] >= 0 && pattern[i] != shape[i]) return false;
    return true;
}

std::size_t element_size(ElementType type) {
    switch (type) {
        case ElementType::Float32: return 4;
        case ElementType::Float16: return 2;
        case ElementType::BFloat16: return 2;
        case ElementType::Int64: return 8;
        case ElementType::Int32: return 4;
        case ElementType::Int8: return 1;
        case ElementType::UInt8: return 1;
        case ElementType::Bool: return 1;
        case ElementType::Unsupported: return 0;
    }
    return 0;
}

namespace {
template <typename T>
void store(void* dst, std::size_t i, T value) {
    std::memcpy(static_cast<unsigned char*>(dst) + i * sizeof(T), &value, sizeof(T));
}
template <typename T>
T load(const void* src, std::size_t i) {
    T value;
    std::memcpy(&value, static_cast<const unsigned char*>(src) + i * sizeof(T), sizeof(T));
    return value;
}
}  // namespace

void encode_elements(const float* src, std::size_t n, ElementType type, void* dst) {
    for (std::size_t i = 0; i < n; ++i) {
        const float v = src[i];
        switch (type) {
            case ElementType::Float32: store<float>(dst, i, v); break;
            case ElementType::Float16: store<std::uint16_t>(dst, i, float_to_half(v)); break;
            case ElementType::BFloat16: store<std::uint16_t>(dst, i, float_to_bfloat16(v)); break;
            case ElementType::Int64: store<std::int64_t>(dst, i, static_cast<std::int64_t>(v)); break;
            case ElementType::Int32: store<std::int32_t>(dst, i, static_cast<std::int32_t>(v)); break;
            case ElementType::Int8: store<std::int8_t>(dst, i, static_cast<std::int8_t>(v)); break;
            case ElementType::UInt8: store<std::uint8_t>(dst, i, static_cast<std::uint8_t>(v)); break;
            case ElementType::Bool: store<std::uint8_t>(dst, i, v != 0.0f ? 1 : 0); break;
            case ElementType::Unsupported: throw BackendError("cannot convert float32 to an unsupported element type");
        }
    }
}

void decode_elements(const void* src, std::size_t n, ElementType type, float* dst) {
    for (std::size_t i = 0; i < n; ++i) {
        switch (type) {
            case ElementType::Float32: dst[i] = load<float>(src, i); break;
            case ElementType::Float16: dst[i] = half_to_float(load<std::uint16_t>(src, i)); break;
            case ElementType::BFloat16: dst[i] = bfloat16_to_float(load<std::uint16_t>(src, i)); break;
            case ElementType::Int64: dst[i] = static_cast<float>(load<std::int64_t>(src, i)); break;
            case ElementType::Int32: dst[i] = static_cast<float>(load<std::int32_t>(src, i)); break;
            case ElementType::Int8: dst[i] = static_cast<float>(load<std::int8_t>(src, i)); break;
            case ElementType::UInt8:
            case ElementType::Bool: dst[i] = static_cast<float>(load<std::uint8_t>(src, i)); break;
            case ElementType::Unsupported: throw BackendError("cannot convert an unsupported element type to float32");
        }
    }
}

std::uint16_t float_to_half(float value) {
    std::uint32_t f;
    std::memcpy(&f, &value, sizeof f);
    std::uint32_t sign = (f >> 16) & 0x8000u;
    std::uint32_t exp = (f >> 23) & 0xFFu;
    std::uint32_t man = f & 0x7FFFFFu;
    if (exp == 0xFF) return static_cast<std::uint16_t>(sign | 0x7C00u | (man ? 0x200u : 0u));  // inf / nan
    int e = static_cast<int>(exp) - 127 + 15;
    if (e >= 0x1F) return static_cast<std::uint16_t>(sign | 0x7C00u);  // overflow -> inf
    if (e <= 0) {  // subnormal half (or zero)
        if (e < -10) return static_cast<std::uint16_t>(sign);
        man |= 0x800000u;
        int shift = 14 - e;
        std::uint32_t half = man >> shift;
        std::uint32_t rem = man & ((1u << shift) - 1);
        std::uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) ++half;
        return static_cast<std::uint16_t>(sign | half);
    }
    std::uint32_t half = (static_cast<std::uint32_t>(e) << 10) | (man >> 13);
    std::uint32_t rem = man & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent: correct
    return static_cast<std::uint16_t>(sign | half);
}

float half_to_float(std::uint16_t bits) {
    std::uint32_t sign = (static_cast<std::uint32_t>(bits) & 0x8000u) << 16;
    std::uint32_t exp = (bits >> 10) & 0x1Fu;
    std::uint32_t man = bits & 0x3FFu;
    std::uint32_t f;
    if (exp == 0) {
        if (man == 0) {
            f = sign;
        } else {  // subnormal: normalize
            int e = -1;
            do {
                ++e;
                man <<= 1;
            } while (!(man & 0x400u));
            f = sign | (static_cast<std::uint32_t>(127 - 15 - e) << 23) | ((man & 0x3FFu) << 13);
        }
    } else if (exp == 0x1F) {
        f = sign | 0x7F800000u | (man << 13);
    } else {
        f = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float out;
    std::memcpy(&out, &f, sizeof out);
    return out;
}

std::uint16_t float_to_bfloat16(float value) {
    std::uint32_t f;
    std::memcpy(&f, &value, sizeof f);
    if (std::isnan(value)) return static_cast<std::uint16_t>((f >> 16) | 0x40u);
    std::uint32_t rounding = 0x7FFFu + ((f >> 16) & 1u);
    return static_cast<std::uint16_t>((f + rounding) >> 16);
}

float bfloat16_to_float(std::uint16_t bits) {
    std::uint32_t f = static_cast<std::uint32_t>(bits) << 16;
    float out;
    std::memcpy(&out, &f, sizeof out);
    return out;
}

}  // namespace vitdeploy
