#include "server/multipart_form.h"

#include <algorithm>

#include "base/error.h"

namespace omni::server {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The value of `key` in a header's parameters (`; key="value"` or `; key=value`), read in order: a
// quoted value runs to its closing quote (\" and \\ stand for " and \, as python-multipart reads
// them; any other backslash is kept, as in a Windows path), so a ';' or '=' inside quotes never
// starts another parameter.
std::optional<std::string> parameter(std::string_view header, std::string_view key) {
  size_t pos = header.find(';');
  while (pos != std::string_view::npos) {
    ++pos;  // past the ';'
    const size_t eq = header.find_first_of("=;", pos);
    if (eq == std::string_view::npos) return std::nullopt;
    if (header[eq] == ';') {  // a parameter without a value
      pos = eq;
      continue;
    }
    const bool wanted = lower(trim(header.substr(pos, eq - pos))) == key;
    size_t at = eq + 1;
    while (at < header.size() && (header[at] == ' ' || header[at] == '\t')) ++at;
    std::string value;
    if (at < header.size() && header[at] == '"') {
      for (++at; at < header.size() && header[at] != '"'; ++at) {
        if (header[at] == '\\' && at + 1 < header.size() && (header[at + 1] == '"' || header[at + 1] == '\\')) ++at;
        value += header[at];
      }
      pos = header.find(';', at);
    } else {
      pos = header.find(';', at);
      value = std::string(trim(header.substr(at, pos == std::string_view::npos ? std::string_view::npos : pos - at)));
    }
    if (wanted) return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> multipart_boundary(std::string_view content_type) {
  if (!lower(trim(content_type.substr(0, content_type.find(';')))).starts_with("multipart/form-data")) {
    return std::nullopt;
  }
  std::optional<std::string> boundary = parameter(content_type, "boundary");
  if (!boundary || boundary->empty()) {
    throw_error(ErrorCode::kInvalidArgument, "the multipart/form-data Content-Type has no boundary");
  }
  return boundary;
}

std::vector<FormPart> parse_multipart_form(std::string_view body, std::string_view boundary) {
  const std::string delimiter = "--" + std::string(boundary);
  std::vector<FormPart> parts;
  size_t pos = body.find(delimiter);
  if (pos == std::string_view::npos) {
    throw_error(ErrorCode::kInvalidArgument, "the multipart body does not contain its boundary");
  }
  for (;;) {
    pos += delimiter.size();
    if (body.substr(pos, 2) == "--") return parts;  // the closing delimiter
    if (body.substr(pos, 2) != "\r\n") throw_error(ErrorCode::kInvalidArgument, "malformed multipart delimiter line");
    pos += 2;
    const size_t headers_end = body.find("\r\n\r\n", pos);
    if (headers_end == std::string_view::npos) {
      throw_error(ErrorCode::kInvalidArgument, "a multipart part has no end of its headers");
    }
    FormPart part;
    bool named = false;
    std::string_view headers = body.substr(pos, headers_end - pos);
    while (!headers.empty()) {
      const size_t eol = headers.find("\r\n");
      std::string_view line = headers.substr(0, eol);
      headers = eol == std::string_view::npos ? std::string_view{} : headers.substr(eol + 2);
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string key = lower(trim(line.substr(0, colon)));
      std::string_view value = trim(line.substr(colon + 1));
      if (key == "content-disposition") {
        if (auto name = parameter(value, "name")) {
          part.name = *name;
          named = true;
        }
        part.filename = parameter(value, "filename");
      } else if (key == "content-type") {
        part.content_type = std::string(value);
      }
    }
    if (!named) throw_error(ErrorCode::kInvalidArgument, "a multipart part has no Content-Disposition name");
    const size_t data_start = headers_end + 4;
    const size_t next = body.find("\r\n" + delimiter, data_start);
    if (next == std::string_view::npos) {
      throw_error(ErrorCode::kInvalidArgument, "the multipart body ends without its closing boundary");
    }
    part.data = std::string(body.substr(data_start, next - data_start));
    parts.push_back(std::move(part));
    pos = next + 2;
  }
}

}  // namespace omni::server
