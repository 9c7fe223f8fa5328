// NumPy .npy files: reading any of the dtypes below (the golden outputs the Python side writes, model_bench's
// --input) and writing float32 (model_bench's --output). Throws std::runtime_error naming the problem.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace npy {

struct Array {
    std::string descr;               // '<f4', '|u1', '|b1', '<f8', '<i8'
    std::vector<std::int64_t> shape;
    std::vector<double> values;      // every element, as double
    std::size_t size() const { return values.size(); }
};

inline Array load(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0) throw std::runtime_error(path + " is not a .npy file");
    unsigned major = static_cast<unsigned char>(data[6]);
    std::size_t header_len, offset;
    if (major == 1) {
        header_len = static_cast<unsigned char>(data[8]) | (static_cast<unsigned char>(data[9]) << 8);
        offset = 10;
    } else {
        header_len = 0;
        for (int i = 0; i < 4; ++i) header_len |= std::size_t(static_cast<unsigned char>(data[8 + i])) << (8 * i);
        offset = 12;
    }
    std::string header = data.substr(offset, header_len);
    auto field = [&](const std::string& key) {
        auto p = header.find("'" + key + "'");
        if (p == std::string::npos) throw std::runtime_error(path + ": no " + key);
        return header.substr(header.find(':', p) + 1);
    };
    Array a;
    std::string d = field("descr");
    auto q1 = d.find('\''), q2 = d.find('\'', q1 + 1);
    a.descr = d.substr(q1 + 1, q2 - q1 - 1);
    if (field("fortran_order").find("True") < field("fortran_order").find(',')) throw std::runtime_error(path + ": Fortran order");
    std::string s = field("shape");
    s = s.substr(s.find('(') + 1, s.find(')') - s.find('(') - 1);
    std::stringstream ss(s);
    std::string dim;
    while (std::getline(ss, dim, ','))
        if (dim.find_first_of("0123456789") != std::string::npos) a.shape.push_back(std::stoll(dim));
    std::size_t n = 1;
    for (auto v : a.shape) n *= static_cast<std::size_t>(v);
    const char* p = data.data() + offset + header_len;
    std::size_t avail = data.size() - offset - header_len;
    auto need = [&](std::size_t bytes) {
        if (avail < bytes * n) throw std::runtime_error(path + ": truncated data");
    };
    a.values.resize(n);
    if (a.descr == "<f4") {
        need(4);
        for (std::size_t i = 0; i < n; ++i) { float v; std::memcpy(&v, p + 4 * i, 4); a.values[i] = v; }
    } else if (a.descr == "<f8") {
        need(8);
        for (std::size_t i = 0; i < n; ++i) { double v; std::memcpy(&v, p + 8 * i, 8); a.values[i] = v; }
    } else if (a.descr == "<i8") {
        need(8);
        for (std::size_t i = 0; i < n; ++i) { std::int64_t v; std::memcpy(&v, p + 8 * i, 8); a.values[i] = static_cast<double>(v); }
    } else if (a.descr == "|u1" || a.descr == "|b1") {
        need(1);
        for (std::size_t i = 0; i < n; ++i) a.values[i] = static_cast<unsigned char>(p[i]);
    } else {
        throw std::runtime_error(path + ": unsupported dtype " + a.descr);
    }
    return a;
}

/// Write ``values`` (C order, of ``shape``) as a float32 .npy (format 1.0).
inline void save_f32(const std::string& path, const std::vector<std::int64_t>& shape, const std::vector<float>& values) {
    std::string dims;
    for (auto d : shape) dims += std::to_string(d) + ", ";
    if (shape.size() > 1) dims.erase(dims.size() - 2);  // (n, ) for one axis, (a, b) for more
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
    header.append(64 - (10 + header.size() + 1) % 64, ' ');  // magic + version + length + header: a multiple of 64
    header += '\n';
    std::ofstream out(path, std::ios::binary);
    if (!out) throw std::runtime_error("cannot write " + path);
    const auto len = static_cast<std::uint16_t>(header.size());
    out.write("\x93NUMPY\x01\x00", 8);
    out.put(static_cast<char>(len & 0xff)).put(static_cast<char>(len >> 8));
    out << header;
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(4 * values.size()));
    if (!out) throw std::runtime_error("writing " + path + " failed (disk full?)");
}

}  // namespace npy
