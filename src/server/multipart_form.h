// multipart/form-data request bodies (RFC 7578), as OpenAI-style upload routes take them
// (POST /v1/audio/voices): the parts with their field name, file name and bytes.
//
// Errors: omni::Error(kInvalidArgument) saying what is malformed (no boundary in the Content-Type,
// a part without a Content-Disposition name, a missing closing delimiter). Pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace omni::server {

struct FormPart {
  std::string name;
  std::optional<std::string> filename;  // present for file parts
  std::string content_type;             // "" when the part has none
  std::string data;
};

// The boundary of a "multipart/form-data; boundary=…" Content-Type, or nullopt when `content_type`
// is not multipart/form-data.
std::optional<std::string> multipart_boundary(std::string_view content_type);

std::vector<FormPart> parse_multipart_form(std::string_view body, std::string_view boundary);

}  // namespace omni::server
