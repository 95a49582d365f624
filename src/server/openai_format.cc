#include "server/openai_format.h"

#include <chrono>

namespace omni::server {

HttpResponse json_response(const Json& body, int status) {
  HttpResponse response;
  response.status = status;
  // Invalid UTF-8 from a partial multi-byte token must not turn a reply into an exception.
  response.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return response;
}

std::string sse_event(const Json& payload) {
  std::string out = "data: ";
  out += payload.dump(-1, ' ', false, Json::error_handler_t::replace);
  out += "\n\n";
  return out;
}

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace omni::server
