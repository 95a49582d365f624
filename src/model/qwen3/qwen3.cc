#include "model/qwen3/qwen3.h"

#include "model/decoder_lm.h"

namespace omni::model::qwen3 {

void register_family(ModelRegistry& registry) {
  registry.add_causal_lm(
      "Qwen3ForCausalLM", [](const std::filesystem::path& dir, const Json& config, const CausalLmLoadOptions& options) {
        const TextModelConfig text = parse_text_model_config(config, (dir / "config.json").string());
        return std::make_unique<DecoderLm>(dir, text, DecoderVariant{.qk_norm = true, .qkv_bias = false}, options);
      });
}

}  // namespace omni::model::qwen3
