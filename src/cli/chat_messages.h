// A chat given on the command line (`generate --messages`, `bench latency --messages`) as an engine
// prompt: the messages (content parts as the chat API takes them: text, input_audio, audio_url,
// image_url, video_url with data:, file:// URLs or plain file paths) rendered with the chat
// template of the tokenizer's folder (apply_chat_template with add_generation_prompt) and
// encoded; their media decoded as the checkpoint reads them (audio at its feature rate, images and
// video as its processor samples them) into additional_information's multi_modal_data, with the
// processor kwargs beside it. The command line reads any file its user names.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/json.h"

namespace omni::text {
class Tokenizer;
}

namespace omni::cli {

struct ChatPrompt {
  std::vector<int32_t> token_ids;
  // model/causal_lm.h's kMultiModalData and kMmProcessorKwargs when the chat has media; else empty.
  Json additional_information = Json::object();
};

// `messages` and `mm_processor_kwargs` (may be empty) are JSON text; `model_dir` is the
// checkpoint, `template_dir` the folder of the tokenizer and its chat template. kInvalidArgument
// starting "--messages: " (or naming --mm-processor-kwargs) for malformed JSON, a missing tokenizer
// or template, and media the chat API would refuse.
ChatPrompt render_chat_messages(const std::string& messages, const std::string& mm_processor_kwargs,
                                const std::filesystem::path& model_dir, const std::filesystem::path& template_dir,
                                const text::Tokenizer* tokenizer);

// The tokenizer in `model_dir` (tokenizer.json, or vocab.json and merges.txt); nullptr when it has none.
std::unique_ptr<text::Tokenizer> load_model_tokenizer(const std::filesystem::path& model_dir);

}  // namespace omni::cli
