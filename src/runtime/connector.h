// Connectors move bulk payloads along one edge of the stage graph (deploy YAML `connectors:`,
// spec's connector schema: `name:` picks an implementation from this registry, `extra:` is
// passed to it). The producer's stage worker put()s, the consumer's stage worker get()s, and the
// head discard()s payloads that will never be consumed (abort, error, a stage that is not on a
// request's route).
//
// Threads: a connector instance is used by one thread; instances are cheap and independent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "runtime/payload.h"
#include "runtime/stage_spec.h"

namespace omni::runtime {

// What every connector of one pipeline shares.
struct ConnectorContext {
  // Unique per head process; every name a connector creates outside the process starts with it,
  // so the head can find and remove leftovers of crashed stages at shutdown.
  std::string session;
  // --shm-threshold-bytes: payloads of at most this size travel inline in the control message,
  // unless the connector's extra.shm_threshold_bytes says otherwise.
  uint64_t inline_threshold_bytes = 65536;
  // A distributed launch (distributed_launch.h): a consumer keeps what it reads until the head
  // discards it, so that a request can be replayed on another replica of the consumer's stage.
  bool retain_on_get = false;
  // The producer runs on another host than the head: every payload travels inline in the control
  // message, whatever the connector's threshold, because its storage does not cross hosts.
  bool inline_always = false;
};

class Connector {
 public:
  virtual ~Connector() = default;

  // Stores `bytes` for `address` (written once) and returns the reference to send. Throws
  // omni::Error(kUnavailable) when the bytes cannot be stored (e.g. /dev/shm is full).
  virtual PayloadRef put(const PayloadAddress& address, std::span<const uint8_t> bytes) = 0;
  // The bytes of `ref`, read in place; consumes the payload (a second get() of the same ref
  // fails). Throws omni::Error(kNotFound) naming the key when the payload is gone.
  virtual PayloadView get(const PayloadRef& ref) = 0;
  // Frees a payload that will not be consumed. Idempotent; never throws.
  virtual void discard(const PayloadRef& ref) = 0;
  // Frees every payload of this session the connector's storage still holds (shutdown).
  // Returns how many it removed.
  virtual size_t discard_session() = 0;
};

using ConnectorFactory = std::function<std::unique_ptr<Connector>(const Json& extra, const ConnectorContext&)>;

// Adds an implementation under `name` (at static-initialisation time or before any make_connector).
void register_connector(const std::string& name, ConnectorFactory factory);
// Builds the connector `spec` names. Throws omni::Error(kInvalidConfig) naming the unknown name
// and the registered ones, or a bad `extra` option.
std::unique_ptr<Connector> make_connector(const ConnectorSpec& spec, const ConnectorContext& context);
std::vector<std::string> connector_names();

}  // namespace omni::runtime
