// libFuzzer target for the multipart/form-data parser of the upload routes (server/multipart_form):
// the input's first line is the request's Content-Type, the rest its body.
//
// What must hold: a malformed Content-Type or body is an omni::Error; every part's bytes lie in the
// body; and a form that parses, written again with the same boundary, parses to the same parts
// (whenever its names and bytes can be written again: no quote or line break in a name, no
// delimiter inside a part's bytes).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_guard.h"
#include "server/multipart_form.h"

namespace {

constexpr const char* kTarget = "multipart_form_fuzzer";

using omni::server::FormPart;

bool writable(std::string_view text) { return text.find_first_of("\"\\\r\n") == std::string_view::npos; }

std::optional<std::string> write_form(const std::vector<FormPart>& parts, const std::string& boundary) {
  const std::string delimiter = "--" + boundary;
  std::string body;
  for (const FormPart& part : parts) {
    if (!writable(part.name) || (part.filename && !writable(*part.filename)) || !writable(part.content_type) ||
        part.data.find("\r\n" + delimiter) != std::string::npos || part.data.find(delimiter) == 0) {
      return std::nullopt;
    }
    body += delimiter + "\r\nContent-Disposition: form-data; name=\"" + part.name + "\"";
    if (part.filename) body += "; filename=\"" + *part.filename + "\"";
    body += "\r\n";
    if (!part.content_type.empty()) body += "Content-Type: " + part.content_type + "\r\n";
    body += "\r\n" + part.data + "\r\n";
  }
  return body + delimiter + "--\r\n";
}

void run(std::string_view input) {
  const size_t eol = input.find('\n');
  const std::string_view content_type = input.substr(0, eol);
  const std::string_view body = eol == std::string_view::npos ? std::string_view{} : input.substr(eol + 1);
  const std::optional<std::string> boundary = omni::server::multipart_boundary(content_type);
  if (!boundary) return;
  const std::vector<FormPart> parts = omni::server::parse_multipart_form(body, *boundary);
  for (const FormPart& part : parts) {
    omni::fuzz::require(body.find(part.data) != std::string_view::npos, kTarget, "a part's bytes are not in the body");
  }
  // Boundaries with CR or LF cannot be written as a delimiter line that parses the same way.
  if (boundary->find_first_of("\r\n") != std::string::npos) return;
  const std::optional<std::string> again = write_form(parts, *boundary);
  if (!again) return;
  const std::vector<FormPart> reparsed = omni::server::parse_multipart_form(*again, *boundary);
  omni::fuzz::require(reparsed.size() == parts.size(), kTarget, "the form written again has another number of parts");
  for (size_t i = 0; i < parts.size(); ++i) {
    omni::fuzz::require(reparsed[i].name == parts[i].name && reparsed[i].filename == parts[i].filename &&
                            reparsed[i].content_type == parts[i].content_type && reparsed[i].data == parts[i].data,
                        kTarget, "the form written again parses to other parts");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  omni::fuzz::expect_only_omni_errors(kTarget,
                                      [&] { run(std::string_view(reinterpret_cast<const char*>(data), size)); });
  return 0;
}
