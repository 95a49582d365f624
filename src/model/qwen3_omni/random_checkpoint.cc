#include "model/qwen3_omni/random_checkpoint.h"

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "base/splitmix64.h"
#include "model/random_checkpoint.h"
#include "model/safetensors_writer.h"

namespace omni::model::qwen3_omni {

namespace {

namespace fs = std::filesystem;

// The tokens Qwen3-Omni adds after Qwen3's vocabulary and added tokens (151643-151668).
const char* const kOmniAddedTokens[] = {"<|audio_start|>", "<|audio_end|>",         "<tts_pad>",    "<tts_text_bos>",
                                        "<tts_text_eod>",  "<tts_text_bos_single>", "<|audio_pad|>"};
constexpr int32_t kFirstOmniToken = 151669;

// The demo's talker and code2wav: the released vocabularies (a codec vocabulary of 3072 whose top
// 1024 hold the specials and speakers, 2048 codes per codebook, 16 codebooks) on small stacks.
constexpr int kDemoCodebook = 2048, kDemoCodeGroups = 16;
struct DemoTalker {
  int vocab = 3072, hidden = 64, projection = 128, layers = 2, heads = 4, kv_heads = 2, head_dim = 32;
  int experts = 8, top_k = 2, moe_inter = 64, shared = 64, predictor_layers = 1, predictor_inter = 128;
};
struct DemoCode2Wav {
  int hidden = 64, inter = 128, layers = 2, heads = 4, decoder_dim = 96;
  std::vector<int> rates = {8, 5, 4, 3}, ratios = {2, 2};
};

// One Qwen3 attention block's tensors under `p` (q/k norm, no biases).
template <typename Add>
void add_attention(Add& add, const std::string& p, int64_t h, int64_t heads, int64_t kv_heads, int64_t hd) {
  const float in_h = 1.0f / std::sqrt(static_cast<float>(h));
  add(p + "input_layernorm.weight", {h}, 0.05f, 1.0f);
  add(p + "post_attention_layernorm.weight", {h}, 0.05f, 1.0f);
  add(p + "self_attn.q_proj.weight", {heads * hd, h}, in_h);
  add(p + "self_attn.k_proj.weight", {kv_heads * hd, h}, in_h);
  add(p + "self_attn.v_proj.weight", {kv_heads * hd, h}, in_h);
  add(p + "self_attn.o_proj.weight", {h, heads * hd}, 1.0f / std::sqrt(static_cast<float>(heads * hd)));
  add(p + "self_attn.q_norm.weight", {hd}, 0.05f, 1.0f);
  add(p + "self_attn.k_norm.weight", {hd}, 0.05f, 1.0f);
}

template <typename Add>
void add_swiglu(Add& add, const std::string& p, int64_t h, int64_t inter) {
  const float in_h = 1.0f / std::sqrt(static_cast<float>(h));
  add(p + "gate_proj.weight", {inter, h}, in_h);
  add(p + "up_proj.weight", {inter, h}, in_h);
  add(p + "down_proj.weight", {h, inter}, 1.0f / std::sqrt(static_cast<float>(inter)));
}

// The talker (`talker.`): its MoE stack with a shared expert, codec embedding and head, the text
// and hidden projections from the thinker's width, and the code predictor.
template <typename Add>
void add_talker(Add& add, int64_t thinker_hidden) {
  const DemoTalker t;
  const int64_t h = t.hidden;
  add("talker.model.codec_embedding.weight", {t.vocab, h}, 0.5f);
  add("talker.model.norm.weight", {h}, 0.05f, 1.0f);
  add("talker.codec_head.weight", {t.vocab, h}, 0.5f);
  for (int l = 0; l < t.layers; ++l) {
    const std::string p = "talker.model.layers." + std::to_string(l) + ".";
    add_attention(add, p, h, t.heads, t.kv_heads, t.head_dim);
    add(p + "mlp.gate.weight", {t.experts, h}, 1.0f / std::sqrt(static_cast<float>(h)));
    for (int e = 0; e < t.experts; ++e) add_swiglu(add, p + "mlp.experts." + std::to_string(e) + ".", h, t.moe_inter);
    add_swiglu(add, p + "mlp.shared_expert.", h, t.shared);
    add(p + "mlp.shared_expert_gate.weight", {1, h}, 1.0f / std::sqrt(static_cast<float>(h)));
  }
  for (const char* projection : {"talker.text_projection.", "talker.hidden_projection."}) {
    const std::string p = projection;
    add(p + "linear_fc1.weight", {t.projection, thinker_hidden}, 1.0f / std::sqrt(static_cast<float>(thinker_hidden)));
    add(p + "linear_fc1.bias", {t.projection}, 0.02f);
    add(p + "linear_fc2.weight", {h, t.projection}, 1.0f / std::sqrt(static_cast<float>(t.projection)));
    add(p + "linear_fc2.bias", {h}, 0.02f);
  }
  const std::string cp = "talker.code_predictor.";
  for (int l = 0; l < t.predictor_layers; ++l) {
    const std::string p = cp + "model.layers." + std::to_string(l) + ".";
    add_attention(add, p, h, t.heads, t.kv_heads, t.head_dim);
    add_swiglu(add, p + "mlp.", h, t.predictor_inter);
  }
  add(cp + "model.norm.weight", {h}, 0.05f, 1.0f);
  for (int g = 0; g + 1 < kDemoCodeGroups; ++g) {
    add(cp + "model.codec_embedding." + std::to_string(g) + ".weight", {kDemoCodebook, h}, 0.5f);
    add(cp + "lm_head." + std::to_string(g) + ".weight", {kDemoCodebook, h}, 0.5f);
  }
}

// Code2wav (`code2wav.`, model/qwen3_omni/code2wav.h).
template <typename Add>
void add_code2wav(Add& add) {
  const DemoCode2Wav w;
  const int64_t h = w.hidden, hd = h / w.heads;
  const float in_h = 1.0f / std::sqrt(static_cast<float>(h));
  add("code2wav.code_embedding.weight", {int64_t{kDemoCodeGroups} * kDemoCodebook, h}, 1.0f);
  for (int l = 0; l < w.layers; ++l) {
    const std::string p = "code2wav.pre_transformer.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h}, 0.05f, 1.0f);
    add(p + "post_attention_layernorm.weight", {h}, 0.05f, 1.0f);
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      add(p + "self_attn." + proj + ".weight", {w.heads * hd, h}, in_h);
    }
    add(p + "self_attn_layer_scale.scale", {h}, 0.05f, 0.1f);
    add_swiglu(add, p + "mlp.", h, w.inter);
    add(p + "mlp_layer_scale.scale", {h}, 0.05f, 0.1f);
  }
  add("code2wav.pre_transformer.norm.weight", {h}, 0.05f, 1.0f);
  for (size_t i = 0; i < w.ratios.size(); ++i) {
    const std::string p = "code2wav.upsample." + std::to_string(i) + ".";
    add(p + "0.conv.weight", {h, h, w.ratios[i]}, in_h);
    add(p + "0.conv.bias", {h}, 0.02f);
    add(p + "1.dwconv.conv.weight", {h, 1, 7}, 0.3f);
    add(p + "1.dwconv.conv.bias", {h}, 0.02f);
    add(p + "1.norm.weight", {h}, 0.05f, 1.0f);
    add(p + "1.norm.bias", {h}, 0.02f);
    add(p + "1.pwconv1.weight", {4 * h, h}, in_h);
    add(p + "1.pwconv1.bias", {4 * h}, 0.02f);
    add(p + "1.pwconv2.weight", {h, 4 * h}, 0.5f * in_h);
    add(p + "1.pwconv2.bias", {h}, 0.02f);
    add(p + "1.gamma", {h}, 0.05f, 0.1f);
  }
  add("code2wav.decoder.0.conv.weight", {w.decoder_dim, h, 7}, 1.0f / std::sqrt(7.0f * h));
  add("code2wav.decoder.0.conv.bias", {w.decoder_dim}, 0.02f);
  for (size_t i = 0; i < w.rates.size(); ++i) {
    const int64_t in = w.decoder_dim >> i, out = w.decoder_dim >> (i + 1), r = w.rates[i];
    const std::string p = "code2wav.decoder." + std::to_string(i + 1) + ".block.";
    add(p + "0.alpha", {in}, 0.1f);
    add(p + "0.beta", {in}, 0.1f);
    add(p + "1.conv.weight", {in, out, 2 * r}, 1.0f / std::sqrt(2.0f * in));
    add(p + "1.conv.bias", {out}, 0.02f);
    for (int u = 0; u < 3; ++u) {
      const std::string pu = p + std::to_string(u + 2) + ".";
      for (const char* act : {"act1", "act2"}) {
        add(pu + act + ".alpha", {out}, 0.1f);
        add(pu + act + ".beta", {out}, 0.1f);
      }
      add(pu + "conv1.conv.weight", {out, out, 7}, 0.5f / std::sqrt(7.0f * out));
      add(pu + "conv1.conv.bias", {out}, 0.02f);
      add(pu + "conv2.conv.weight", {out, out, 1}, 0.5f / std::sqrt(static_cast<float>(out)));
      add(pu + "conv2.conv.bias", {out}, 0.02f);
    }
  }
  const int64_t last = w.decoder_dim >> w.rates.size();
  add("code2wav.decoder.5.alpha", {last}, 0.1f);
  add("code2wav.decoder.5.beta", {last}, 0.1f);
  add("code2wav.decoder.6.conv.weight", {1, last, 7}, 0.1f / std::sqrt(7.0f * last));
  add("code2wav.decoder.6.conv.bias", {1}, 0.02f);
}

// ChatML with content parts: text parts in order, each image, audio or video part as its
// placeholder (one pad token, which the processor expands to the encoder's token count).
constexpr const char* kChatTemplate =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}"
    "{%- else %}{%- for part in message.content %}"
    "{%- if part.type == 'text' %}{{- part.text }}"
    "{%- elif part.type in ['image', 'image_url'] %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part.type in ['audio', 'input_audio', 'audio_url'] %}{{- '<|audio_start|><|audio_pad|><|audio_end|>' }}"
    "{%- elif part.type in ['video', 'video_url'] %}{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

