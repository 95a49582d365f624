#include "server/router.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/openai_error.h"

namespace omni::server {

void Router::add(const std::string& method, const std::string& path, HttpHandler handler) {
  routes_[path][method] = std::move(handler);
}

void Router::add_websocket(const std::string& path, WebSocketRoute accept) {
  websocket_routes_[path] = std::move(accept);
  routes_[path];  // the path exists (other methods answer 405)
}

std::vector<std::string> Router::endpoints() const {
  std::vector<std::string> out;
  for (const auto& [path, methods] : routes_) {
    for (const auto& [method, handler] : methods) out.push_back(method + " " + path);
    if (websocket_routes_.contains(path)) out.push_back("WS " + path);
  }
  return out;
}

std::variant<WebSocketCallbacks, HttpResponse> Router::upgrade(HttpRequest& request,
                                                               std::shared_ptr<WebSocket> socket) const {
  auto route = websocket_routes_.find(request.path);
  if (route == websocket_routes_.end()) {
    return error_response(404, error_code_name(ErrorCode::kNotFound),
                          fmt::format("no WebSocket route at {}", request.path));
  }
  try {
    return route->second(request, std::move(socket));
  } catch (const Error& e) {
    return error_response(e);
  }
}

Router::Routes::const_iterator Router::find(const std::string& path) const {
  auto exact = routes_.find(path);
  if (exact != routes_.end()) return exact;
  // A route ending in "/{name}" takes any one non-empty last segment.
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash + 1 == path.size()) return routes_.end();
  return routes_.find(path.substr(0, slash) + "/" + std::string(kPathParameter));
}

void Router::dispatch(HttpRequest& request, const std::shared_ptr<Responder>& responder) const {
  auto path = find(request.path);
  if (path == routes_.end()) {
    responder->respond(error_response(404, error_code_name(ErrorCode::kNotFound),
                                      fmt::format("no route {} {}", request.method, request.path)));
    return;
  }
  auto route = path->second.find(request.method);
  if (route == path->second.end()) {
    std::string allowed;
    for (const auto& [method, handler] : path->second) allowed += (allowed.empty() ? "" : ", ") + method;
    HttpResponse response = error_response(
        405, "method_not_allowed",
        fmt::format("method {} is not allowed on {}; allowed: {}", request.method, request.path, allowed));
    response.headers.emplace_back("Allow", allowed);
    responder->respond(std::move(response));
    return;
  }
  try {
    route->second(request, responder);
  } catch (const Error& e) {
    if (e.http_status() >= 500) spdlog::error("http: {} {}: {}", request.method, request.path, e.what());
    responder->respond(error_response(e));
  } catch (const std::exception& e) {
    spdlog::error("http: {} {}: unexpected failure: {}", request.method, request.path, e.what());
    responder->respond(
        error_response(500, error_code_name(ErrorCode::kInternal), fmt::format("internal error: {}", e.what())));
  }
}

}  // namespace omni::server
