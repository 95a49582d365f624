// `omnistage demo-model`: writes a small random-weight checkpoint in the Hugging Face layout that
// serves on the CPU, for trying `omnistage serve` without downloading a model: --arch qwen3 (a
// chat model) or qwen3_tts (the two-stage Qwen3-TTS CustomVoice pipeline). Its output is noise.
#pragma once

#include "cli/command.h"

namespace omni::cli {

Command demo_model_command();

}  // namespace omni::cli
