// Bulk data that one stage hands to another (hidden states, speech codes, audio): the reference a
// control message carries, and the consumer's read-only view of the bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace omni::runtime {

// Where a payload travels: the spec's key {request}_{from_stage}_{chunk} plus the edge's target,
// because a producer with several consumers writes one payload per edge (each edge may use a
// different connector, and each consumer consumes its copy).
struct PayloadAddress {
  std::string request_id;
  int from_stage = 0;
  int to_stage = 0;
  int chunk = 0;

  std::string key() const { return request_id + "_" + std::to_string(from_stage) + "_" + std::to_string(chunk); }
};

// What a control message carries instead of the bytes (or with them, below the inline threshold).
struct PayloadRef {
  std::string connector;  // the registered connector name that wrote it and can read it
  PayloadAddress address;
  uint64_t size = 0;
  std::string location;  // connector-specific (a shared-memory segment name); empty when inline
  std::vector<uint8_t> inline_bytes;

  bool is_inline() const { return location.empty(); }
};

// Read-only bytes of a received payload, read in place (a mapped segment, or the control
// message's own buffer for inline payloads). The bytes stay valid while any copy of the view
// lives; views may be moved between threads but the bytes are never written.
class PayloadView {
 public:
  PayloadView() = default;
  PayloadView(const uint8_t* data, size_t size, std::shared_ptr<const void> owner)
      : data_(data), size_(size), owner_(std::move(owner)) {}

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> owner_;
};

}  // namespace omni::runtime
