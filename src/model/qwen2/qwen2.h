// The Qwen2 model family: Qwen2 / Qwen2.5 LLMs: biases on q/k/v projections, no q/k norm.
#pragma once

#include "model/model_registry.h"

namespace omni::model::qwen2 {

// Registers Qwen2ForCausalLM.
void register_family(ModelRegistry& registry);

}  // namespace omni::model::qwen2
