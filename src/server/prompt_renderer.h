// What the HTTP server needs from the model's tokenizer and chat template: turning request
// text and chat messages into the entry stage's prompt tokens, and token ids back into text.
// Implemented over the model layer's Tokenizer and chat-template renderer; tests implement it
// with a byte-level tokenizer.
//
// Threads: every method is const and may be called concurrently from the HTTP I/O threads.
// Errors: omni::Error(kInvalidArgument) for input the tokenizer or template rejects, with a
// message that names the offending message or field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"

namespace omni::server {

class PromptRenderer {
 public:
  virtual ~PromptRenderer() = default;

  // `add_special_tokens`: add what the tokenizer adds around a plain prompt (BOS…).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  virtual std::string decode(const std::vector<int32_t>& token_ids, bool skip_special_tokens) const = 0;
  // The token's own text (its vocabulary entry), for /tokenize's token_strs.
  virtual std::string token_text(int32_t token_id) const = 0;
  // Renders a chat request through the model's chat template and tokenizes the result. Reads the
  // request fields that shape the prompt: messages, add_generation_prompt (default true),
  // continue_final_message, chat_template_kwargs, tools, documents; `add_special_tokens`
  // (default false: the template already writes them). The request keeps its keys in the order
  // the client sent them, because templates print tool schemas and arguments in that order.
  virtual std::vector<int32_t> render_chat(const OrderedJson& request) const = 0;
  // Token ids at or above this are outside the vocabulary.
  virtual int32_t vocab_size() const = 0;
};

}  // namespace omni::server
