// Base64 (RFC 4648, standard alphabet, '=' padding), for binary data inside JSON: audio chunks in
// speech and chat responses.
#pragma once

#include <string>
#include <string_view>

namespace omni {

std::string base64_encode(std::string_view bytes);
// Throws omni::Error(kInvalidArgument) naming the position of the first character that is not
// base64, or a length that is not a multiple of 4.
std::string base64_decode(std::string_view text);

}  // namespace omni
