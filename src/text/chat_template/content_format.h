// How a chat template expects a message's content, as vLLM's --chat-template-content-format
// names it: "string" templates print message.content as text (list content is joined into one
// string for them), "openai" templates loop over a list of {"type": ..., ...} parts.
#pragma once

#include <string_view>

#include "text/chat_template/template.h"

namespace omni::text {

enum class ContentFormat { kString, kOpenai };

// "string" or "openai" -> the format; nullopt-like kString for anything else is the caller's
// job (the flag's choices are checked by the CLI).
ContentFormat content_format_from_name(std::string_view name);
std::string_view content_format_name(ContentFormat format);

// What vLLM's "auto" detects: kOpenai when the template has a for loop over some value's
// `content` (`x.content`, `x['content']`) or over a variable set from one, else kString.
ContentFormat detect_content_format(const jinja::Template& chat_template);

}  // namespace omni::text
