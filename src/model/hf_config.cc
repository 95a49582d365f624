#include "model/hf_config.h"

#include <algorithm>

#include "base/error.h"
#include "base/json_get.h"

namespace omni::model {
namespace {

// Typed field access with errors that name the file and the field.
class Fields {
 public:
  Fields(const Json& json, const std::string& source) : json_(json), source_(source) {}

  bool has(const char* key) const { return json_.contains(key) && !json_[key].is_null(); }

  template <typename T>
  T required(const char* key) const {
    if (!has(key)) throw_error(ErrorCode::kLoadFailed, "{}: missing field '{}'", source_, key);
    return get<T>(key);
  }

  template <typename T>
  T optional(const char* key, T fallback) const {
    return has(key) ? get<T>(key) : fallback;
  }

  template <typename T>
  T get(const char* key) const {
    try {
      return get_exact<T>(json_.at(key));
    } catch (const Json::exception&) {
      throw_error(ErrorCode::kLoadFailed, "{}: field '{}' has the wrong type (got {})", source_, key,
                  json_.at(key).dump());
    }
  }

  int positive(const char* key) const {
    const int v = required<int>(key);
    if (v <= 0) throw_error(ErrorCode::kLoadFailed, "{}: field '{}' must be positive, got {}", source_, key, v);
    return v;
  }

 private:
  const Json& json_;
  const std::string source_;  // a copy: callers pass temporaries (source + ": rope_parameters")
};

// rope_parameters (v5) or rope_theta + rope_scaling (v4) -> RopeConfig.
RopeConfig parse_rope(const Json& config, const std::string& source) {
  Fields f(config, source);
  RopeConfig rope;
  Json params;
  std::string field;
  if (f.has("rope_parameters")) {
    params = config["rope_parameters"];
    field = "rope_parameters";
    if (!params.is_object() || !(params.contains("rope_type") || params.contains("rope_theta"))) {
      throw_error(ErrorCode::kUnsupported, "{}: rope_parameters per layer type is not supported: {}", source,
                  params.dump());
    }
    Fields p(params, source + ": rope_parameters");
    rope.theta = p.required<float>("rope_theta");
  } else {
    rope.theta = f.optional<float>("rope_theta", 10000.0f);
    if (f.has("rope_scaling")) {
      params = config["rope_scaling"];
      field = "rope_scaling";
    }
  }
  if (params.is_null()) return rope;
  if (!params.is_object()) throw_error(ErrorCode::kLoadFailed, "{}: field '{}' must be an object", source, field);
  Fields p(params, source + ": " + field);
  // Older Qwen2-VL configs spell the type "type" and call M-RoPE "mrope"; it is default RoPE
  // with sections.
  const std::string type =
      p.has("rope_type") ? p.get<std::string>("rope_type") : p.optional<std::string>("type", "default");
  if (type != "default" && type != "mrope") {
    throw_error(ErrorCode::kUnsupported, "{}: {}.rope_type '{}' is not supported (default, mrope)", source, field,
                type);
  }
  if (p.has("mrope_section")) rope.mrope_section = p.get<std::vector<int>>("mrope_section");
  rope.mrope_interleaved = p.optional<bool>("mrope_interleaved", p.optional<bool>("interleaved", false));
  return rope;
}

MoeConfig parse_moe(const Json& config, const std::string& source, int layers) {
  Fields f(config, source);
  MoeConfig moe;
  moe.sparse_layers.assign(layers, false);
  const char* experts_key = f.has("num_experts") ? "num_experts" : "num_local_experts";
  moe.num_experts = f.optional<int>(experts_key, 0);
  if (moe.num_experts < 0)
    throw_error(ErrorCode::kLoadFailed, "{}: field '{}' must not be negative", source, experts_key);
  if (moe.num_experts == 0) return moe;
  moe.num_experts_per_tok = f.positive("num_experts_per_tok");
  if (moe.num_experts_per_tok > moe.num_experts) {
    throw_error(ErrorCode::kLoadFailed, "{}: num_experts_per_tok {} is more than the {} experts", source,
                moe.num_experts_per_tok, moe.num_experts);
  }
  moe.moe_intermediate_size = f.positive("moe_intermediate_size");
  moe.norm_topk_prob = f.optional<bool>("norm_topk_prob", false);
  moe.shared_expert_intermediate_size = f.optional<int>("shared_expert_intermediate_size", 0);
  if (moe.shared_expert_intermediate_size < 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: field 'shared_expert_intermediate_size' must not be negative", source);
  }
  const int step = f.has("decoder_sparse_step") ? f.positive("decoder_sparse_step") : 1;
  const auto dense = f.optional<std::vector<int>>("mlp_only_layers", {});
  for (int layer : dense) {
    if (layer < 0 || layer >= layers) {
      throw_error(ErrorCode::kLoadFailed, "{}: mlp_only_layers names layer {}, the model has {}", source, layer,
                  layers);
    }
  }
  for (int l = 0; l < layers; ++l) {
    moe.sparse_layers[l] = (l + 1) % step == 0 && std::find(dense.begin(), dense.end(), l) == dense.end();
  }
  return moe;
}

}  // namespace

int bounded_int(const Json& config, const char* key, int fallback, int64_t low, int64_t high,
                const std::string& source) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  const bool in_range = it->is_number_unsigned() ? it->get<uint64_t>() >= static_cast<uint64_t>(low) &&
                                                       it->get<uint64_t>() <= static_cast<uint64_t>(high)
                        : it->is_number_integer() ? it->get<int64_t>() >= low && it->get<int64_t>() <= high
                                                  : false;
  if (!in_range) {
    throw_error(ErrorCode::kLoadFailed, "{}: '{}' must be an integer from {} to {}, got {}", source, key, low, high,
                it->dump());
  }
  return it->get<int>();
}

