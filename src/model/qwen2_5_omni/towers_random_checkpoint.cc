#include "model/qwen2_5_omni/towers_random_checkpoint.h"

#include <cmath>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/splitmix64.h"
#include "model/random_checkpoint.h"
#include "model/safetensors_writer.h"

namespace omni::model::qwen2_5_omni {

TowerShapes tiny_tower_shapes() {
  TowerShapes s;
  AudioEncoderConfig& a = s.audio;
  a.num_mel_bins = 128;
  a.d_model = 32;
  a.encoder_layers = 2;
  a.encoder_attention_heads = 4;
  a.encoder_ffn_dim = 64;
  a.output_dim = 48;
  a.n_window = 8;
  a.max_source_positions = 64;
  VisionEncoderConfig& v = s.vision;
  v.depth = 3;
  v.hidden_size = 32;
  v.num_heads = 2;
  v.intermediate_size = 40;
  v.out_hidden_size = 48;
  v.patch_size = 14;
  v.temporal_patch_size = 2;
  v.spatial_merge_size = 2;
  v.in_channels = 3;
  v.window_size = 56;
  v.fullatt_block_indexes = {1};
  return s;
}

void write_random_towers_checkpoint(const std::filesystem::path& dir, const TowerShapes& shapes, uint64_t seed) {
  std::filesystem::create_directories(dir);
  const AudioEncoderConfig& a = shapes.audio;
  const VisionEncoderConfig& v = shapes.vision;
  const OrderedJson audio = {{"model_type", "qwen2_5_omni_audio_encoder"},
                             {"num_mel_bins", a.num_mel_bins},
                             {"d_model", a.d_model},
                             {"encoder_layers", a.encoder_layers},
                             {"encoder_attention_heads", a.encoder_attention_heads},
                             {"encoder_ffn_dim", a.encoder_ffn_dim},
                             {"output_dim", a.output_dim},
                             {"n_window", a.n_window},
                             {"max_source_positions", a.max_source_positions},
                             {"activation_function", "gelu"},
                             {"scale_embedding", false}};
  const OrderedJson vision = {{"model_type", "qwen2_5_omni_vision_encoder"},
                              {"depth", v.depth},
                              {"hidden_size", v.hidden_size},
                              {"num_heads", v.num_heads},
                              {"intermediate_size", v.intermediate_size},
                              {"out_hidden_size", v.out_hidden_size},
                              {"patch_size", v.patch_size},
                              {"temporal_patch_size", v.temporal_patch_size},
                              {"spatial_merge_size", v.spatial_merge_size},
                              {"in_channels", v.in_channels},
                              {"window_size", v.window_size},
                              {"fullatt_block_indexes", v.fullatt_block_indexes},
                              {"hidden_act", "silu"}};
  write_json(dir / "config.json", {{"architectures", {"Qwen2_5OmniModel"}},
                                   {"model_type", "qwen2_5_omni"},
                                   {"thinker_config", {{"audio_config", audio}, {"vision_config", vision}}}});
  write_json(dir / "preprocessor_config.json", {{"feature_extractor_type", "WhisperFeatureExtractor"},
                                                {"feature_size", a.num_mel_bins},
                                                {"sampling_rate", 16000},
                                                {"hop_length", 160},
                                                {"n_fft", 400},
                                                {"chunk_length", 300},
                                                {"n_samples", 4800000},
                                                {"padding_value", 0.0},
                                                {"dither", 0.0},
                                                {"return_attention_mask", true},
                                                {"image_processor_type", "Qwen2VLImageProcessor"},
                                                {"patch_size", v.patch_size},
                                                {"temporal_patch_size", v.temporal_patch_size},
                                                {"merge_size", v.spatial_merge_size},
                                                {"min_pixels", 3136},
                                                {"max_pixels", 12845056},
                                                {"image_mean", {0.48145466, 0.4578275, 0.40821073}},
                                                {"image_std", {0.26862954, 0.26130258, 0.27577711}},
                                                {"rescale_factor", 1.0 / 255.0},
                                                {"do_resize", true},
                                                {"do_rescale", true},
                                                {"do_normalize", true}});

  SafetensorsWriter writer(tensor::DType::kF32);
  RandomTensors random(writer, seed);
  auto add = [&](const std::string& name, const tensor::Shape& shape, float stddev, float mean = 0.0f) {
    random.add(name, shape, stddev, mean);
  };
  auto fan = [](int64_t in) { return 1.0f / std::sqrt(static_cast<float>(in)); };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias = true) {
    add(name + ".weight", {out, in}, fan(in));
    if (bias) add(name + ".bias", {out}, 0.02f);
  };
  auto norm = [&](const std::string& name, int64_t d, bool bias) {
    add(name + ".weight", {d}, 0.1f, 1.0f);
    if (bias) add(name + ".bias", {d}, 0.02f);
  };

  const std::string ap = "thinker.audio_tower.";
  const int64_t d = a.d_model;
  add(ap + "conv1.weight", {d, a.num_mel_bins, 3}, fan(int64_t{a.num_mel_bins} * 3));
  add(ap + "conv1.bias", {d}, 0.02f);
  add(ap + "conv2.weight", {d, d, 3}, fan(d * 3));
  add(ap + "conv2.bias", {d}, 0.02f);
  add(ap + "audio_bos_eos_token.weight", {2, a.output_dim}, 1.0f);
  for (int l = 0; l < a.encoder_layers; ++l) {
    const std::string p = ap + "layers." + std::to_string(l) + ".";
    norm(p + "self_attn_layer_norm", d, true);
    linear(p + "self_attn.q_proj", d, d);
    linear(p + "self_attn.k_proj", d, d, /*bias=*/false);
    linear(p + "self_attn.v_proj", d, d);
    linear(p + "self_attn.out_proj", d, d);
    norm(p + "final_layer_norm", d, true);
    linear(p + "fc1", a.encoder_ffn_dim, d);
    linear(p + "fc2", d, a.encoder_ffn_dim);
  }
  norm(ap + "ln_post", d, true);
  linear(ap + "proj", a.output_dim, d);

  const std::string vp = "thinker.visual.";
  const int64_t h = v.hidden_size, merged = h * v.spatial_merge_size * v.spatial_merge_size;
  add(vp + "patch_embed.proj.weight", {h, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size},
      fan(v.patch_values()));
  for (int b = 0; b < v.depth; ++b) {
    const std::string p = vp + "blocks." + std::to_string(b) + ".";
    norm(p + "norm1", h, false);
    for (const char* proj : {"q", "k", "v", "proj"}) linear(p + "attn." + proj, h, h);
    norm(p + "norm2", h, false);
    linear(p + "mlp.gate_proj", v.intermediate_size, h);
    linear(p + "mlp.up_proj", v.intermediate_size, h);
    linear(p + "mlp.down_proj", h, v.intermediate_size);
  }
  norm(vp + "merger.ln_q", h, false);
  linear(vp + "merger.mlp.0", merged, merged);
  linear(vp + "merger.mlp.2", v.out_hidden_size, merged);
  writer.write(dir / "model.safetensors");
}

}  // namespace omni::model::qwen2_5_omni
