// Text <-> token ids for the models we serve: Hugging Face byte-level BPE tokenizers, read
// from a tokenizer.json or from the vocab.json + merges.txt + tokenizer_config.json layout
// (Qwen2Tokenizer, which Qwen3-TTS repositories ship). Encoding gives the ids Hugging Face
// tokenizers gives: added tokens first, then normalization, pre-tokenization and BPE.
//
// Thread-safety: a loaded Tokenizer is immutable (apart from an internal, locked word cache);
// every const method may be called from many threads at once.
// Errors: loading throws omni::Error — kNotFound when no tokenizer files exist, kLoadFailed
// naming the file and what is wrong, including a component this implementation does not run.
// encode() throws kInvalidArgument for text that is not valid UTF-8.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer/added_vocabulary.h"
#include "text/tokenizer/bpe_model.h"
#include "text/tokenizer/normalizer.h"
#include "text/tokenizer/pre_tokenizer.h"

namespace omni::text {

class Tokenizer {
 public:
  // Loads the tokenizer of a model directory: tokenizer.json when present, else vocab.json +
  // merges.txt (+ tokenizer_config.json for the added tokens). `path` may also name a
  // tokenizer.json file directly.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& path);
  static std::unique_ptr<Tokenizer> from_tokenizer_json(const std::filesystem::path& file);
  // `config` may be empty or name a missing file: then there are no added tokens.
  static std::unique_ptr<Tokenizer> from_vocab_merges(const std::filesystem::path& vocab_file,
                                                      const std::filesystem::path& merges_file,
                                                      const std::filesystem::path& config_file);

  // The ids of `text` (valid UTF-8). With add_special_tokens, the post-processor's tokens
  // (a BOS, for the models that want one) are added; Qwen models add none.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;

  // The text of `ids`; bytes that do not form UTF-8 become U+FFFD. Ids that name no token are
  // skipped (as Hugging Face does), and special added tokens too when skip_special_tokens.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // One past the largest token id (the model's embedding table may have more rows).
  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }
  // The id of a token as the vocabulary spells it (byte-level form, e.g. "Ġthe"), or of an
  // added token's content.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // The raw bytes a token stands for; empty for an id that names no token.
  std::string_view token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }

 private:
  Tokenizer(BpeModel model, std::vector<AddedToken> added, bool split_special_tokens, Normalizer normalizer,
            PreTokenizer pre_tokenizer);

  void encode_text(std::string_view text, std::vector<int32_t>& ids) const;

  BpeModel model_;
  AddedVocabulary added_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::vector<int32_t> prefix_ids_;  // added by add_special_tokens before the text
  std::vector<int32_t> suffix_ids_;  // and after it
  std::vector<std::string> id_to_token_;
  std::vector<std::string> token_bytes_;
  std::vector<char> special_;
  TokenIdMap added_ids_;
};

}  // namespace omni::text