std::vector<int32_t> parse_token_ids(const Json& value, const std::string& source) {
  if (value.is_null()) return {};
  if (value.is_number_integer()) return {value.get<int32_t>()};
  if (value.is_array()) {
    std::vector<int32_t> ids;
    for (const Json& v : value) {
      if (!v.is_number_integer()) throw_error(ErrorCode::kLoadFailed, "{}: {} is not a token id", source, v.dump());
      ids.push_back(v.get<int32_t>());
    }
    return ids;
  }
  throw_error(ErrorCode::kLoadFailed, "{}: {} is neither a token id nor a list of them", source, value.dump());
}

TextModelConfig parse_text_model_config(const Json& config, const std::string& source) {
  if (!config.is_object()) throw_error(ErrorCode::kLoadFailed, "{}: not a JSON object", source);
  Fields f(config, source);
  TextModelConfig c;
  if (f.has("architectures")) {
    const auto archs = f.get<std::vector<std::string>>("architectures");
    if (!archs.empty()) c.architecture = archs[0];
  }
  c.model_type = f.optional<std::string>("model_type", "");
  c.vocab_size = f.positive("vocab_size");
  c.hidden_size = f.positive("hidden_size");
  c.num_hidden_layers = f.positive("num_hidden_layers");
  c.num_attention_heads = f.positive("num_attention_heads");
  c.num_key_value_heads = f.has("num_key_value_heads") ? f.positive("num_key_value_heads") : c.num_attention_heads;
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                source, c.num_attention_heads, c.num_key_value_heads);
  }
  if (f.has("head_dim")) {
    c.head_dim = f.positive("head_dim");
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      throw_error(ErrorCode::kLoadFailed, "{}: no head_dim and hidden_size {} is not a multiple of {} heads", source,
                  c.hidden_size, c.num_attention_heads);
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.moe = parse_moe(config, source, c.num_hidden_layers);
  const bool all_sparse = std::all_of(c.moe.sparse_layers.begin(), c.moe.sparse_layers.end(), [](bool s) { return s; });
  c.intermediate_size = all_sparse && !f.has("intermediate_size") ? 0 : f.positive("intermediate_size");
  c.rms_norm_eps = f.optional<float>("rms_norm_eps", 1e-6f);
  c.hidden_act = f.optional<std::string>("hidden_act", "silu");
  c.max_position_embeddings = f.optional<int>("max_position_embeddings", 0);
  c.tie_word_embeddings = f.optional<bool>("tie_word_embeddings", false);
  c.dtype = f.has("dtype") ? f.get<std::string>("dtype") : f.optional<std::string>("torch_dtype", "");
  c.rope = parse_rope(config, source);
  if (!c.rope.mrope_section.empty()) {
    int sum = 0;
    for (int s : c.rope.mrope_section) sum += s;
    if (c.rope.mrope_section.size() != 3 || sum > c.head_dim / 2) {
      throw_error(ErrorCode::kLoadFailed, "{}: mrope_section {} must be 3 numbers summing to at most head_dim/2 = {}",
                  source, Json(c.rope.mrope_section).dump(), c.head_dim / 2);
    }
  }

  // Sliding-window layers: v5 lists layer_types; v4 slides layers >= max_window_layers when
  // use_sliding_window is on.
  c.sliding_window.assign(c.num_hidden_layers, 0);
  const int window = f.optional<int>("sliding_window", 0);
  if (f.has("layer_types")) {
    const auto types = f.get<std::vector<std::string>>("layer_types");
    if (static_cast<int>(types.size()) != c.num_hidden_layers) {
      throw_error(ErrorCode::kLoadFailed, "{}: layer_types has {} entries for {} layers", source, types.size(),
                  c.num_hidden_layers);
    }
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      if (types[i] == "sliding_attention") {
        if (window <= 0) {
          throw_error(ErrorCode::kLoadFailed, "{}: layer {} is sliding_attention but sliding_window is not set", source,
                      i);
        }
        c.sliding_window[i] = window;
      } else if (types[i] != "full_attention") {
        throw_error(ErrorCode::kUnsupported,
                    "{}: layer_types[{}] '{}' is not supported (full_attention, "
                    "sliding_attention)",
                    source, i, types[i]);
      }
    }
  } else if (f.optional<bool>("use_sliding_window", false) && window > 0) {
    const int first = f.optional<int>("max_window_layers", c.num_hidden_layers);
    for (int i = first; i < c.num_hidden_layers; ++i) c.sliding_window[i] = window;
  }

  if (f.has("bos_token_id")) c.bos_token_id = f.get<int32_t>("bos_token_id");
  if (f.has("eos_token_id")) c.eos_token_ids = parse_token_ids(config["eos_token_id"], source + ": eos_token_id");
  return c;
}

TextModelConfig read_text_model_config(const std::filesystem::path& dir) {
  const auto path = dir / "config.json";
  return parse_text_model_config(read_json_file(path), path.string());
}

GenerationDefaults read_generation_defaults(const std::filesystem::path& dir) {
  const auto path = dir / "generation_config.json";
  GenerationDefaults d;
  if (!std::filesystem::exists(path)) return d;
  const Json json = read_json_file(path);
  const std::string source = path.string();
  Fields f(json, source);
  if (f.has("eos_token_id")) d.eos_token_ids = parse_token_ids(json["eos_token_id"], source + ": eos_token_id");
  if (f.has("do_sample")) d.do_sample = f.get<bool>("do_sample");
  if (f.has("temperature")) d.temperature = f.get<float>("temperature");
  if (f.has("top_p")) d.top_p = f.get<float>("top_p");
  if (f.has("top_k")) d.top_k = f.get<int>("top_k");
  if (f.has("max_new_tokens")) d.max_new_tokens = f.get<int>("max_new_tokens");
  return d;
}

}  // namespace omni::model
