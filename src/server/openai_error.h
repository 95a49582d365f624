// OpenAI-shaped error responses: {"error": {"message", "type", "param", "code"}}.
//
// A route handler reports a bad request by throwing omni::Error; InvalidField is the omni::Error
// for a problem with one request field, which the response names in `param`. The router turns
// either into an HttpResponse with http_status(); nothing else throws past a handler.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"
#include "base/json.h"
#include "server/http.h"

namespace omni::server {

// A missing or invalid request field (kInvalidArgument, HTTP 400). `field` is the path of the
// field in the request body ("temperature", "messages[2].content").
class InvalidField : public Error {
 public:
  InvalidField(std::string field, const std::string& message)
      : Error(ErrorCode::kInvalidArgument, message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// The server is overloaded (kUnavailable, HTTP 503): the response tells the client when to retry
// (the Retry-After header, seconds).
class RetryLater : public Error {
 public:
  RetryLater(int retry_after_seconds, const std::string& message)
      : Error(ErrorCode::kUnavailable, message), retry_after_seconds_(retry_after_seconds) {}
  int retry_after_seconds() const { return retry_after_seconds_; }

 private:
  int retry_after_seconds_;
};

template <typename... Args>
[[noreturn]] void throw_invalid_field(std::string field, fmt::format_string<Args...> format, Args&&... args) {
  throw InvalidField(std::move(field), fmt::format(format, std::forward<Args>(args)...));
}

// The error object (without the HTTP framing), e.g. for an SSE `data:` line mid-stream.
Json error_json(int status, std::string_view type, std::string_view message,
                const std::optional<std::string>& param = std::nullopt);
Json error_json(const Error& error);

HttpResponse error_response(int status, std::string_view type, std::string_view message,
                            const std::optional<std::string>& param = std::nullopt);
// Status from error.http_status(), type from error_code_name(), param from InvalidField, a
// Retry-After header from RetryLater.
HttpResponse error_response(const Error& error);
// The same for a failure carried to another thread: an omni::Error (InvalidField keeps its param)
// as above, anything else 500.
HttpResponse error_response(std::exception_ptr error);
// For failures the transport finds (413, 431, 400 unparsable): the type follows the status.
HttpResponse transport_error_response(int status, const std::string& message);

}  // namespace omni::server
