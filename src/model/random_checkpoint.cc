#include "model/random_checkpoint.h"

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "base/splitmix64.h"
#include "model/safetensors_writer.h"

namespace omni::model {
namespace {

// splitmix64: fast, and the same stream on every platform for a given seed.
}  // namespace

void RandomTensors::add(const std::string& name, const tensor::Shape& shape, float stddev, float mean) {
  values_.resize(static_cast<size_t>(tensor::shape_numel(shape)));
  const float a = stddev * std::sqrt(3.0f);
  // In [-1, 1) from the top 24 bits.
  for (float& v : values_) v = mean + a * (static_cast<float>(bits_.next() >> 40) * (2.0f / 16777216.0f) - 1.0f);
  writer_.add(name, shape, values_.data());
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw_error(ErrorCode::kInternal, "{}: cannot write", path.string());
}

void write_json(const std::filesystem::path& path, const OrderedJson& json) { write_text(path, json.dump(2) + "\n"); }

TextModelConfig qwen3_0_6b_shapes() {
  TextModelConfig c;
  c.architecture = "Qwen3ForCausalLM";
  c.model_type = "qwen3";
  c.vocab_size = 151936;
  c.hidden_size = 1024;
  c.num_hidden_layers = 28;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.intermediate_size = 3072;
  c.rms_norm_eps = 1e-6f;
  c.max_position_embeddings = 40960;
  c.tie_word_embeddings = true;
  c.rope.theta = 1e6f;
  c.bos_token_id = 151643;
  c.eos_token_ids = {151645};
  return c;
}

TextModelConfig qwen3_8b_shapes() {
  TextModelConfig c = qwen3_0_6b_shapes();
  c.hidden_size = 4096;
  c.num_hidden_layers = 36;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.intermediate_size = 12288;
  c.tie_word_embeddings = false;
  return c;
}

void write_random_qwen3_checkpoint(const std::filesystem::path& dir, const TextModelConfig& s, uint64_t seed,
                                   tensor::DType dtype) {
  std::filesystem::create_directories(dir);
  SafetensorsWriter writer(dtype);
  RandomTensors random(writer, seed);
  auto add = [&](const std::string& name, const tensor::Shape& shape, float stddev, float mean = 0.0f) {
    random.add(name, shape, stddev, mean);
  };
  const int64_t h = s.hidden_size, hd = s.head_dim, inter = s.intermediate_size;
  const int64_t q = s.num_attention_heads * hd, kv = s.num_key_value_heads * hd;
  add("model.embed_tokens.weight", {s.vocab_size, h}, 0.02f);
  add("model.norm.weight", {h}, 0.05f, 1.0f);
  if (!s.tie_word_embeddings) add("lm_head.weight", {s.vocab_size, h}, 0.02f);
  for (int i = 0; i < s.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {h}, 0.05f, 1.0f);
    add(p + "post_attention_layernorm.weight", {h}, 0.05f, 1.0f);
    add(p + "self_attn.q_proj.weight", {q, h}, 1.0f / std::sqrt(static_cast<float>(h)));
    add(p + "self_attn.k_proj.weight", {kv, h}, 1.0f / std::sqrt(static_cast<float>(h)));
    add(p + "self_attn.v_proj.weight", {kv, h}, 1.0f / std::sqrt(static_cast<float>(h)));
    add(p + "self_attn.o_proj.weight", {h, q}, 1.0f / std::sqrt(static_cast<float>(q)));
    add(p + "self_attn.q_norm.weight", {hd}, 0.05f, 1.0f);
    add(p + "self_attn.k_norm.weight", {hd}, 0.05f, 1.0f);
    add(p + "mlp.gate_proj.weight", {inter, h}, 1.0f / std::sqrt(static_cast<float>(h)));
    add(p + "mlp.up_proj.weight", {inter, h}, 1.0f / std::sqrt(static_cast<float>(h)));
    add(p + "mlp.down_proj.weight", {h, inter}, 1.0f / std::sqrt(static_cast<float>(inter)));
  }
  writer.write(dir / "model.safetensors");

  OrderedJson config = {{"architectures", {"Qwen3ForCausalLM"}},
                        {"model_type", "qwen3"},
                        {"vocab_size", s.vocab_size},
                        {"hidden_size", s.hidden_size},
                        {"num_hidden_layers", s.num_hidden_layers},
                        {"num_attention_heads", s.num_attention_heads},
                        {"num_key_value_heads", s.num_key_value_heads},
                        {"head_dim", s.head_dim},
                        {"intermediate_size", s.intermediate_size},
                        {"hidden_act", "silu"},
                        {"rms_norm_eps", s.rms_norm_eps},
                        {"rope_theta", s.rope.theta},
                        {"rope_scaling", nullptr},
                        {"max_position_embeddings", s.max_position_embeddings},
                        {"attention_bias", false},
                        {"use_sliding_window", false},
                        {"tie_word_embeddings", s.tie_word_embeddings},
                        {"torch_dtype", dtype == tensor::DType::kBF16 ? "bfloat16" : "float32"}};
  if (s.bos_token_id) config["bos_token_id"] = *s.bos_token_id;
  if (!s.eos_token_ids.empty()) config["eos_token_id"] = s.eos_token_ids[0];
  write_json(dir / "config.json", config);
  write_json(dir / "generation_config.json", OrderedJson{{"eos_token_id", s.eos_token_ids}});
}

}  // namespace omni::model
