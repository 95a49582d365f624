#include "model/qwen3_tts/random_checkpoint.h"

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "model/random_checkpoint.h"
#include "model/safetensors_writer.h"

namespace omni::model::qwen3_tts {

namespace {

namespace fs = std::filesystem;

OrderedJson read_ordered_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw_error(ErrorCode::kNotFound, "{}: cannot open", path.string());
  try {
    return OrderedJson::parse(in);
  } catch (const OrderedJson::exception& e) {
    throw_error(ErrorCode::kLoadFailed, "{}: {}", path.string(), e.what());
  }
}

// The real Qwen3-TTS codec ids (config.json of the released checkpoints).
const std::pair<const char*, int> kLanguages[] = {
    {"english", 2050},  {"german", 2053},  {"spanish", 2054},         {"chinese", 2055},
    {"japanese", 2058}, {"french", 2061},  {"sichuan_dialect", 2062}, {"korean", 2064},
    {"russian", 2069},  {"italian", 2070}, {"portuguese", 2071},      {"beijing_dialect", 2074}};
const std::pair<const char*, int> kSpeakerIds[] = {{"aiden", 2861}, {"dylan", 2878},  {"eric", 2875},
                                                   {"ryan", 3061},  {"serena", 3066}, {"vivian", 3065}};

// The TTS tokens Qwen3-TTS adds to the Qwen3 vocabulary.
const std::pair<int, const char*> kTtsAddedTokens[] = {{151669, "<|audio_start|>"}, {151670, "<|audio_end|>"},
                                                       {151671, "<tts_pad>"},       {151672, "<tts_text_bos>"},
                                                       {151673, "<tts_text_eod>"},  {151674, "<tts_text_bos_single>"},
                                                       {151675, "<|audio_pad|>"}};

OrderedJson stack_json(const TextModelConfig& c) {
  return OrderedJson{{"hidden_size", c.hidden_size},
                     {"intermediate_size", c.intermediate_size},
                     {"num_hidden_layers", c.num_hidden_layers},
                     {"num_attention_heads", c.num_attention_heads},
                     {"num_key_value_heads", c.num_key_value_heads},
                     {"head_dim", c.head_dim},
                     {"vocab_size", c.vocab_size},
                     {"hidden_act", "silu"},
                     {"rms_norm_eps", c.rms_norm_eps},
                     {"rope_theta", c.rope.theta},
                     {"max_position_embeddings", c.max_position_embeddings},
                     {"attention_bias", false},
                     {"use_sliding_window", false}};
}

TextModelConfig stack(int hidden, int layers, int heads, int kv_heads, int head_dim, int inter, int vocab,
                      int max_positions) {
  TextModelConfig c;
  c.hidden_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.intermediate_size = inter;
  c.vocab_size = vocab;
  c.max_position_embeddings = max_positions;
  c.rope.theta = 1e6f;
  c.rms_norm_eps = 1e-6f;
  return c;
}

}  // namespace

RandomTalkerShapes qwen3_tts_0_6b_shapes() {
  RandomTalkerShapes s;
  s.talker = stack(1024, 28, 16, 8, 128, 3072, 3072, 32768);
  s.code_predictor = stack(1024, 5, 16, 8, 128, 3072, 2048, 65536);
  s.model_size = "0b6";
  return s;
}

RandomTalkerShapes qwen3_tts_1_7b_shapes() {
  RandomTalkerShapes s;
  s.talker = stack(2048, 28, 16, 8, 128, 6144, 3072, 32768);
  s.code_predictor = stack(1024, 5, 16, 8, 128, 3072, 2048, 65536);
  s.model_size = "1b7";
  return s;
}

RandomTalkerShapes qwen3_tts_demo_shapes() {
  RandomTalkerShapes s;
  s.talker = stack(64, 2, 4, 2, 32, 128, 3072, 32768);
  s.code_predictor = stack(64, 2, 4, 2, 32, 128, 2048, 65536);
  s.text_hidden_size = 64;
  s.model_size = "0b6";
  return s;
}

