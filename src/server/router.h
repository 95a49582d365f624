// The routing table: (method, path) -> handler, and the one boundary where a handler's
// omni::Error becomes an OpenAI-shaped error response. Unknown paths answer 404, known paths
// with another method 405 with an Allow header.
//
// Threads: add() before the server starts; dispatch() from any I/O thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "server/http.h"

namespace omni::server {

class Router {
 public:
  void add(const std::string& method, const std::string& path, HttpHandler handler);
  // Whether some route (with any method) is at `path`.
  bool has_path(const std::string& path) const { return routes_.contains(path); }
  // Runs the route's handler. Errors it throws are answered (omni::Error with its status,
  // anything else 500) and never propagate.
  void dispatch(HttpRequest& request, const std::shared_ptr<Responder>& responder) const;
  // Every route as "METHOD /path", sorted by path, then method.
  std::vector<std::string> endpoints() const;

 private:
  std::map<std::string, std::map<std::string, HttpHandler>> routes_;  // path -> method -> handler
};

}  // namespace omni::server
