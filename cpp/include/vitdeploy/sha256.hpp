// SHA-256 (OpenSSL libcrypto), to check an engine plan against the digest in its sidecar.
#pragma once

#include <cstddef>
#include <string>

namespace vitdeploy {

/// Lower-case hex SHA-256 of ``size`` bytes at ``data``.
std::string sha256_hex(const void* data, std::size_t size);

}  // namespace vitdeploy
