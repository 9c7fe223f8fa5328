// SHA-256 by OpenSSL's libcrypto (EVP_Digest), to check an engine plan against the digest in its sidecar.
#include "vitdeploy/sha256.hpp"

#include <openssl/evp.h>

#include "vitdeploy/error.hpp"

namespace vitdeploy {

std::string sha256_hex(const void* data, std::size_t size) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_Digest(data, size, digest, &length, EVP_sha256(), nullptr) != 1)
        throw Error("OpenSSL could not compute a SHA-256 digest (EVP_Digest failed)");
    static const char* hex = "0123456789abcdef";
    std::string out;
    out.reserve(2 * length);
    for (unsigned int i = 0; i < length; ++i) {
        out.push_back(hex[digest[i] >> 4]);
        out.push_back(hex[digest[i] & 0xF]);
    }
    return out;
}

}  // namespace vitdeploy
