// The Qwen3 model family: Qwen3 dense LLMs: q/k RMSNorm per head before RoPE, no biases.
#pragma once

#include "model/model_registry.h"

namespace omni::model::qwen3 {

// Registers Qwen3ForCausalLM.
void register_family(ModelRegistry& registry);

}  // namespace omni::model::qwen3
