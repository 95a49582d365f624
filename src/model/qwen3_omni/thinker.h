// The Qwen3-Omni thinker's text model: a Qwen3 decoder (q/k RMSNorm, GQA, no biases) whose layers'
// MLPs are mixtures of experts (model/moe_mlp.h), with interleaved M-RoPE, stored under
// `thinker.model.` (its output head `thinker.lm_head.weight`) of a checkpoint whose config.json
// holds thinker_config.text_config. For text the three M-RoPE position streams are equal
// (thinker_positions.h), which makes the rotation the plain one the decoder applies.
//
// Registered as the architecture Qwen3OmniMoeForConditionalGeneration (model/model_registry.h)
// and as the llm_ar stage model "qwen3_omni_thinker" (model/stage_model_registry.h). The audio and
// vision encoders are not loaded yet.
#pragma once

#include <filesystem>
#include <memory>
#include <string_view>

#include "base/json.h"
#include "model/decoder_lm.h"
#include "model/hf_config.h"
#include "model/model_registry.h"

namespace omni::model::qwen3_omni {

inline constexpr std::string_view kThinkerStageModel = "qwen3_omni_thinker";

// thinker_config.text_config of a Qwen3-Omni config.json (`source` names it in errors). Its stop
// ids: the text config's eos_token_id, else the top-level im_end_token_id (<|im_end|>), as the
// thinker ends its turn with it. kLoadFailed naming the file and the field.
TextModelConfig parse_thinker_text_config(const Json& config, const std::string& source);

// Loads the thinker's text model of `dir` (either expert layout) with `options`.
std::unique_ptr<DecoderLm> load_thinker(const std::filesystem::path& dir, const Json& config,
                                        const CausalLmLoadOptions& options);

// Registers Qwen3OmniMoeForConditionalGeneration.
void register_family(ModelRegistry& registry);

}  // namespace omni::model::qwen3_omni
