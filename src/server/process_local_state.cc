#include "server/process_local_state.h"

#include <fmt/format.h>

#include "server/openai_error.h"

namespace omni::server {

std::optional<std::string> process_local_operation(std::string_view method, std::string_view path) {
  constexpr std::string_view kVoices = "/v1/audio/voices";
  if (method == "POST" && path == "/v1/omni/sleep") return "Sleep";
  if (method == "POST" && path == "/v1/omni/wakeup") return "Wakeup";
  if (method == "POST" && path == kVoices) return "Runtime voice upload";
  if (method == "DELETE" && path.size() > kVoices.size() + 1 && path.starts_with(kVoices) &&
      path[kVoices.size()] == '/') {
    return "Runtime voice deletion";
  }
  return std::nullopt;
}

std::optional<HttpResponse> process_local_refusal(std::string_view method, std::string_view path,
                                                  int api_server_count) {
  std::optional<std::string> operation = process_local_operation(method, path);
  if (!operation || api_server_count == 1) return std::nullopt;
  if (api_server_count < 1) return error_response(503, "unavailable", "API worker topology is not initialized.");
  return error_response(409, "conflict",
                        fmt::format("{} is not supported with --api-server-count > 1 because the operation uses "
                                    "process-local frontend state",
                                    *operation));
}

}  // namespace omni::server
