// The routing table: (method, path) -> handler, and the one boundary where a handler's
// omni::Error becomes an OpenAI-shaped error response. Unknown paths answer 404, known paths
// with another method 405 with an Allow header.
//
// Threads: add() before the server starts; dispatch() from any I/O thread.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "server/http.h"

namespace omni::server {

class Router {
 public:
  // A path whose last segment is kPathParameter ("/v1/audio/voices/{name}") matches any one
  // non-empty last segment; the handler reads it from the request's path.
  static constexpr std::string_view kPathParameter = "{name}";

  void add(const std::string& method, const std::string& path, HttpHandler handler);
  // A WebSocket route: `accept` gives the accepted connection's callbacks, or throws omni::Error to
  // refuse the upgrade with that error's response.
  using WebSocketRoute = std::function<WebSocketCallbacks(HttpRequest& request, std::shared_ptr<WebSocket> socket)>;
  void add_websocket(const std::string& path, WebSocketRoute accept);
  // Decides an upgrade request (HttpServer's WebSocketHandler): the route's callbacks, 404 for a
  // path without a WebSocket route, or the refusal of its error.
  std::variant<WebSocketCallbacks, HttpResponse> upgrade(HttpRequest& request, std::shared_ptr<WebSocket> socket) const;
  // Whether some route (with any method) is at `path`.
  bool has_path(const std::string& path) const { return find(path) != routes_.end(); }
  // Runs the route's handler. Errors it throws are answered (omni::Error with its status,
  // anything else 500) and never propagate.
  void dispatch(HttpRequest& request, const std::shared_ptr<Responder>& responder) const;
  // Every route as "METHOD /path", sorted by path, then method (WebSocket routes as "WS /path").
  std::vector<std::string> endpoints() const;

 private:
  using Routes = std::map<std::string, std::map<std::string, HttpHandler>>;  // path -> method -> handler
  Routes::const_iterator find(const std::string& path) const;

  Routes routes_;
  std::map<std::string, WebSocketRoute> websocket_routes_;
};

}  // namespace omni::server
