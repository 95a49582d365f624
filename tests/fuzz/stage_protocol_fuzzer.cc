// libFuzzer target for the stage protocol (runtime/stage_protocol): the input is one message as
// the head or a stage receives it from its socket. What must hold: bytes that are not a message
// of this protocol are an omni::Error naming the peer; a message that decodes re-encodes to bytes
// that decode to the same message (encoding is stable after one round).
#include <cstdint>
#include <string>

#include "fuzz_guard.h"
#include "runtime/stage_protocol.h"

namespace {

void run(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const omni::runtime::StageMessage message = omni::runtime::decode_message(bytes, "fuzz peer");
  (void)omni::runtime::message_type_name(message);
  const std::string once = omni::runtime::encode_message(message);
  const std::string twice = omni::runtime::encode_message(omni::runtime::decode_message(once, "fuzz peer"));
  omni::fuzz::require(once == twice, "stage_protocol_fuzzer", "a decoded message does not re-encode stably");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  omni::fuzz::expect_only_omni_errors("stage_protocol_fuzzer", [&] { run(data, size); });
  return 0;
}
