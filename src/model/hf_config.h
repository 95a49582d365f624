// The decoder-LM fields of a Hugging Face config.json, read from either schema found in the wild:
// transformers 4.x (`rope_theta`, `rope_scaling`, `torch_dtype`) and 5.x (`rope_parameters`,
// `dtype`). Errors are omni::Error(kLoadFailed) naming the file and the field.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"

namespace omni::model {

struct RopeConfig {
  float theta = 10000.0f;
  // Multimodal RoPE (Qwen2-VL/Omni families); empty section = plain 1-D RoPE.
  std::vector<int> mrope_section;
  bool mrope_interleaved = false;
};

// Mixture-of-experts MLPs (Qwen3-MoE and the Qwen3-Omni thinker): a router picks
// num_experts_per_tok of num_experts SwiGLU experts per token. num_experts 0: every layer dense.
struct MoeConfig {
  int num_experts = 0;  // num_experts, or num_local_experts
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  bool norm_topk_prob = false;  // renormalise the top-k routing probabilities to sum to 1
  // A shared expert every token runs besides its routed ones (the Qwen3-Omni talker), weighted by
  // the sigmoid of its own gate; 0: none.
  int shared_expert_intermediate_size = 0;
  // Per layer: MoE, or the dense MLP of intermediate_size (mlp_only_layers, and the layers
  // decoder_sparse_step skips).
  std::vector<bool> sparse_layers;

  bool sparse(int layer) const {
    return layer >= 0 && layer < static_cast<int>(sparse_layers.size()) && sparse_layers[layer];
  }
};

struct TextModelConfig {
  std::string architecture;  // architectures[0], e.g. "Qwen3ForCausalLM"
  std::string model_type;
  int vocab_size = 0;
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;           // explicit, else hidden_size / num_attention_heads
  int intermediate_size = 0;  // of the dense MLPs (0 when every layer is MoE and the config omits it)
  MoeConfig moe;
  float rms_norm_eps = 1e-6f;
  std::string hidden_act = "silu";
  int max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::string dtype;  // on-disk torch dtype name ("bfloat16"); empty when the config omits it
  RopeConfig rope;
  // Per layer: 0 for full attention, else the sliding window (keys j > i - window are seen).
  std::vector<int> sliding_window;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;
};

// Reads the decoder fields from a config object; `source` names it in errors (a file path, or
// "config.json: thinker_config.text_config" for a nested one).
TextModelConfig parse_text_model_config(const Json& config, const std::string& source);

// Reads `dir`/config.json.
TextModelConfig read_text_model_config(const std::filesystem::path& dir);

// generation_config.json: the defaults a checkpoint ships for sampling and stopping.
struct GenerationDefaults {
  std::vector<int32_t> eos_token_ids;
  std::optional<bool> do_sample;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<int> max_new_tokens;
};

// Reads `dir`/generation_config.json; a checkpoint without one gets empty defaults.
GenerationDefaults read_generation_defaults(const std::filesystem::path& dir);

// A token id or a list of them (both spellings of eos_token_id); `source` names the field.
std::vector<int32_t> parse_token_ids(const Json& value, const std::string& source);

// The integer `key` of `config` in [low, high]; `fallback` when absent or null. Anything else is
// omni::Error(kLoadFailed): "<source>: '<key>' must be an integer from <low> to <high>, got <value>".
int bounded_int(const Json& config, const char* key, int fallback, int64_t low, int64_t high,
                const std::string& source);

}  // namespace omni::model
