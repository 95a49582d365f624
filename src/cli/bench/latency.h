// `omnistage bench latency`: the counterpart of `vllm bench latency`. Loads the model in-process,
// runs one batch of random prompts (fixed input and output lengths, greedy, EOS ignored) through
// the engine several times, and reports the prefill time, the time per decode step and the whole
// batch's latency; --batch-size may list several sizes, measured one after the other on the same
// loaded model. With --messages every request of the batch is that chat instead (its media
// decoded once, encoded by the model for each request as it is added, which the "media" time
// counts), for the prefill of a multimodal prompt.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "cli/chat_messages.h"

namespace omni::cli::bench {

// Renders --messages (and --mm-processor-kwargs) for the model folder: cli/chat_messages.h's
// render_chat_messages with the folder's tokenizer.
using ChatRenderer = std::function<ChatPrompt(const std::string& model_dir, const std::string& messages,
                                              const std::string& mm_processor_kwargs)>;

// Adds the `latency` subcommand to `bench`; the returned function runs it (valid once parsed).
// Without `render_chat` (a binary without the media layer) --messages is refused.
std::function<int()> add_latency_command(CLI::App& bench, CLI::App** sub, ChatRenderer render_chat = {});

}  // namespace omni::cli::bench
