#include "model/qwen2_5_omni/random_thinker_talker.h"

#include <cmath>
#include <string>
#include <vector>

#include "base/splitmix64.h"
#include "model/random_checkpoint.h"
#include "model/safetensors_writer.h"

namespace omni::model::qwen2_5_omni {

namespace {

OrderedJson decoder_json(int vocab, int hidden, int layers, int heads, int kv_heads, int head_dim, int inter) {
  return {{"vocab_size", vocab},
          {"hidden_size", hidden},
          {"num_hidden_layers", layers},
          {"num_attention_heads", heads},
          {"num_key_value_heads", kv_heads},
          {"head_dim", head_dim},
          {"intermediate_size", inter},
          {"hidden_act", "silu"},
          {"rms_norm_eps", 1e-6},
          {"max_position_embeddings", 4096},
          {"tie_word_embeddings", false},
          {"use_sliding_window", false},
          {"rope_parameters", {{"rope_type", "default"}, {"mrope_section", {2, 3, 3}}, {"rope_theta", 10000.0}}}};
}

}  // namespace

OrderedJson tiny_thinker_talker_config() {
  OrderedJson text = decoder_json(160, 48, 2, 4, 2, 16, 96);
  text["model_type"] = "qwen2_5_omni_text";
  text["eos_token_id"] = 151;
  OrderedJson thinker = {{"model_type", "qwen2_5_omni_thinker"},
                         {"text_config", text},
                         {"audio_token_index", 120},
                         {"image_token_index", 121},
                         {"video_token_index", 122},
                         {"audio_start_token_id", 123},
                         {"audio_end_token_id", 124},
                         {"vision_start_token_id", 125},
                         {"vision_end_token_id", 126},
                         {"position_id_per_seconds", 25},
                         {"seconds_per_chunk", 2}};
  OrderedJson talker = decoder_json(40, 32, 2, 4, 2, 16, 64);
  talker["model_type"] = "qwen2_5_omni_talker";
  talker["embedding_size"] = 48;
  talker["tts_text_start_token_id"] = 150;
  talker["tts_text_end_token_id"] = 151;
  talker["tts_text_pad_token_id"] = 152;
  talker["tts_codec_pad_token_id"] = 32;
  talker["tts_codec_start_token_id"] = 33;
  talker["tts_codec_end_token_id"] = 34;
  talker["tts_codec_mask_token_id"] = 35;
  return {{"architectures", {"Qwen2_5OmniForConditionalGeneration"}},
          {"model_type", "qwen2_5_omni"},
          {"dtype", "float32"},
          {"enable_audio_output", true},
          {"thinker_config", thinker},
          {"talker_config", talker}};
}

void write_random_thinker_talker_checkpoint(const std::filesystem::path& dir, const OrderedJson& config,
                                            uint64_t seed) {
  std::filesystem::create_directories(dir);
  SafetensorsWriter writer(tensor::DType::kF32);
  RandomTensors random(writer, seed);
  auto add = [&](const std::string& name, const tensor::Shape& shape, float stddev, float mean = 0.0f) {
    random.add(name, shape, stddev, mean);
  };
  auto fan = [](int64_t in) { return 1.0f / std::sqrt(static_cast<float>(in)); };
  auto decoder = [&](const std::string& prefix, const OrderedJson& c) {
    const int64_t h = c["hidden_size"], layers = c["num_hidden_layers"], heads = c["num_attention_heads"];
    const int64_t kv = c["num_key_value_heads"], hd = c["head_dim"], inter = c["intermediate_size"];
    for (int64_t l = 0; l < layers; ++l) {
      const std::string p = prefix + "layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {h}, 0.1f, 1.0f);
      add(p + "post_attention_layernorm.weight", {h}, 0.1f, 1.0f);
      add(p + "self_attn.q_proj.weight", {heads * hd, h}, fan(h));
      add(p + "self_attn.q_proj.bias", {heads * hd}, 0.1f);
      add(p + "self_attn.k_proj.weight", {kv * hd, h}, fan(h));
      add(p + "self_attn.k_proj.bias", {kv * hd}, 0.1f);
      add(p + "self_attn.v_proj.weight", {kv * hd, h}, fan(h));
      add(p + "self_attn.v_proj.bias", {kv * hd}, 0.1f);
      add(p + "self_attn.o_proj.weight", {h, heads * hd}, fan(heads * hd));
      add(p + "mlp.gate_proj.weight", {inter, h}, fan(h));
      add(p + "mlp.up_proj.weight", {inter, h}, fan(h));
      add(p + "mlp.down_proj.weight", {h, inter}, fan(inter));
    }
    add(prefix + "norm.weight", {h}, 0.1f, 1.0f);
  };
  const OrderedJson& text = config["thinker_config"]["text_config"];
  const OrderedJson& talker = config["talker_config"];
  const int64_t th = text["hidden_size"], tv = text["vocab_size"];
  const int64_t kh = talker["hidden_size"], kv = talker["vocab_size"], e = talker["embedding_size"];
  add("thinker.model.embed_tokens.weight", {tv, th}, 1.0f);
  decoder("thinker.model.", text);
  add("thinker.lm_head.weight", {tv, th}, fan(th) * 4.0f);
  add("talker.model.embed_tokens.weight", {kv, e}, 1.0f);
  decoder("talker.model.", talker);
  add("talker.thinker_to_talker_proj.weight", {kh, e}, fan(e));
  add("talker.thinker_to_talker_proj.bias", {kh}, 0.1f);
  add("talker.codec_head.weight", {kv, kh}, fan(kh) * 4.0f);
  writer.write(dir / "model.safetensors");
  write_json(dir / "config.json", config);
}

}  // namespace omni::model::qwen2_5_omni