OrderedJson added_token(const std::string& content) {
  return OrderedJson{{"content", content}, {"lstrip", false},      {"normalized", false},
                     {"rstrip", false},    {"single_word", false}, {"special", true}};
}

void write_tokenizer_files(const fs::path& dir, const fs::path& qwen3_tokenizer_dir) {
  const fs::path tokenizer_file = qwen3_tokenizer_dir / "tokenizer.json";
  Json tokenizer = read_json_file(tokenizer_file);
  if (!tokenizer.contains("added_tokens") || !tokenizer["added_tokens"].is_array()) {
    throw_error(ErrorCode::kLoadFailed, "{}: no added_tokens list", tokenizer_file.string());
  }
  for (size_t i = 0; i < std::size(kOmniAddedTokens); ++i) {
    Json token = Json::parse(added_token(kOmniAddedTokens[i]).dump());
    token["id"] = kFirstOmniToken + static_cast<int32_t>(i);
    tokenizer["added_tokens"].push_back(token);
  }
  write_text(dir / "tokenizer.json", tokenizer.dump() + "\n");

  std::ifstream in(qwen3_tokenizer_dir / "tokenizer_config.json");
  if (!in)
    throw_error(ErrorCode::kNotFound, "{}: cannot open", (qwen3_tokenizer_dir / "tokenizer_config.json").string());
  OrderedJson config = OrderedJson::parse(in, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: not a JSON object",
                (qwen3_tokenizer_dir / "tokenizer_config.json").string());
  }
  for (size_t i = 0; i < std::size(kOmniAddedTokens); ++i) {
    config["added_tokens_decoder"][std::to_string(kFirstOmniToken + static_cast<int32_t>(i))] =
        added_token(kOmniAddedTokens[i]);
  }
  config["chat_template"] = kChatTemplate;
  write_json(dir / "tokenizer_config.json", config);
}

