// What the `omnistage generate` tests share: the tiny reference checkpoint they run and the
// --prompt-token-ids argument format.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace omni::testing {

inline const std::filesystem::path kGenerateModel =
    std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen/qwen3_gqa2_tied_bf16_v5";

// "1,2,3": token ids as --prompt-token-ids takes them.
inline std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

}  // namespace omni::testing
