#include "runtime/connector.h"

#include <fmt/ranges.h>

#include <map>
#include <mutex>

#include "base/error.h"
#include "runtime/shm_connector.h"

namespace omni::runtime {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, ConnectorFactory> factories;
};

// Built-in connectors are listed here rather than self-registered, because a static library
// drops object files nothing references.
Registry& registry() {
  static Registry* instance = [] {
    auto* r = new Registry;
    r->factories[std::string(kSharedMemoryConnectorName)] = [](const Json& extra, const ConnectorContext& context) {
      return std::make_unique<SharedMemoryConnector>(SharedMemoryConnector::Options::from_extra(extra, context));
    };
    return r;
  }();
  return *instance;
}

}  // namespace

void register_connector(const std::string& name, ConnectorFactory factory) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.factories[name] = std::move(factory);
}

std::unique_ptr<Connector> make_connector(const ConnectorSpec& spec, const ConnectorContext& context) {
  ConnectorFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.factories.find(spec.name);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    throw_error(ErrorCode::kInvalidConfig, "connector '{}' is not known; the known connectors are {}", spec.name,
                fmt::join(connector_names(), ", "));
  }
  return factory(spec.extra, context);
}

std::vector<std::string> connector_names() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

}  // namespace omni::runtime