// The released preprocessor_config.json's fields: Whisper features (16 kHz, 128 mels, 10 ms hop)
// and the Qwen2-VL image processor with 16-pixel patches merged 2 x 2.
OrderedJson preprocessor_config() {
  return {{"processor_class", "Qwen3OmniMoeProcessor"},
          {"feature_extractor_type", "WhisperFeatureExtractor"},
          {"feature_size", 128},
          {"sampling_rate", 16000},
          {"hop_length", 160},
          {"n_fft", 400},
          {"chunk_length", 300},
          {"n_samples", 4800000},
          {"nb_max_frames", 30000},
          {"padding_side", "right"},
          {"padding_value", 0.0},
          {"return_attention_mask", true},
          {"dither", 0.0},
          {"image_processor_type", "Qwen2VLImageProcessor"},
          {"do_resize", true},
          {"do_rescale", true},
          {"rescale_factor", 1.0 / 255.0},
          {"do_normalize", true},
          {"image_mean", {0.5, 0.5, 0.5}},
          {"image_std", {0.5, 0.5, 0.5}},
          {"do_convert_rgb", true},
          {"min_pixels", 3136},
          {"max_pixels", 12845056},
          {"patch_size", 16},
          {"temporal_patch_size", 2},
          {"merge_size", 2}};
}

