// Host tensors exchanged with a backend, and the element types models use at their inputs/outputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vitdeploy {

enum class ElementType { Float32, Float16, BFloat16, Int64, Int32, Int8, UInt8, Bool, Unsupported };

/// NumPy's name for the type ("float32", "int64", ...), as in the engine sidecar's io section.
const char* element_type_name(ElementType type);

/// A dense, row-major float32 tensor on the host. Backends convert to and from the model's own
/// element types (float16, int64, ...), so application code only ever handles float32.
struct Tensor {
    std::vector<std::int64_t> shape;
    std::vector<float> data;

    Tensor() = default;
    Tensor(std::vector<std::int64_t> shape_, std::vector<float> data_) : shape(std::move(shape_)), data(std::move(data_)) {}
    std::size_t numel() const;
};

/// One model input or output as the backend sees it; -1 marks a dynamic dimension.
struct TensorInfo {
    std::string name;
    ElementType type = ElementType::Float32;
    std::vector<std::int64_t> shape;
};

/// "[1, 3, 1024, 1024]" (dynamic dimensions as -1).
std::string shape_string(const std::vector<std::int64_t>& shape);
/// Product of the dimensions; throws InputError for a negative dimension or an overflow.
std::size_t shape_volume(const std::vector<std::int64_t>& shape);
/// Whether ``shape`` fits ``pattern`` (same rank, equal wherever the pattern is not -1).
bool shape_matches(const std::vector<std::int64_t>& pattern, const std::vector<std::int64_t>& shape);

/// Bytes per element (0 for Unsupported).
std::size_t element_size(ElementType type);
/// float32 values -> ``n`` elements of ``type`` at ``dst`` (element_size(type) * n bytes); integers are
/// truncated toward zero, bool is value != 0. Throws BackendError for Unsupported.
void encode_elements(const float* src, std::size_t n, ElementType type, void* dst);
/// ``n`` elements of ``type`` at ``src`` -> float32 values.
void decode_elements(const void* src, std::size_t n, ElementType type, float* dst);

// IEEE 754 half and bfloat16 conversions (round to nearest even), for models with 16-bit I/O.
std::uint16_t float_to_half(float value);
float half_to_float(std::uint16_t bits);
std::uint16_t float_to_bfloat16(float value);
float bfloat16_to_float(std::uint16_t bits);

}  // namespace vitdeploy
