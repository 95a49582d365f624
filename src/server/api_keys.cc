#include "server/api_keys.h"

#include <array>
#include <cctype>

namespace omni::server {
namespace {

// The playground page (/ and /playground) is open too: it is a static client that asks for the key
// and sends it with every API request it makes.
constexpr std::array<std::string_view, 6> kPublicEndpoints = {"/health",  "/ping",   "/load",
                                                              "/version", "/metrics", "/playground"};
constexpr std::array<std::string_view, 4> kGuardedPrefixes = {"/v1", "/v2", "/inference", "/cohere"};

// `path` is `endpoint` or below it, on a segment boundary (/healthz is not /health).
bool under(std::string_view path, std::string_view endpoint) {
  return path == endpoint ||
         (path.starts_with(endpoint) && path.size() > endpoint.size() && path[endpoint.size()] == '/');
}

// Compares without an early exit: the time taken depends on the lengths only, not on how much of
// the key matched.
bool same_key(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  }
  return diff == 0;
}

}  // namespace

ApiKeys::ApiKeys(std::vector<std::string> keys) {
  for (std::string& key : keys) {
    if (!key.empty()) keys_.push_back(std::move(key));
  }
}

bool ApiKeys::guards(std::string_view method, std::string_view path, bool route) const {
  if (!enabled() || method == "OPTIONS" || path == "/") return false;
  for (std::string_view endpoint : kPublicEndpoints) {
    if (under(path, endpoint)) return false;
  }
  if (route) return true;
  for (std::string_view prefix : kGuardedPrefixes) {
    if (path.starts_with(prefix)) return true;
  }
  return false;
}

bool ApiKeys::accepts(std::string_view authorization) const {
  const size_t space = authorization.find(' ');
  if (space == std::string_view::npos) return false;
  std::string scheme(authorization.substr(0, space));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "bearer") return false;
  const std::string_view token = authorization.substr(space + 1);
  bool match = false;
  for (const std::string& key : keys_) match |= same_key(token, key);  // every key, no early exit
  return match;
}

}  // namespace omni::server
