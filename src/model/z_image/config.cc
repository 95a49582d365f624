#include "model/z_image/config.h"

#include "base/error.h"
#include "base/json.h"

namespace omni::model::z_image {
namespace {

// A config file's fields, with errors naming the file and the field.
class ConfigFile {
 public:
  explicit ConfigFile(std::filesystem::path path) : path_(std::move(path)) {
    if (!std::filesystem::exists(path_)) throw_error(ErrorCode::kLoadFailed, "{}: missing", path_.string());
    json_ = read_json_file(path_);
  }

  template <typename T>
  T get(const char* key, T fallback) const {
    if (!json_.contains(key) || json_[key].is_null()) return fallback;
    try {
      return json_[key].get<T>();
    } catch (const Json::exception&) {
      throw_error(ErrorCode::kLoadFailed, "{}: field '{}' has the wrong type (got {})", path_.string(), key,
                  json_[key].dump());
    }
  }

  int positive(const char* key, int fallback) const {
    const int v = get<int>(key, fallback);
    if (v <= 0) throw_error(ErrorCode::kLoadFailed, "{}: field '{}' must be positive, got {}", path_.string(), key, v);
    return v;
  }

  [[noreturn]] void fail(ErrorCode code, const std::string& what) const {
    throw_error(code, "{}: {}", path_.string(), what);
  }

