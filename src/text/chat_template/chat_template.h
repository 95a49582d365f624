// A model's chat template: the Jinja template in chat_template.jinja or in tokenizer_config.json's
// "chat_template", rendered the way transformers' apply_chat_template renders it (same
// variables, trim_blocks/lstrip_blocks, tojson without ASCII escaping, raise_exception).
//
// Thread-safety: immutable after loading; apply() may run on many threads at once.
// Errors: loading throws omni::Error(kLoadFailed) naming the file and template line of a syntax
// error; apply() throws omni::Error(kInvalidArgument) when the conversation does not fit the
// template (its raise_exception message, or the template line where evaluation failed).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "text/chat_template/content_format.h"
#include "text/chat_template/template.h"

namespace omni::text {

class ChatTemplate {
 public:
  // One template; `name` prefixes errors. `special_tokens` (bos_token, eos_token…) become
  // template variables, as transformers passes the tokenizer's special tokens.
  ChatTemplate(std::string_view source, std::string name, OrderedJson special_tokens = OrderedJson::object());

  // The chat template of a model directory, or nullopt when it has none: chat_template.jinja
  // takes precedence over tokenizer_config.json's chat_template (a string, or a list of
  // {"name", "template"} of which "default" and "tool_use" are used).
  static std::optional<ChatTemplate> load(const std::filesystem::path& model_dir);

  // apply_chat_template(messages, tools=tools, add_generation_prompt=..., **kwargs):
  // `tools` null means none given; `kwargs` (an object, e.g. {"enable_thinking": false}) adds
  // variables and overrides the special tokens.
  std::string apply(const OrderedJson& messages, const OrderedJson& tools, bool add_generation_prompt,
                    const OrderedJson& kwargs = OrderedJson::object()) const;

  // The content format the default template expects (content_format.h's detection).
  ContentFormat content_format() const;

 private:
  ChatTemplate() = default;

  std::vector<std::pair<std::string, jinja::Template>> templates_;  // first: the default one
  OrderedJson special_tokens_ = OrderedJson::object();
};

}  // namespace omni::text
