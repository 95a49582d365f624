#include "server/openai_error.h"

#include "base/json_dump.h"

namespace omni::server {
namespace {

// A message may quote what the client sent, and nlohmann's parse errors quote the bytes they
// stopped at: invalid UTF-8 there is written as U+FFFD instead of failing the error response.
std::string dump(const Json& json) { return dump_for_message(json); }

}  // namespace

Json error_json(int status, std::string_view type, std::string_view message, const std::optional<std::string>& param) {
  Json error = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}};
  if (param) error["param"] = *param;
  return {{"error", std::move(error)}};
}

Json error_json(const Error& error) {
  std::optional<std::string> param;
  if (const auto* field = dynamic_cast<const InvalidField*>(&error)) param = field->field();
  return error_json(error.http_status(), error_code_name(error.code()), error.what(), param);
}

HttpResponse error_response(int status, std::string_view type, std::string_view message,
                            const std::optional<std::string>& param) {
  HttpResponse response;
  response.status = status;
  response.body = dump(error_json(status, type, message, param));
  return response;
}

HttpResponse error_response(const Error& error) {
  HttpResponse response;
  response.status = error.http_status();
  response.body = dump(error_json(error));
  if (const auto* retry = dynamic_cast<const RetryLater*>(&error)) {
    response.headers.emplace_back("Retry-After", std::to_string(retry->retry_after_seconds()));
  }
  return response;
}

HttpResponse error_response(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return error_response(e);
  } catch (const std::exception& e) {
    return error_response(Error(ErrorCode::kInternal, fmt::format("internal error: {}", e.what())));
  }
}

HttpResponse transport_error_response(int status, const std::string& message) {
  std::string_view type = "internal_error";
  switch (status) {
    case 400:
    case 431:
      type = error_code_name(ErrorCode::kInvalidArgument);
      break;
    case 413:
      type = error_code_name(ErrorCode::kPayloadTooLarge);
      break;
    case 503:
      type = error_code_name(ErrorCode::kUnavailable);
      break;
    default:
      break;
  }
  return error_response(status, type, message);
}

}  // namespace omni::server
