// libFuzzer target for the tokenizer (text/tokenizer) with the Qwen3 tokenizer.json: the first
// byte picks what the rest is.
//   even: text. encode() must reject invalid UTF-8 with an omni::Error; valid text gives ids
//         inside the vocabulary, and the incremental decoder fed those ids one at a time returns
//         exactly decode() of them.
//   odd:  token ids (little-endian int32, any value). decode() rejects ids outside the
//         vocabulary with an omni::Error; the incremental decoder agrees with decode() on valid ones.
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fuzz_guard.h"
#include "text/tokenizer/incremental_decoder.h"
#include "text/tokenizer/tokenizer.h"

namespace {

constexpr const char* kTarget = "tokenizer_fuzzer";

const omni::text::Tokenizer& tokenizer() {
  static const std::unique_ptr<omni::text::Tokenizer> instance = omni::text::Tokenizer::load(OMNI_QWEN3_TOKENIZER_DIR);
  return *instance;
}

void check_incremental(const std::vector<int32_t>& ids, bool skip_special) {
  const std::string whole = tokenizer().decode(ids, skip_special);
  omni::text::IncrementalDecoder decoder(tokenizer(), skip_special);
  std::string pieces;
  for (int32_t id : ids) pieces += decoder.push(id);
  pieces += decoder.finish();
  omni::fuzz::require(pieces == whole, kTarget, "the incremental decoder's text differs from decode()");
}

void run(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const uint8_t mode = data[0];
  const bool special = (mode & 2) != 0;
  if (mode % 2 == 0) {
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    const std::vector<int32_t> ids = tokenizer().encode(text, special);
    for (int32_t id : ids) omni::fuzz::require(id >= 0 && id < tokenizer().vocab_size(), kTarget, "id outside vocab");
    check_incremental(ids, special);
    return;
  }
  std::vector<int32_t> ids((size - 1) / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data + 1, ids.size() * 4);
  // Mostly ids inside the vocabulary, so that decoding gets past the range check.
  if (mode & 4) {
    for (int32_t& id : ids) id = static_cast<int32_t>(static_cast<uint32_t>(id) % (tokenizer().vocab_size() + 8));
  }
  check_incremental(ids, special);
}

}  // namespace

// The set-up (loading the tokenizer, starting a server) before the first input, outside its timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  omni::fuzz::expect_only_omni_errors(kTarget, [&] { run(data, size); });
  return 0;
}
