#include "base/error.h"

namespace omni {

int http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kInvalidConfig:
      return 400;
    case ErrorCode::kUnauthorized:
      return 401;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kPayloadTooLarge:
      return 413;
    case ErrorCode::kUnsupported:
      return 501;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kTimeout:
      return 504;
    case ErrorCode::kLoadFailed:
    case ErrorCode::kInternal:
      return 500;
  }
  return 500;
}

// Exit codes follow sysexits.h where one fits, so scripts can tell a usage error from a crash.
int exit_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return 64;  // EX_USAGE
    case ErrorCode::kInvalidConfig:
      return 78;  // EX_CONFIG
    case ErrorCode::kNotFound:
      return 66;  // EX_NOINPUT
    case ErrorCode::kUnauthorized:
      return 77;  // EX_NOPERM
    case ErrorCode::kPayloadTooLarge:
      return 65;  // EX_DATAERR
    case ErrorCode::kUnsupported:
      return 69;  // EX_UNAVAILABLE
    case ErrorCode::kLoadFailed:
      return 65;  // EX_DATAERR
    case ErrorCode::kUnavailable:
      return 69;  // EX_UNAVAILABLE
    case ErrorCode::kTimeout:
      return 75;  // EX_TEMPFAIL
    case ErrorCode::kInternal:
      return 70;  // EX_SOFTWARE
  }
  return 70;
}

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kInvalidConfig:
      return "invalid_config";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kUnauthorized:
      return "unauthorized";
    case ErrorCode::kPayloadTooLarge:
      return "payload_too_large";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kLoadFailed:
      return "load_failed";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kInternal:
      return "internal_error";
  }
  return "internal_error";
}

}  // namespace omni