OrderedJson text_config(const TextModelConfig& s, const char* dtype) {
  std::vector<int> dense;
  for (int l = 0; l < s.num_hidden_layers; ++l) {
    if (!s.moe.sparse(l)) dense.push_back(l);
  }
  return {{"model_type", "qwen3_omni_moe_text"},
          {"vocab_size", s.vocab_size},
          {"hidden_size", s.hidden_size},
          {"intermediate_size", s.intermediate_size},
          {"num_hidden_layers", s.num_hidden_layers},
          {"num_attention_heads", s.num_attention_heads},
          {"num_key_value_heads", s.num_key_value_heads},
          {"head_dim", s.head_dim},
          {"hidden_act", "silu"},
          {"rms_norm_eps", s.rms_norm_eps},
          {"max_position_embeddings", s.max_position_embeddings},
          {"rope_theta", s.rope.theta},
          {"rope_scaling",
           {{"rope_type", "default"},
            {"mrope_section", s.rope.mrope_section},
            {"interleaved", s.rope.mrope_interleaved},
            {"mrope_interleaved", s.rope.mrope_interleaved}}},
          {"attention_bias", false},
          {"tie_word_embeddings", false},
          {"num_experts", s.moe.num_experts},
          {"num_experts_per_tok", s.moe.num_experts_per_tok},
          {"moe_intermediate_size", s.moe.moe_intermediate_size},
          {"norm_topk_prob", s.moe.norm_topk_prob},
          {"decoder_sparse_step", 1},
          {"mlp_only_layers", dense},
          {"torch_dtype", dtype}};
}

}  // namespace

TextModelConfig demo_thinker_shapes() {
  TextModelConfig c;
  c.architecture = "Qwen3OmniMoeForConditionalGeneration";
  c.model_type = "qwen3_omni_moe_text";
  c.vocab_size = 152064;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.intermediate_size = 128;
  c.rms_norm_eps = 1e-6f;
  c.max_position_embeddings = 65536;
  c.rope.theta = 1e6f;
  c.rope.mrope_section = {6, 5, 5};
  c.rope.mrope_interleaved = true;
  c.moe.num_experts = 8;
  c.moe.num_experts_per_tok = 2;
  c.moe.moe_intermediate_size = 64;
  c.moe.norm_topk_prob = true;
  c.moe.sparse_layers.assign(c.num_hidden_layers, true);
  return c;
}

