// Cross-origin resource sharing, as vLLM's server answers it (--allowed-origins, --allowed-methods,
// --allowed-headers, --allow-credentials): a browser's preflight (OPTIONS with Origin and
// Access-Control-Request-Method) is answered here, 200 or 400 naming what is disallowed, and every
// other response to a request with an Origin header carries the Access-Control-* headers the
// policy grants. Requests without an Origin header are not cross-origin and are left alone.
//
// Threads: immutable after construction; any thread may call it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/http.h"

namespace omni::server {

struct CorsOptions {
  // "*" in a list allows every origin, method or header (the defaults, as in vLLM).
  std::vector<std::string> allowed_origins = {"*"};
  std::vector<std::string> allowed_methods = {"*"};
  std::vector<std::string> allowed_headers = {"*"};
  bool allow_credentials = false;
};

class CorsPolicy {
 public:
  explicit CorsPolicy(CorsOptions options);

  // The answer to a preflight request; nullopt when `request` is not one.
  std::optional<HttpResponse> preflight(const HttpRequest& request) const;
  // The headers the response to `request` gets: none without Origin or for an origin not allowed.
  HttpHeaders response_headers(const HttpRequest& request) const;

 private:
  bool origin_allowed(const std::string& origin) const;

  std::vector<std::string> origins_;
  std::vector<std::string> methods_;
  std::vector<std::string> headers_;  // lower case, with the CORS-safelisted ones
  bool all_origins_ = false;
  bool all_headers_ = false;
  bool credentials_ = false;
};

// A Responder that adds `headers` to the response (whole or streamed) it forwards to `inner`.
std::shared_ptr<Responder> with_headers(std::shared_ptr<Responder> inner, HttpHeaders headers);

}  // namespace omni::server
