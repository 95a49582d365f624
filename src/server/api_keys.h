// API-key authentication as vLLM's server applies it (--api-key, one or more keys; else the
// OMNISTAGE_API_KEY or VLLM_API_KEY environment variable): a request needs the header
// `Authorization: Bearer <key>` with one of the keys, except
//   - OPTIONS requests (CORS preflights carry no credentials), and
//   - the public endpoints /health, /ping, /load, /version and /metrics (and paths below them),
//   - the playground page, / and /playground (it asks for the key and sends it itself),
// and a path needs it when it is one of the server's routes or starts with /v1, /v2, /inference or
// /cohere. Keys are compared in time that does not depend on how much of a key matched.
//
// Threads: immutable after construction; any thread may call it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace omni::server {

class ApiKeys {
 public:
  // No keys: authentication is off and every request passes.
  explicit ApiKeys(std::vector<std::string> keys);

  bool enabled() const { return !keys_.empty(); }
  // Whether a request for `path` with `method` must present a key; `route` says whether the
  // server has a route at `path`.
  bool guards(std::string_view method, std::string_view path, bool route) const;
  // Whether `authorization` (the header's value) is "Bearer <key>" with one of the keys; the
  // scheme's case does not matter.
  bool accepts(std::string_view authorization) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace omni::server
