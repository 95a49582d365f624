// omni::Error — the one exception type of omnistage.
//
// Thrown for failures that abort the current operation (bad config, bad request, load
// failure) and caught at exactly one boundary: main (message + exit code), the HTTP handler
// (OpenAI error JSON with http_status), or a stage loop (an error for that request only).
// Expected conditions on hot paths (no free KV block, queue full) are return values, not
// errors. Messages name the thing at fault: the file and line, the field, the stage, the flag,
// the allowed values.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace omni {

enum class ErrorCode {
  kInvalidArgument,  // a bad value from a user: flag, request field, parameter
  kInvalidConfig,    // a deploy YAML, pipeline or merged configuration that cannot work
  kNotFound,         // a file, model, route or stage that does not exist
  kUnauthorized,     // missing or wrong API key
  kPayloadTooLarge,  // a request body over the limit
  kUnsupported,      // a valid request for a feature that does not exist (yet)
  kLoadFailed,       // a checkpoint or tokenizer that cannot be read
  kUnavailable,      // a stage or the server is not able to serve now
  kTimeout,          // an operation ran past its deadline
  kInternal,         // a bug or an unexpected system failure
};

// The HTTP status an error maps to in an OpenAI-shaped error response.
int http_status(ErrorCode code);
// The process exit code of `omnistage` when the error reaches main.
int exit_code(ErrorCode code);
// A stable lowercase name ("invalid_argument"…), used as the OpenAI error `type`.
std::string_view error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

  ErrorCode code() const { return code_; }
  int http_status() const { return omni::http_status(code_); }
  int exit_code() const { return omni::exit_code(code_); }

 private:
  ErrorCode code_;
};

// Formats and throws in one call: throw_error(ErrorCode::kInvalidConfig, "stage {}: …", id).
template <typename... Args>
[[noreturn]] void throw_error(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace omni
