// A chat request's message content in the form the chat template expects, as vLLM's OpenAI
// server prepares it: content may be a string or a list of parts ({"type": "text", "text": ...},
// image_url, input_audio, audio_url, video_url); for a "string" template the text parts are
// joined with newlines into one string, for an "openai" template the list stays a list of
// {"type": "text", "text": ...} parts. A media part of a kind the served model reads (its
// `readable_media`: "audio") becomes {"type": "audio"} for the template, which writes its
// placeholder (server/chat_media.h decodes the media themselves); other media parts are refused.
#pragma once

#include <string>
#include <vector>

#include "base/json.h"
#include "text/chat_template/content_format.h"

namespace omni::server {

// `messages` with every list content rewritten for `format`. Throws the 400 of openai_error.h
// naming the part at fault: messages[i].content[j] (not an object, an unknown type, or a media
// part the model cannot read, or one it reads under a "string" template) or
// messages[i].content[j].text (missing or not a string).
OrderedJson prepare_message_content(const OrderedJson& messages, text::ContentFormat format,
                                    const std::vector<std::string>& readable_media = {});

}  // namespace omni::server
