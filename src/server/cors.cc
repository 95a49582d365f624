#include "server/cors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <string_view>

namespace omni::server {
namespace {

// What "*" allows as methods, and the request headers a browser may always send.
const std::vector<std::string> kAllMethods = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"};
const std::vector<std::string> kSafelistedHeaders = {"accept", "accept-language", "content-language", "content-type"};
constexpr int kMaxAgeSeconds = 600;

bool contains(const std::vector<std::string>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return std::string(text);
}

class HeaderAddingResponder : public Responder {
 public:
  HeaderAddingResponder(std::shared_ptr<Responder> inner, HttpHeaders headers)
      : inner_(std::move(inner)), headers_(std::move(headers)) {}

  void respond(HttpResponse response) override {
    response.headers.insert(response.headers.end(), headers_.begin(), headers_.end());
    inner_->respond(std::move(response));
  }
  void start_stream(int status, std::string content_type, HttpHeaders headers) override {
    headers.insert(headers.end(), headers_.begin(), headers_.end());
    inner_->start_stream(status, std::move(content_type), std::move(headers));
  }
  void write(std::string data) override { inner_->write(std::move(data)); }
  void end_stream() override { inner_->end_stream(); }
  void run(std::function<void()> task) override { inner_->run(std::move(task)); }
  void on_disconnect(std::function<void()> callback) override { inner_->on_disconnect(std::move(callback)); }

 private:
  std::shared_ptr<Responder> inner_;
  HttpHeaders headers_;
};

}  // namespace

CorsPolicy::CorsPolicy(CorsOptions options)
    : origins_(std::move(options.allowed_origins)),
      all_origins_(contains(origins_, "*")),
      all_headers_(contains(options.allowed_headers, "*")),
      credentials_(options.allow_credentials) {
  methods_ = contains(options.allowed_methods, "*") ? kAllMethods : options.allowed_methods;
  headers_ = kSafelistedHeaders;
  for (const std::string& header : options.allowed_headers) {
    if (header != "*" && !contains(headers_, lower(header))) headers_.push_back(lower(header));
  }
  std::sort(headers_.begin(), headers_.end());
}

bool CorsPolicy::origin_allowed(const std::string& origin) const { return all_origins_ || contains(origins_, origin); }

std::optional<HttpResponse> CorsPolicy::preflight(const HttpRequest& request) const {
  const std::string origin(request.header("origin"));
  const std::string method(request.header("access-control-request-method"));
  if (request.method != "OPTIONS" || origin.empty() || method.empty()) return std::nullopt;

  HttpResponse response;
  response.content_type = "text/plain; charset=utf-8";
  std::vector<std::string> failures;
  // A wildcard answer cannot go with credentials: the origin is then named, and responses vary by it.
  if (!all_origins_ || credentials_) {
    response.headers.emplace_back("Vary", "Origin");
    if (origin_allowed(origin)) response.headers.emplace_back("Access-Control-Allow-Origin", origin);
  } else {
    response.headers.emplace_back("Access-Control-Allow-Origin", "*");
  }
  if (!origin_allowed(origin)) failures.push_back("origin");
  response.headers.emplace_back("Access-Control-Allow-Methods", fmt::format("{}", fmt::join(methods_, ", ")));
  response.headers.emplace_back("Access-Control-Max-Age", std::to_string(kMaxAgeSeconds));
  if (!contains(methods_, method)) failures.push_back("method");

  const std::string_view requested = request.header("access-control-request-headers");
  if (all_headers_) {
    if (!requested.empty()) response.headers.emplace_back("Access-Control-Allow-Headers", std::string(requested));
  } else {
    response.headers.emplace_back("Access-Control-Allow-Headers", fmt::format("{}", fmt::join(headers_, ", ")));
    size_t start = 0;
    while (start <= requested.size() && !requested.empty()) {
      size_t comma = requested.find(',', start);
      std::string header = lower(trimmed(requested.substr(start, comma - start)));
      if (!header.empty() && !contains(headers_, header)) {
        failures.push_back("headers");
        break;
      }
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  if (credentials_) response.headers.emplace_back("Access-Control-Allow-Credentials", "true");

  if (failures.empty()) {
    response.body = "OK";
  } else {
    response.status = 400;
    response.body = fmt::format("Disallowed CORS {}", fmt::join(failures, ", "));
  }
  return response;
}

HttpHeaders CorsPolicy::response_headers(const HttpRequest& request) const {
  const std::string origin(request.header("origin"));
  HttpHeaders headers;
  if (origin.empty()) return headers;
  // A browser refuses "*" for a request with cookies: the origin is named then.
  if (all_origins_ && request.header("cookie").empty()) {
    headers.emplace_back("Access-Control-Allow-Origin", "*");
  } else if (origin_allowed(origin)) {
    headers.emplace_back("Access-Control-Allow-Origin", origin);
    headers.emplace_back("Vary", "Origin");
  } else {
    return headers;
  }
  if (credentials_) headers.emplace_back("Access-Control-Allow-Credentials", "true");
  return headers;
}

std::shared_ptr<Responder> with_headers(std::shared_ptr<Responder> inner, HttpHeaders headers) {
  if (headers.empty()) return inner;
  return std::make_shared<HeaderAddingResponder>(std::move(inner), std::move(headers));
}

}  // namespace omni::server
