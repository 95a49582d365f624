#include "runtime/distributed_launch.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "base/error.h"

namespace omni::runtime {

namespace {

std::optional<std::string> difference_at(const std::string& path, const Json& head, const Json& worker) {
  if (head.is_object() && worker.is_object()) {
    for (const auto& [key, value] : head.items()) {
      const std::string at = path.empty() ? key : fmt::format("{}.{}", path, key);
      if (!worker.contains(key)) return fmt::format("{}: the head has {}, the worker has none", at, value.dump());
      if (auto d = difference_at(at, value, worker.at(key))) return d;
    }
    for (const auto& [key, value] : worker.items()) {
      if (!head.contains(key)) {
        return fmt::format("{}: the head has none, the worker has {}",
                           path.empty() ? key : fmt::format("{}.{}", path, key), value.dump());
      }
    }
    return std::nullopt;
  }
  if (head.is_array() && worker.is_array() && head.size() == worker.size()) {
    for (size_t i = 0; i < head.size(); ++i) {
      if (auto d = difference_at(fmt::format("{}[{}]", path, i), head[i], worker[i])) return d;
    }
    return std::nullopt;
  }
  if (head == worker) return std::nullopt;
  return fmt::format("{}: the head has {}, the worker {}", path, head.dump(), worker.dump());
}

}  // namespace

Json pipeline_fingerprint(const PipelineSpec& pipeline) {
  Json stages = Json::array();
  for (const StageSpec& stage : pipeline.stages) {
    Json json = to_json(stage);
    json.erase("devices");
    json.erase("num_replicas");
    json["engine_args"].erase("model");
    json["engine_args"].erase("tokenizer");
    stages.push_back(std::move(json));
  }
  return {{"stages", stages}};
}

std::optional<std::string> fingerprint_difference(const Json& head, const Json& worker) {
  return difference_at("", head, worker);
}

bool is_local_address(const std::string& address) {
  if (address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1") return true;
  ifaddrs* addresses = nullptr;
  if (getifaddrs(&addresses) != 0) return false;
  bool found = false;
  for (ifaddrs* a = addresses; a && !found; a = a->ifa_next) {
    if (!a->ifa_addr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, text, sizeof text);
    } else {
      continue;
    }
    found = address == text;
  }
  freeifaddrs(addresses);
  return found;
}

std::string routing_probe_address(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    throw_error(ErrorCode::kUnavailable, "--omni-master-address {}: cannot resolve it: {}", host, gai_strerror(rc));
  }
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  std::string address;
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t size = sizeof local;
    char text[INET_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof text)) {
      address = text;
    }
  }
  int err = errno;
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  if (address.empty()) {
    throw_error(ErrorCode::kUnavailable,
                "--omni-master-address {}: no route to it to find the address to advertise ({}); give "
                "--omni-replica-address",
                host, std::strerror(err));
  }
  return address;
}

}  // namespace omni::runtime