 private:
  std::filesystem::path path_;
  Json json_;
};

TransformerConfig read_transformer(const std::filesystem::path& dir) {
  const ConfigFile f(dir / "transformer" / "config.json");
  TransformerConfig c;
  c.in_channels = f.positive("in_channels", c.in_channels);
  c.dim = f.positive("dim", c.dim);
  c.n_layers = f.positive("n_layers", c.n_layers);
  c.n_refiner_layers = f.get<int>("n_refiner_layers", c.n_refiner_layers);
  c.n_heads = f.positive("n_heads", c.n_heads);
  c.norm_eps = f.get<float>("norm_eps", c.norm_eps);
  c.qk_norm = f.get<bool>("qk_norm", c.qk_norm);
  c.cap_feat_dim = f.positive("cap_feat_dim", c.cap_feat_dim);
  c.rope_theta = f.get<float>("rope_theta", c.rope_theta);
  c.t_scale = f.get<float>("t_scale", c.t_scale);
  const auto axes_dims = f.get<std::vector<int>>("axes_dims", {c.axes_dims.begin(), c.axes_dims.end()});
  const auto axes_lens = f.get<std::vector<int>>("axes_lens", {c.axes_lens.begin(), c.axes_lens.end()});
  if (axes_dims.size() != 3 || axes_lens.size() != 3)
    f.fail(ErrorCode::kLoadFailed, "axes_dims and axes_lens need 3 axes");
  int sum = 0;
  for (int i = 0; i < 3; ++i) {
    if (axes_dims[i] <= 0 || axes_dims[i] % 2 != 0 || axes_lens[i] <= 0) {
      f.fail(ErrorCode::kLoadFailed, "axes_dims must be even and positive, axes_lens positive");
    }
    c.axes_dims[i] = axes_dims[i];
    c.axes_lens[i] = axes_lens[i];
    sum += axes_dims[i];
  }
  if (c.dim % c.n_heads != 0 || sum != c.head_dim()) {
    f.fail(ErrorCode::kLoadFailed,
           fmt::format("dim {} / n_heads {} must be the sum of axes_dims ({})", c.dim, c.n_heads, sum));
  }
  const auto patch = f.get<std::vector<int>>("all_patch_size", {2});
  const auto f_patch = f.get<std::vector<int>>("all_f_patch_size", {1});
  if (patch.size() != 1 || f_patch.size() != 1 || f_patch[0] != 1 || patch[0] <= 0) {
    f.fail(ErrorCode::kUnsupported, "only one patch size with all_f_patch_size [1] is supported");
  }
  c.patch_size = patch[0];
  if (!f.get<Json>("siglip_feat_dim", Json()).is_null()) {
    f.fail(ErrorCode::kUnsupported, "siglip_feat_dim (the Z-Image-Omni branch) is not supported");
  }
  return c;
}

VaeDecoderConfig read_vae(const std::filesystem::path& dir) {
  const ConfigFile f(dir / "vae" / "config.json");
  VaeDecoderConfig c;
  c.latent_channels = f.positive("latent_channels", 4);
  c.out_channels = f.positive("out_channels", 3);
  c.block_out_channels = f.get<std::vector<int>>("block_out_channels", {64});
  c.layers_per_block = f.positive("layers_per_block", 1);
  c.norm_num_groups = f.positive("norm_num_groups", 32);
  c.scaling_factor = f.get<float>("scaling_factor", 0.18215f);
  c.shift_factor = f.get<float>("shift_factor", 0.0f);
  c.use_post_quant_conv = f.get<bool>("use_post_quant_conv", true);
  c.mid_block_add_attention = f.get<bool>("mid_block_add_attention", true);
  const Json sample_size = f.get<Json>("sample_size", Json(c.sample_size));
  if (sample_size.is_number_integer() && sample_size.get<int>() > 0) {
    c.sample_size = sample_size.get<int>();
  } else if (sample_size.is_array()) {
    c.sample_size = 0;
  } else {
    f.fail(ErrorCode::kLoadFailed, "field 'sample_size' must be a positive integer, got " + sample_size.dump());
  }
  if (c.block_out_channels.empty()) f.fail(ErrorCode::kLoadFailed, "block_out_channels is empty");
  for (int ch : c.block_out_channels) {
    if (ch <= 0 || ch % c.norm_num_groups != 0) {
      f.fail(ErrorCode::kLoadFailed,
             fmt::format("block_out_channels {} must be multiples of norm_num_groups {}", ch, c.norm_num_groups));
    }
  }
  for (const auto& type : f.get<std::vector<std::string>>("up_block_types", {"UpDecoderBlock2D"})) {
    if (type != "UpDecoderBlock2D") f.fail(ErrorCode::kUnsupported, "up block type " + type + " is not supported");
  }
  if (f.get<std::string>("act_fn", "silu") != "silu") f.fail(ErrorCode::kUnsupported, "act_fn must be silu");
  if (c.scaling_factor == 0.0f) f.fail(ErrorCode::kLoadFailed, "scaling_factor is 0");
  return c;
}

SchedulerConfig read_scheduler(const std::filesystem::path& dir) {
  const ConfigFile f(dir / "scheduler" / "scheduler_config.json");
  SchedulerConfig c;
  const auto cls = f.get<std::string>("_class_name", "FlowMatchEulerDiscreteScheduler");
  if (cls != "FlowMatchEulerDiscreteScheduler")
    f.fail(ErrorCode::kUnsupported, "scheduler " + cls + " is not supported");
  c.num_train_timesteps = f.positive("num_train_timesteps", 1000);
  c.shift = f.get<float>("shift", 1.0f);
  for (const char* unsupported : {"use_dynamic_shifting", "invert_sigmas", "use_karras_sigmas",
                                  "use_exponential_sigmas", "use_beta_sigmas", "stochastic_sampling"}) {
    if (f.get<bool>(unsupported, false))
      f.fail(ErrorCode::kUnsupported, std::string(unsupported) + " is not supported");
  }
  if (!f.get<Json>("shift_terminal", Json()).is_null())
    f.fail(ErrorCode::kUnsupported, "shift_terminal is not supported");
  if (c.shift <= 0.0f) f.fail(ErrorCode::kLoadFailed, "shift must be positive");
  return c;
}

}  // namespace

ZImageConfig read_config(const std::filesystem::path& dir) {
  ZImageConfig c;
  const ConfigFile index(dir / "model_index.json");
  c.pipeline_class = index.get<std::string>("_class_name", "");
  c.transformer = read_transformer(dir);
  c.vae = read_vae(dir);
  c.scheduler = read_scheduler(dir);
  if (c.vae.latent_channels != c.transformer.in_channels) {
    throw_error(ErrorCode::kLoadFailed, "{}: the VAE has {} latent channels but the transformer takes {}", dir.string(),
                c.vae.latent_channels, c.transformer.in_channels);
  }
  return c;
}

}  // namespace omni::model::z_image
