#include "server/openai_error.h"

namespace omni::server {

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
  response.body = error_json(status, type, message, param).dump();
  return response;
}

HttpResponse error_response(const Error& error) {
  HttpResponse response;
  response.status = error.http_status();
  response.body = error_json(error).dump();
  return response;
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
