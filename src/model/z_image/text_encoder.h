// Z-Image's prompt encoder: the prompt as the single user turn of the tokenizer's chat template
// (generation prompt added, enable_thinking true), tokenized, truncated to max_sequence_length
// tokens, and run through the Qwen3 text encoder; the features are the output of its second-to-last
// layer (Hugging Face's hidden_states[-2]: the last layer and the final norm are unused, so they are
// not loaded) for every token. Runs on its placement (the CPU in float32, or a CUDA device in its
// dtype); the features come back to the host in float32. One caller at a time.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/decoder_lm.h"
#include "model/placement.h"
#include "tensor/tensor.h"
#include "text/chat_template/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::model::z_image {

class TextEncoder {
 public:
  // Loads `dir`/text_encoder (a Qwen3 config.json naming Qwen3Model or Qwen3ForCausalLM, weights
  // with or without the "model." prefix) and `dir`/tokenizer (tokenizer.json or vocab.json +
  // merges.txt, and the chat template). Throws omni::Error(kLoadFailed/kNotFound) naming the file.
  explicit TextEncoder(const std::filesystem::path& dir, const Placement& placement = {});

  // The chat-templated, truncated token ids of `prompt`.
  std::vector<int32_t> tokenize(const std::string& prompt, int max_sequence_length) const;
  // The features of those ids: [tokens, hidden_size] float32 on the host.
  tensor::Tensor encode(const std::vector<int32_t>& ids);

  int hidden_size() const { return hidden_size_; }

 private:
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::optional<text::ChatTemplate> chat_template_;
  std::unique_ptr<DecoderLm> model_;
  int hidden_size_ = 0;
  int kv_blocks_ = 0;
};

}  // namespace omni::model::z_image
