// SHA-256 (OpenSSL libcrypto): an engine plan against the digest in its sidecar, a model against its deployment profile.
#pragma once

#include <cstddef>
#include <string>

namespace vitdeploy {

/// Lower-case hex SHA-256 of ``size`` bytes at ``data``.
std::string sha256_hex(const void* data, std::size_t size);

/// Lower-case hex SHA-256 of the file at ``path``, read in 4 MiB blocks (a model of gigabytes is never held in
/// memory at once); throws InputError when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace vitdeploy
