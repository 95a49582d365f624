// Operations whose state lives in one API frontend process (the stages' sleep bookkeeping, runtime
// voice uploads): with several frontends (serve --api-server-count N > 1) one frontend would change
// what the others do not see, so they are refused with 409 Conflict; a frontend that does not know
// how many frontends there are (its topology is not initialised, api_server_count 0) refuses them
// with 503. Every other route is unaffected.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/http.h"

namespace omni::server {

// The operation's name ("Sleep", "Wakeup", "Runtime voice upload", "Runtime voice deletion") when
// `method` `path` changes process-local state, else nullopt.
std::optional<std::string> process_local_operation(std::string_view method, std::string_view path);

// The refusal of `method` `path` for a frontend among `api_server_count` (0: not known), or nullopt
// when the request may go on.
std::optional<HttpResponse> process_local_refusal(std::string_view method, std::string_view path, int api_server_count);

}  // namespace omni::server