void write_qwen3_tts_tokenizer_files(const fs::path& dir, const fs::path& qwen3_tokenizer_dir) {
  fs::create_directories(dir);
  // A plain (sorted) object: the vocabulary is a token -> id map, and ordered_json's insertion is
  // linear in the object size (quadratic over 151k tokens).
  const Json tokenizer = read_json_file(qwen3_tokenizer_dir / "tokenizer.json");
  const std::string source = (qwen3_tokenizer_dir / "tokenizer.json").string();
  if (!tokenizer.contains("model") || !tokenizer["model"].contains("vocab") || !tokenizer["model"].contains("merges")) {
    throw_error(ErrorCode::kLoadFailed, "{}: not a BPE tokenizer.json (model.vocab, model.merges)", source);
  }
  write_text(dir / "vocab.json", tokenizer["model"]["vocab"].dump() + "\n");
  std::string merges = "#version: 0.2\n";
  for (const Json& merge : tokenizer["model"]["merges"]) {
    // tokenizers writes a merge as "a b" (older files) or ["a", "b"].
    if (merge.is_string()) {
      merges += merge.get<std::string>();
    } else if (merge.is_array() && merge.size() == 2) {
      merges += merge[0].get<std::string>() + " " + merge[1].get<std::string>();
    } else {
      throw_error(ErrorCode::kLoadFailed, "{}: merge {} is neither \"a b\" nor [a, b]", source, merge.dump());
    }
    merges += "\n";
  }
  write_text(dir / "merges.txt", merges);

  OrderedJson config = read_ordered_json(qwen3_tokenizer_dir / "tokenizer_config.json");
  OrderedJson& added = config["added_tokens_decoder"];
  for (const auto& [id, content] : kTtsAddedTokens) {
    added[std::to_string(id)] = OrderedJson{{"content", content}, {"lstrip", false},      {"normalized", false},
                                            {"rstrip", false},    {"single_word", false}, {"special", true}};
  }
  config["tokenizer_class"] = "Qwen2Tokenizer";
  config.erase("chat_template");  // Qwen3-TTS builds its prompts itself
  write_json(dir / "tokenizer_config.json", config);
}

