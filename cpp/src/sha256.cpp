// SHA-256 by OpenSSL's libcrypto (EVP_Digest), to check an engine plan against the digest in its sidecar.
#include "vitdeploy/sha256.hpp"

#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <vector>

#include "vitdeploy/error.hpp"

namespace vitdeploy {

namespace {

std::string to_hex(const unsigned char* digest, unsigned int length) {
    static const char* hex = "0123456789abcdef";
    std::string out;
    out.reserve(2 * length);
    for (unsigned int i = 0; i < length; ++i) {
        out.push_back(hex[digest[i] >> 4]);
        out.push_back(hex[digest[i] & 0xF]);
    }
    return out;
}

}  // namespace

std::string sha256_hex(const void* data, std::size_t size) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_Digest(data, size, digest, &length, EVP_sha256(), nullptr) != 1)
        throw Error("OpenSSL could not compute a SHA-256 digest (EVP_Digest failed)");
    return to_hex(digest, length);
}

std::string sha256_file_hex(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("cannot read '" + path + "' to hash it");
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
        throw Error("OpenSSL could not start a SHA-256 digest (EVP_DigestInit_ex failed)");
    std::vector<char> block(std::size_t{4} << 20);
    while (in) {
        in.read(block.data(), static_cast<std::streamsize>(block.size()));
        if (in.gcount() > 0 && EVP_DigestUpdate(ctx.get(), block.data(), static_cast<std::size_t>(in.gcount())) != 1)
            throw Error("OpenSSL could not compute a SHA-256 digest (EVP_DigestUpdate failed)");
    }
    if (in.bad()) throw InputError("reading '" + path + "' failed while hashing it");
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_DigestFinal_ex(ctx.get(), digest, &length) != 1)
        throw Error("OpenSSL could not finish a SHA-256 digest (EVP_DigestFinal_ex failed)");
    return to_hex(digest, length);
}

}  // namespace vitdeploy
