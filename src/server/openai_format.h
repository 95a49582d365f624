// Pieces of OpenAI response framing shared by the route families: JSON responses, SSE events,
// usage objects, timestamps.
#pragma once

#include <cstdint>
#include <string>

#include "base/json.h"
#include "server/http.h"

namespace omni::server {

inline constexpr const char* kSseContentType = "text/event-stream";
// The last event of every OpenAI stream.
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

HttpResponse json_response(const Json& body, int status = 200);
// One server-sent event carrying `payload`: "data: {...}\n\n".
std::string sse_event(const Json& payload);
// {"prompt_tokens", "completion_tokens", "total_tokens"}.
Json usage_json(int64_t prompt_tokens, int64_t completion_tokens);
int64_t unix_seconds();

}  // namespace omni::server
