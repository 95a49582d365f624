// Reads a Hugging Face tokenizer.json. The vocabulary and merges (almost all of the file: 11 MB
// for Qwen3) stream straight into their final containers; the rest becomes a small JSON tree.
// Building a full JSON tree first would take most of the tokenizer's load time.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "base/json.h"
#include "text/tokenizer/bpe_model.h"

namespace omni::text {

struct TokenizerJson {
  Json spec;         // everything except model.vocab and model.merges (which are null here)
  TokenIdMap vocab;  // model.vocab
  std::vector<std::pair<std::string, std::string>> merges;  // model.merges, either spelling
};

// Throws omni::Error: kNotFound when the file cannot be opened, kLoadFailed naming the file and
// byte offset of a syntax error, or the index of a malformed merge.
TokenizerJson read_tokenizer_json(const std::filesystem::path& file);

// Splits a merge written as "left right"; throws kLoadFailed naming `where` otherwise.
std::pair<std::string, std::string> split_merge(std::string_view merge, std::string_view where);

}  // namespace omni::text