void write_random_checkpoint(const fs::path& dir, const TextModelConfig& s, uint64_t seed, tensor::DType dtype,
                             const fs::path& qwen3_tokenizer_dir, bool audio_output) {
  fs::create_directories(dir);
  SafetensorsWriter writer(dtype);
  RandomTensors random(writer, seed);
  auto add = [&](const std::string& name, const tensor::Shape& shape, float stddev, float mean = 0.0f) {
    random.add(name, shape, stddev, mean);
  };
  const int64_t h = s.hidden_size, hd = s.head_dim;
  const int64_t q = s.num_attention_heads * hd, kv = s.num_key_value_heads * hd;
  const float in_h = 1.0f / std::sqrt(static_cast<float>(h));
  add("thinker.model.embed_tokens.weight", {s.vocab_size, h}, 0.02f);
  add("thinker.model.norm.weight", {h}, 0.05f, 1.0f);
  add("thinker.lm_head.weight", {s.vocab_size, h}, 0.02f);
  for (int i = 0; i < s.num_hidden_layers; ++i) {
    const std::string p = "thinker.model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {h}, 0.05f, 1.0f);
    add(p + "post_attention_layernorm.weight", {h}, 0.05f, 1.0f);
    add(p + "self_attn.q_proj.weight", {q, h}, in_h);
    add(p + "self_attn.k_proj.weight", {kv, h}, in_h);
    add(p + "self_attn.v_proj.weight", {kv, h}, in_h);
    add(p + "self_attn.o_proj.weight", {h, q}, 1.0f / std::sqrt(static_cast<float>(q)));
    add(p + "self_attn.q_norm.weight", {hd}, 0.05f, 1.0f);
    add(p + "self_attn.k_norm.weight", {hd}, 0.05f, 1.0f);
    if (s.moe.sparse(i)) {
      const int64_t inter = s.moe.moe_intermediate_size;
      add(p + "mlp.gate.weight", {s.moe.num_experts, h}, in_h);
      for (int e = 0; e < s.moe.num_experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        add(x + "gate_proj.weight", {inter, h}, in_h);
        add(x + "up_proj.weight", {inter, h}, in_h);
        add(x + "down_proj.weight", {h, inter}, 1.0f / std::sqrt(static_cast<float>(inter)));
      }
    } else {
      const int64_t inter = s.intermediate_size;
      add(p + "mlp.gate_proj.weight", {inter, h}, in_h);
      add(p + "mlp.up_proj.weight", {inter, h}, in_h);
      add(p + "mlp.down_proj.weight", {h, inter}, 1.0f / std::sqrt(static_cast<float>(inter)));
    }
  }
  // The audio tower of audio_config below (d_model 64, 2 layers of 4 heads, ffn 128, 32 conv
  // channels over the 128 mel bins: 16 rows after the convolutions).
  const int64_t ad = 64, affn = 128, conv = 32, freq = 16;
  const std::string a = "thinker.audio_tower.";
  for (int i = 1; i <= 3; ++i) {
    const int64_t in = i == 1 ? 1 : conv;
    add(a + "conv2d" + std::to_string(i) + ".weight", {conv, in, 3, 3}, 1.0f / std::sqrt(9.0f * in));
    add(a + "conv2d" + std::to_string(i) + ".bias", {conv}, 0.02f);
  }
  add(a + "conv_out.weight", {ad, conv * freq}, 1.0f / std::sqrt(static_cast<float>(conv * freq)));
  const float in_ad = 1.0f / std::sqrt(static_cast<float>(ad));
  for (int l = 0; l < 2; ++l) {
    const std::string p = a + "layers." + std::to_string(l) + ".";
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      add(p + "self_attn." + proj + ".weight", {ad, ad}, in_ad);
      add(p + "self_attn." + proj + ".bias", {ad}, 0.02f);
    }
    for (const char* norm : {"self_attn_layer_norm", "final_layer_norm"}) {
      add(p + norm + ".weight", {ad}, 0.05f, 1.0f);
      add(p + norm + ".bias", {ad}, 0.02f);
    }
    add(p + "fc1.weight", {affn, ad}, in_ad);
    add(p + "fc1.bias", {affn}, 0.02f);
    add(p + "fc2.weight", {ad, affn}, 1.0f / std::sqrt(static_cast<float>(affn)));
    add(p + "fc2.bias", {ad}, 0.02f);
  }
  add(a + "ln_post.weight", {ad}, 0.05f, 1.0f);
  add(a + "ln_post.bias", {ad}, 0.02f);
  add(a + "proj1.weight", {ad, ad}, in_ad);
  add(a + "proj1.bias", {ad}, 0.02f);
  add(a + "proj2.weight", {h, ad}, in_ad);
  add(a + "proj2.bias", {h}, 0.02f);
  // The vision encoder of vision_config below (width 64, 2 blocks of 4 heads, MLP 128, 16-pixel
  // patches of temporal patch 2, an 8 x 8 position grid, DeepStack after both blocks).
  const int64_t vd = 64, vffn = 128, patch_values = 3 * 2 * 16 * 16, merged = 4 * vd;
  const std::string v = "thinker.visual.";
  const float in_vd = 1.0f / std::sqrt(static_cast<float>(vd)),
              in_merged = 1.0f / std::sqrt(static_cast<float>(merged));
  add(v + "patch_embed.proj.weight", {vd, 3, 2, 16, 16}, 1.0f / std::sqrt(static_cast<float>(patch_values)));
  add(v + "patch_embed.proj.bias", {vd}, 0.02f);
  add(v + "pos_embed.weight", {64, vd}, 0.5f);
  for (int b = 0; b < 2; ++b) {
    const std::string p = v + "blocks." + std::to_string(b) + ".";
    for (const char* norm : {"norm1", "norm2"}) {
      add(p + norm + ".weight", {vd}, 0.05f, 1.0f);
      add(p + norm + ".bias", {vd}, 0.02f);
    }
    add(p + "attn.qkv.weight", {3 * vd, vd}, in_vd);
    add(p + "attn.qkv.bias", {3 * vd}, 0.02f);
    add(p + "attn.proj.weight", {vd, vd}, in_vd);
    add(p + "attn.proj.bias", {vd}, 0.02f);
    add(p + "mlp.linear_fc1.weight", {vffn, vd}, in_vd);
    add(p + "mlp.linear_fc1.bias", {vffn}, 0.02f);
    add(p + "mlp.linear_fc2.weight", {vd, vffn}, 1.0f / std::sqrt(static_cast<float>(vffn)));
    add(p + "mlp.linear_fc2.bias", {vd}, 0.02f);
  }
  for (const std::string& m : {v + "merger.", v + "merger_list.0.", v + "merger_list.1."}) {
    const int64_t norm = m == v + "merger." ? vd : merged;
    add(m + "ln_q.weight", {norm}, 0.05f, 1.0f);
    add(m + "ln_q.bias", {norm}, 0.02f);
    add(m + "mlp.0.weight", {merged, merged}, in_merged);
    add(m + "mlp.0.bias", {merged}, 0.02f);
    add(m + "mlp.2.weight", {h, merged}, in_merged);
    add(m + "mlp.2.bias", {h}, 0.02f);
  }
  if (audio_output) {
    add_talker(add, h);
    add_code2wav(add);
  }
  writer.write(dir / "model.safetensors");

  const char* dtype_name = dtype == tensor::DType::kBF16 ? "bfloat16" : "float32";
  OrderedJson thinker = {{"model_type", "qwen3_omni_moe_thinker"},
                         {"audio_token_id", 151675},
                         {"image_token_id", 151655},
                         {"video_token_id", 151656},
                         {"vision_start_token_id", 151652},
                         {"audio_start_token_id", 151669},
                         {"user_token_id", 872},
                         {"position_id_per_seconds", 13},
                         {"text_config", text_config(s, dtype_name)},
                         {"audio_config",
                          {{"model_type", "qwen3_omni_moe_audio_encoder"},
                           {"num_mel_bins", 128},
                           {"d_model", 64},
                           {"encoder_layers", 2},
                           {"encoder_attention_heads", 4},
                           {"encoder_ffn_dim", 128},
                           {"downsample_hidden_size", 32},
                           {"output_dim", s.hidden_size},
                           {"n_window", 50},
                           {"n_window_infer", 800},
                           {"conv_chunksize", 500},
                           {"max_source_positions", 1500},
                           {"activation_function", "gelu"}}},
                         {"vision_config",
                          {{"model_type", "qwen3_omni_moe_vision_encoder"},
                           {"depth", 2},
                           {"hidden_size", 64},
                           {"num_heads", 4},
                           {"intermediate_size", 128},
                           {"out_hidden_size", s.hidden_size},
                           {"patch_size", 16},
                           {"temporal_patch_size", 2},
                           {"spatial_merge_size", 2},
                           {"in_channels", 3},
                           {"num_position_embeddings", 64},
                           {"deepstack_visual_indexes", {0, 1}},
                           {"hidden_act", "gelu_pytorch_tanh"}}}};
  const DemoTalker t;
  OrderedJson talker = {{"model_type", "qwen3_omni_moe_talker"},
                        {"thinker_hidden_size", s.hidden_size},
                        {"accept_hidden_layer", 1},
                        {"num_code_groups", kDemoCodeGroups},
                        {"codec_pad_id", 2148},
                        {"codec_bos_id", 2149},
                        {"codec_eos_token_id", 2150},
                        {"codec_nothink_id", 2155},
                        {"codec_think_bos_id", 2156},
                        {"codec_think_eos_id", 2157},
                        {"speaker_id", {{"chelsie", 2301}, {"ethan", 2302}, {"aiden", 2303}}},
                        {"audio_token_id", 151675},
                        {"image_token_id", 151655},
                        {"video_token_id", 151656},
                        {"vision_start_token_id", 151652},
                        {"audio_start_token_id", 151669},
                        {"position_id_per_seconds", 13},
                        {"text_config",
                         {{"model_type", "qwen3_omni_moe_talker_text"},
                          {"vocab_size", t.vocab},
                          {"hidden_size", t.hidden},
                          {"intermediate_size", t.projection},
                          {"num_hidden_layers", t.layers},
                          {"num_attention_heads", t.heads},
                          {"num_key_value_heads", t.kv_heads},
                          {"head_dim", t.head_dim},
                          {"rms_norm_eps", 1e-6},
                          {"max_position_embeddings", 65536},
                          {"num_experts", t.experts},
                          {"num_experts_per_tok", t.top_k},
                          {"moe_intermediate_size", t.moe_inter},
                          {"shared_expert_intermediate_size", t.shared},
                          {"norm_topk_prob", true},
                          {"decoder_sparse_step", 1},
                          {"mlp_only_layers", OrderedJson::array()},
                          {"rope_parameters",
                           {{"rope_type", "default"},
                            {"rope_theta", 1000000.0},
                            {"mrope_section", {8, 4, 4}},
                            {"interleaved", true},
                            {"mrope_interleaved", true}}}}},
                        {"code_predictor_config",
                         {{"model_type", "qwen3_omni_moe_talker_code_predictor"},
                          {"vocab_size", kDemoCodebook},
                          {"hidden_size", t.hidden},
                          {"intermediate_size", t.predictor_inter},
                          {"num_hidden_layers", t.predictor_layers},
                          {"num_attention_heads", t.heads},
                          {"num_key_value_heads", t.kv_heads},
                          {"head_dim", t.head_dim},
                          {"rms_norm_eps", 1e-6},
                          {"num_code_groups", kDemoCodeGroups},
                          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}}}}};
  const DemoCode2Wav w;
  OrderedJson code2wav = {{"model_type", "qwen3_omni_moe_code2wav"},
                          {"codebook_size", kDemoCodebook},
                          {"num_quantizers", kDemoCodeGroups},
                          {"hidden_size", w.hidden},
                          {"intermediate_size", w.inter},
                          {"num_hidden_layers", w.layers},
                          {"num_attention_heads", w.heads},
                          {"num_key_value_heads", w.heads},
                          {"sliding_window", 72},
                          {"rms_norm_eps", 1e-5},
                          {"layer_scale_initial_scale", 0.01},
                          {"upsample_rates", {8, 5, 4, 3}},
                          {"upsampling_ratios", {2, 2}},
                          {"decoder_dim", w.decoder_dim},
                          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  OrderedJson config = {{"architectures", {"Qwen3OmniMoeForConditionalGeneration"}},
                        {"model_type", "qwen3_omni_moe"},
                        {"enable_audio_output", audio_output},
                        {"im_start_token_id", 151644},
                        {"im_end_token_id", 151645},
                        {"tts_pad_token_id", 151671},
                        {"tts_bos_token_id", 151672},
                        {"tts_eos_token_id", 151673},
                        {"system_token_id", 8948},
                        {"user_token_id", 872},
                        {"assistant_token_id", 77091},
                        {"torch_dtype", dtype_name},
                        {"thinker_config", thinker},
                        {"talker_config", talker},
                        {"code2wav_config", code2wav}};
  write_json(dir / "config.json", config);
  // <|im_end|> ends the thinker's turn; <|endoftext|> as Qwen3's.
  write_json(dir / "generation_config.json", OrderedJson{{"eos_token_id", {151645, 151643}}});
  write_json(dir / "preprocessor_config.json", preprocessor_config());
  write_tokenizer_files(dir, qwen3_tokenizer_dir);
}

}  // namespace omni::model::qwen3_omni
