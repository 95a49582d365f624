#include "model/qwen2/qwen2.h"

#include "model/decoder_lm.h"

namespace omni::model::qwen2 {

void register_family(ModelRegistry& registry) {
  registry.add_causal_lm(
      "Qwen2ForCausalLM", [](const std::filesystem::path& dir, const Json& config, const CausalLmLoadOptions& options) {
        const TextModelConfig text = parse_text_model_config(config, (dir / "config.json").string());
        return std::make_unique<DecoderLm>(dir, text, DecoderVariant{.qk_norm = false, .qkv_bias = true}, options);
      });
}

}  // namespace omni::model::qwen2
