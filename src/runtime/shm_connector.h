// SharedMemoryConnector: payloads in POSIX shared-memory segments (/dev/shm), for stages on one
// host. The producer creates a segment named after the payload's key, writes the bytes once and
// unmaps it; the consumer maps it read-only, unlinks the name at once (the mapping keeps the
// bytes alive, and nothing is left behind if the consumer dies later) and reads in place.
// Payloads of at most the inline threshold skip shared memory and ride in the control message.
//
// Segment names: /omnistage_<session>_<key>@<to_stage>, where the key is the spec's
// {request}_{from_stage}_{chunk} with characters outside [A-Za-z0-9._-] escaped as %XX.
//
// extra options: shm_threshold_bytes (integer ≥ 0; overrides --shm-threshold-bytes).
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "runtime/connector.h"

namespace omni::runtime {

inline constexpr std::string_view kSharedMemoryConnectorName = "SharedMemoryConnector";
// The `extra` options this connector reads; Options::from_extra refuses any other.
inline constexpr std::array<std::string_view, 1> kSharedMemoryConnectorOptions = {"shm_threshold_bytes"};
inline constexpr std::string_view kSegmentPrefix = "/omnistage_";

class SharedMemoryConnector : public Connector {
 public:
  struct Options {
    std::string session;
    uint64_t inline_threshold_bytes = 65536;
    bool retain_on_get = false;  // ConnectorContext::retain_on_get
    bool inline_always = false;  // ConnectorContext::inline_always
    // Throws omni::Error(kInvalidConfig) naming an unknown or mistyped option.
    static Options from_extra(const Json& extra, const ConnectorContext& context);
  };

  explicit SharedMemoryConnector(Options options);

  PayloadRef put(const PayloadAddress& address, std::span<const uint8_t> bytes) override;
  PayloadView get(const PayloadRef& ref) override;
  void discard(const PayloadRef& ref) override;
  size_t discard_session() override;

  // The segment name a payload at `address` gets (without writing anything).
  std::string segment_name(const PayloadAddress& address) const;

 private:
  Options options_;
};

// Removes every /dev/shm segment whose name starts with /omnistage_<session>_; returns how many.
size_t unlink_session_segments(const std::string& session);

}  // namespace omni::runtime
