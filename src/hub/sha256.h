// SHA-256 of a file's contents (OpenSSL's libcrypto), to check a downloaded LFS blob against the
// etag the Hub gives it.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace omni::hub {

// Lowercase hexadecimal SHA-256 of `data`.
std::string sha256_hex(std::string_view data);

// Lowercase hexadecimal SHA-256 of the file's bytes. Throws omni::Error(kLoadFailed) naming the
// file when it cannot be read.
std::string sha256_file_hex(const std::filesystem::path& file);

}  // namespace omni::hub
