#include "model/qwen3_omni/thinker.h"

#include <string>

#include "base/error.h"

namespace omni::model::qwen3_omni {

TextModelConfig parse_thinker_text_config(const Json& config, const std::string& source) {
  auto thinker = config.find("thinker_config");
  if (thinker == config.end() || !thinker->is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing field 'thinker_config'", source);
  }
  auto text = thinker->find("text_config");
  if (text == thinker->end() || !text->is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing field 'thinker_config.text_config'", source);
  }
  TextModelConfig c = parse_text_model_config(*text, source + ": thinker_config.text_config");
  if (c.architecture.empty()) c.architecture = "Qwen3OmniMoeForConditionalGeneration";
  if (c.dtype.empty()) {
    // The dtype is recorded at the top level (v4 torch_dtype, v5 dtype).
    for (const char* key : {"dtype", "torch_dtype"}) {
      if (config.contains(key) && config[key].is_string()) {
        c.dtype = config[key].get<std::string>();
        break;
      }
    }
  }
  if (c.eos_token_ids.empty()) {
    auto im_end = config.find("im_end_token_id");
    if (im_end != config.end()) c.eos_token_ids = parse_token_ids(*im_end, source + ": im_end_token_id");
  }
  return c;
}

std::unique_ptr<DecoderLm> load_thinker(const std::filesystem::path& dir, const Json& config,
                                        const CausalLmLoadOptions& options) {
  const TextModelConfig text = parse_thinker_text_config(config, (dir / "config.json").string());
  DecoderWeights weights;
  weights.prefix = "thinker.model.";
  weights.lm_head = "thinker.lm_head.weight";
  return std::make_unique<DecoderLm>(dir, text, DecoderVariant{.qk_norm = true, .qkv_bias = false}, weights, options);
}

void register_family(ModelRegistry& registry) {
  registry.add_causal_lm("Qwen3OmniMoeForConditionalGeneration", load_thinker);
}

}  // namespace omni::model::qwen3_omni
