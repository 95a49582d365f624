#include "hub/sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "base/error.h"

namespace omni::hub {

namespace {

struct DigestContext {
  DigestContext() : context(EVP_MD_CTX_new()) {
    if (context == nullptr || EVP_DigestInit_ex(context, EVP_sha256(), nullptr) != 1) {
      throw_error(ErrorCode::kInternal, "sha256: OpenSSL could not start a digest");
    }
  }
  ~DigestContext() { EVP_MD_CTX_free(context); }
  DigestContext(const DigestContext&) = delete;
  DigestContext& operator=(const DigestContext&) = delete;

  void update(const void* data, size_t size) {
    if (EVP_DigestUpdate(context, data, size) != 1) throw_error(ErrorCode::kInternal, "sha256: digest update failed");
  }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    if (EVP_DigestFinal_ex(context, digest, &size) != 1) throw_error(ErrorCode::kInternal, "sha256: digest failed");
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < size; ++i) {
      out += kHex[digest[i] >> 4];
      out += kHex[digest[i] & 15];
    }
    return out;
  }

  EVP_MD_CTX* context;
};

}  // namespace

std::string sha256_hex(std::string_view data) {
  DigestContext digest;
  digest.update(data.data(), data.size());
  return digest.hex();
}

std::string sha256_file_hex(const std::filesystem::path& file) {
  std::unique_ptr<FILE, int (*)(FILE*)> in(std::fopen(file.c_str(), "rb"), &std::fclose);
  if (!in) throw_error(ErrorCode::kLoadFailed, "cannot read {} to check its sha256", file.string());
  DigestContext digest;
  std::vector<char> buffer(1 << 20);
  while (size_t n = std::fread(buffer.data(), 1, buffer.size(), in.get())) digest.update(buffer.data(), n);
  if (std::ferror(in.get())) throw_error(ErrorCode::kLoadFailed, "error reading {} to check its sha256", file.string());
  return digest.hex();
}

}  // namespace omni::hub