void write_random_talker_checkpoint(const fs::path& dir, const RandomTalkerShapes& s, uint64_t seed,
                                    tensor::DType dtype, const fs::path& qwen3_tokenizer_dir) {
  fs::create_directories(dir);
  std::mt19937_64 rng(seed);
  SafetensorsWriter writer(dtype);
  std::vector<float> buf;
  // Uniform in [-a, a) has standard deviation a / sqrt(3).
  auto add = [&](const std::string& name, const tensor::Shape& shape, float stddev, float mean = 0.0f) {
    buf.resize(static_cast<size_t>(tensor::shape_numel(shape)));
    const float a = stddev * std::sqrt(3.0f);
    for (float& v : buf) v = mean + a * (static_cast<float>(rng() >> 40) * (2.0f / 16777216.0f) - 1.0f);
    writer.add(name, shape, buf.data());
  };
  auto add_stack = [&](const std::string& prefix, const TextModelConfig& c) {
    const int64_t h = c.hidden_size, hd = c.head_dim, inter = c.intermediate_size;
    const int64_t q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
    const float in_h = 1.0f / std::sqrt(static_cast<float>(h));
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      const std::string p = prefix + "layers." + std::to_string(i) + ".";
      add(p + "input_layernorm.weight", {h}, 0.05f, 1.0f);
      add(p + "post_attention_layernorm.weight", {h}, 0.05f, 1.0f);
      add(p + "self_attn.q_proj.weight", {q, h}, in_h);
      add(p + "self_attn.k_proj.weight", {kv, h}, in_h);
      add(p + "self_attn.v_proj.weight", {kv, h}, in_h);
      add(p + "self_attn.o_proj.weight", {h, q}, 1.0f / std::sqrt(static_cast<float>(q)));
      add(p + "self_attn.q_norm.weight", {hd}, 0.05f, 1.0f);
      add(p + "self_attn.k_norm.weight", {hd}, 0.05f, 1.0f);
      add(p + "mlp.gate_proj.weight", {inter, h}, in_h);
      add(p + "mlp.up_proj.weight", {inter, h}, in_h);
      add(p + "mlp.down_proj.weight", {h, inter}, 1.0f / std::sqrt(static_cast<float>(inter)));
    }
    add(prefix + "norm.weight", {h}, 0.05f, 1.0f);
  };

  const int64_t h = s.talker.hidden_size, h_cp = s.code_predictor.hidden_size, th = s.text_hidden_size;
  const int64_t vocab = s.talker.vocab_size, codebook = s.code_predictor.vocab_size;
  add_stack("talker.model.", s.talker);
  add("talker.model.codec_embedding.weight", {vocab, h}, 0.5f);
  add("talker.codec_head.weight", {vocab, h}, 1.0f / std::sqrt(static_cast<float>(h)));
  add("talker.model.text_embedding.weight", {s.text_vocab_size, th}, 0.5f);
  add("talker.text_projection.linear_fc1.weight", {th, th}, 1.0f / std::sqrt(static_cast<float>(th)));
  add("talker.text_projection.linear_fc1.bias", {th}, 0.05f);
  add("talker.text_projection.linear_fc2.weight", {h, th}, 1.0f / std::sqrt(static_cast<float>(th)));
  add("talker.text_projection.linear_fc2.bias", {h}, 0.05f);
  add_stack("talker.code_predictor.model.", s.code_predictor);
  if (h != h_cp) {
    add("talker.code_predictor.small_to_mtp_projection.weight", {h_cp, h}, 1.0f / std::sqrt(static_cast<float>(h)));
    add("talker.code_predictor.small_to_mtp_projection.bias", {h_cp}, 0.05f);
  }
  for (int g = 0; g + 1 < s.num_code_groups; ++g) {
    add("talker.code_predictor.model.codec_embedding." + std::to_string(g) + ".weight", {codebook, h}, 0.5f);
    add("talker.code_predictor.lm_head." + std::to_string(g) + ".weight", {codebook, h_cp},
        1.0f / std::sqrt(static_cast<float>(h_cp)));
  }
  if (s.speaker_encoder) {
    const SpeakerEncoderConfig& e = *s.speaker_encoder;
    auto conv = [&](const std::string& name, int64_t out, int64_t in, int64_t k) {
      add("speaker_encoder." + name + ".weight", {out, in, k}, 1.0f / std::sqrt(static_cast<float>(in * k)));
      add("speaker_encoder." + name + ".bias", {out}, 0.05f);
    };
    const std::vector<int>& c = e.channels;
    conv("blocks.0.conv", c[0], e.mel_dim, e.kernel_sizes[0]);
    int64_t mfa_in = 0;
    for (size_t i = 1; i + 1 < c.size(); ++i) {
      const std::string b = "blocks." + std::to_string(i) + ".";
      conv(b + "tdnn1.conv", c[i], c[i - 1], 1);
      for (int j = 0; j + 1 < e.res2net_scale; ++j) {
        conv(b + "res2net_block.blocks." + std::to_string(j) + ".conv", c[i] / e.res2net_scale, c[i] / e.res2net_scale,
             e.kernel_sizes[i]);
      }
      conv(b + "tdnn2.conv", c[i], c[i], 1);
      conv(b + "se_block.conv1", e.se_channels, c[i], 1);
      conv(b + "se_block.conv2", c[i], e.se_channels, 1);
      mfa_in += c[i];
    }
    conv("mfa.conv", c.back(), mfa_in, e.kernel_sizes.back());
    conv("asp.tdnn.conv", e.attention_channels, int64_t{c.back()} * 3, 1);
    conv("asp.conv", c.back(), e.attention_channels, 1);
    conv("fc", e.enc_dim, int64_t{c.back()} * 2, 1);
  }
  writer.write(dir / "model.safetensors");

  // The talker's M-RoPE sections scaled to its head size (all streams are equal for TTS).
  const int half = s.talker.head_dim / 2;
  const int hw = half * 20 / 64;
  OrderedJson talker = stack_json(s.talker);
  talker["model_type"] = "qwen3_tts_talker";
  talker["rope_scaling"] = {
      {"interleaved", true}, {"mrope_section", {half - 2 * hw, hw, hw}}, {"rope_type", "default"}};
  talker["text_vocab_size"] = s.text_vocab_size;
  talker["text_hidden_size"] = s.text_hidden_size;
  talker["num_code_groups"] = s.num_code_groups;
  talker["position_id_per_seconds"] = 13;
  talker["codec_pad_id"] = 2148;
  talker["codec_bos_id"] = 2149;
  talker["codec_eos_token_id"] = 2150;
  talker["codec_think_id"] = 2154;
  talker["codec_nothink_id"] = 2155;
  talker["codec_think_bos_id"] = 2156;
  talker["codec_think_eos_id"] = 2157;
  OrderedJson languages = OrderedJson::object(), speakers = OrderedJson::object(), dialects = OrderedJson::object();
  for (const auto& [name, id] : kLanguages) languages[name] = id;
  if (!s.speaker_encoder) {
    for (const auto& [name, id] : kSpeakerIds) {
      speakers[name] = id;
      dialects[name] = false;
    }
    dialects["eric"] = "sichuan_dialect";
    dialects["dylan"] = "beijing_dialect";
  }
  talker["codec_language_id"] = languages;
  talker["spk_id"] = speakers;
  talker["spk_is_dialect"] = dialects;
  OrderedJson predictor = stack_json(s.code_predictor);
  predictor["model_type"] = "qwen3_tts_talker_code_predictor";
  predictor["rope_scaling"] = nullptr;
  predictor["num_code_groups"] = s.num_code_groups;
  talker["code_predictor_config"] = predictor;

  OrderedJson config = {{"architectures", {"Qwen3TTSForConditionalGeneration"}},
                        {"model_type", "qwen3_tts"},
                        {"tokenizer_type", "qwen3_tts_tokenizer_12hz"},
                        {"tts_model_size", s.model_size},
                        {"tts_model_type", s.speaker_encoder ? "base" : "custom_voice"},
                        {"im_start_token_id", 151644},
                        {"im_end_token_id", 151645},
                        {"assistant_token_id", 77091},
                        {"tts_pad_token_id", 151671},
                        {"tts_bos_token_id", 151672},
                        {"tts_eos_token_id", 151673},
                        {"talker_config", talker},
                        {"torch_dtype", dtype == tensor::DType::kBF16 ? "bfloat16" : "float32"}};
  if (s.speaker_encoder) {
    const SpeakerEncoderConfig& e = *s.speaker_encoder;
    config["speaker_encoder_config"] = {{"mel_dim", e.mel_dim},
                                        {"enc_dim", e.enc_dim},
                                        {"enc_channels", e.channels},
                                        {"enc_kernel_sizes", e.kernel_sizes},
                                        {"enc_dilations", e.dilations},
                                        {"enc_attention_channels", e.attention_channels},
                                        {"enc_res2net_scale", e.res2net_scale},
                                        {"enc_se_channels", e.se_channels},
                                        {"sample_rate", e.sample_rate}};
  }
  write_json(dir / "config.json", config);
  write_json(dir / "generation_config.json", OrderedJson{{"do_sample", true},
                                                         {"repetition_penalty", 1.05},
                                                         {"temperature", 0.9},
                                                         {"top_p", 1.0},
                                                         {"top_k", 50},
                                                         {"subtalker_dosample", true},
                                                         {"subtalker_temperature", 0.9},
                                                         {"subtalker_top_p", 1.0},
                                                         {"subtalker_top_k", 50},
                                                         {"max_new_tokens", 8192}});
  if (!qwen3_tokenizer_dir.empty()) write_qwen3_tts_tokenizer_files(dir, qwen3_tokenizer_dir);
}

SpeakerEncoderConfig released_speaker_encoder(int talker_hidden) {
  SpeakerEncoderConfig c;
  c.enc_dim = talker_hidden;
  return c;
}

SpeakerEncoderConfig demo_speaker_encoder(int talker_hidden) {
  SpeakerEncoderConfig c;
  c.enc_dim = talker_hidden;
  c.channels = {32, 32, 32, 32, 96};
  c.attention_channels = 16;
  c.res2net_scale = 4;
  c.se_channels = 16;
  return c;
}

}  // namespace omni::model::qwen3_tts
