#include "model/qwen2_5_omni/token2wav_config.h"

#include <algorithm>

#include "base/error.h"
#include "base/json_dump.h"
#include "base/json_get.h"

namespace omni::model::qwen2_5_omni {

namespace {

// Reads the fields of one sub-config, naming `section.field` and the file in errors.
class Fields {
 public:
  Fields(const Json& object, std::string file, std::string section)
      : object_(object), file_(std::move(file)), section_(std::move(section)) {}

  void number(const char* key, int& out) const {
    const Json* f = find(key);
    if (f == nullptr) return;
    try {
      if (f->is_number()) {
        out = get_exact<int>(*f);
        return;
      }
    } catch (const Json::exception&) {
    }
    wrong_type(key, *f, "an integer");
  }
  void real(const char* key, float& out) const {
    const Json* f = find(key);
    if (f == nullptr) return;
    if (!f->is_number()) wrong_type(key, *f, "a number");
    out = f->get<float>();
  }
  void list(const char* key, std::vector<int>& out) const {
    const Json* f = find(key);
    if (f == nullptr) return;
    out = int_list(key, *f);
  }
  void nested_list(const char* key, std::vector<std::vector<int>>& out) const {
    const Json* f = find(key);
    if (f == nullptr) return;
    if (!f->is_array()) wrong_type(key, *f, "a list of lists of integers");
    out.clear();
    for (const Json& item : *f) out.push_back(int_list(key, item));
  }
  const Json* find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw_error(ErrorCode::kLoadFailed, "{}: token2wav_config.{}: {}", file_, section_, what);
  }

 private:
  std::vector<int> int_list(const char* key, const Json& f) const {
    std::vector<int> values;
    if (f.is_array()) {
      try {
        for (const Json& v : f) {
          if (!v.is_number()) break;
          values.push_back(get_exact<int>(v));
        }
        if (values.size() == f.size()) return values;
      } catch (const Json::exception&) {
      }
    }
    wrong_type(key, f, "a list of integers");
  }
  [[noreturn]] void wrong_type(const char* key, const Json& f, const char* expected) const {
    throw_error(ErrorCode::kLoadFailed, "{}: field 'token2wav_config.{}.{}' should be {} (got {})", file_, section_,
                key, expected, dump_for_message(f));
  }

  const Json& object_;
  std::string file_, section_;
};

const Json& section(const Json& token2wav, const char* name, const std::string& file) {
  const auto it = token2wav.find(name);
  if (it == token2wav.end() || !it->is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing object 'token2wav_config.{}'", file, name);
  }
  return *it;
}

DitConfig parse_dit(const Json& object, const std::string& file) {
  DitConfig c;
  const Fields f(object, file, "dit_config");
  f.number("hidden_size", c.hidden_size);
  f.number("num_hidden_layers", c.num_hidden_layers);
  f.number("num_attention_heads", c.num_attention_heads);
  f.number("head_dim", c.head_dim);
  f.number("ff_mult", c.ff_mult);
  f.number("emb_dim", c.emb_dim);
  f.number("num_embeds", c.num_embeds);
  f.number("repeats", c.repeats);
  f.number("mel_dim", c.mel_dim);
  f.number("block_size", c.block_size);
  f.list("look_ahead_layers", c.look_ahead_layers);
  f.list("look_backward_layers", c.look_backward_layers);
  // transformers 5 nests the RoPE base in rope_parameters; older config.json files (the released
  // one) have rope_theta at the top of dit_config.
  f.real("rope_theta", c.rope_theta);
  if (const Json* rope = f.find("rope_parameters"); rope != nullptr) {
    if (!rope->is_object()) f.fail("rope_parameters should be an object");
    Fields(*rope, file, "dit_config.rope_parameters").real("rope_theta", c.rope_theta);
  }
  f.number("enc_emb_dim", c.enc_emb_dim);
  f.number("enc_dim", c.enc_dim);
  f.list("enc_channels", c.enc_channels);
  f.list("enc_kernel_sizes", c.enc_kernel_sizes);
  f.list("enc_dilations", c.enc_dilations);
  f.number("enc_attention_channels", c.enc_attention_channels);
  f.number("enc_res2net_scale", c.enc_res2net_scale);
  f.number("enc_se_channels", c.enc_se_channels);

  for (const int v : {c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.head_dim, c.ff_mult, c.emb_dim,
                      c.num_embeds, c.repeats, c.mel_dim, c.block_size, c.enc_emb_dim, c.enc_dim,
                      c.enc_attention_channels, c.enc_res2net_scale, c.enc_se_channels}) {
    if (v <= 0) f.fail("sizes must be positive");
  }
  if (c.head_dim % 2 != 0) f.fail(fmt::format("head_dim {} must be even (RoPE rotates pairs)", c.head_dim));
  if (!(c.rope_theta > 0.0f)) f.fail("rope_theta must be positive");
  const size_t n = c.enc_channels.size();
  if (n < 2 || c.enc_kernel_sizes.size() != n || c.enc_dilations.size() != n) {
    f.fail(fmt::format("enc_channels ({}), enc_kernel_sizes ({}) and enc_dilations ({}) need one equal length >= 2", n,
                       c.enc_kernel_sizes.size(), c.enc_dilations.size()));
  }
  for (size_t i = 0; i < n; ++i) {
    if (c.enc_channels[i] <= 0 || c.enc_kernel_sizes[i] <= 0 || c.enc_dilations[i] <= 0) {
      f.fail("enc_channels, enc_kernel_sizes and enc_dilations must be positive");
    }
    if (i > 0 && i + 1 < n && c.enc_channels[i] % c.enc_res2net_scale != 0) {
      f.fail(fmt::format("enc_channels[{}] = {} is not a multiple of enc_res2net_scale {}", i, c.enc_channels[i],
                         c.enc_res2net_scale));
    }
  }
  for (const auto* layers : {&c.look_ahead_layers, &c.look_backward_layers}) {
    for (const int l : *layers) {
      if (l < 0 || l >= c.num_hidden_layers) {
        f.fail(fmt::format("look-ahead/look-backward layer {} is outside the {} layers", l, c.num_hidden_layers));
      }
    }
  }
  return c;
}

BigVganConfig parse_bigvgan(const Json& object, const std::string& file) {
  BigVganConfig c;
  const Fields f(object, file, "bigvgan_config");
  f.number("mel_dim", c.mel_dim);
  f.number("upsample_initial_channel", c.upsample_initial_channel);
  f.list("upsample_rates", c.upsample_rates);
  f.list("upsample_kernel_sizes", c.upsample_kernel_sizes);
  f.list("resblock_kernel_sizes", c.resblock_kernel_sizes);
  f.nested_list("resblock_dilation_sizes", c.resblock_dilation_sizes);
  if (c.mel_dim <= 0) f.fail("mel_dim must be positive");
  const size_t stages = c.upsample_rates.size();
  if (stages == 0 || c.upsample_kernel_sizes.size() != stages) {
    f.fail(fmt::format("upsample_rates ({}) and upsample_kernel_sizes ({}) need one equal, non-zero length", stages,
                       c.upsample_kernel_sizes.size()));
  }
  for (size_t i = 0; i < stages; ++i) {
    if (c.upsample_rates[i] <= 0 || c.upsample_kernel_sizes[i] < c.upsample_rates[i]) {
      f.fail(fmt::format("upsampling stage {}: rate {} and kernel {} (need 0 < rate <= kernel)", i, c.upsample_rates[i],
                         c.upsample_kernel_sizes[i]));
    }
  }
  if (c.upsample_initial_channel <= 0 || c.upsample_initial_channel % (1 << stages) != 0) {
    f.fail(fmt::format("upsample_initial_channel {} is not a positive multiple of 2^{}", c.upsample_initial_channel,
                       stages));
  }
  if (c.resblock_kernel_sizes.empty() || c.resblock_dilation_sizes.size() != c.resblock_kernel_sizes.size()) {
    f.fail(fmt::format("resblock_kernel_sizes ({}) and resblock_dilation_sizes ({}) need one equal, non-zero length",
                       c.resblock_kernel_sizes.size(), c.resblock_dilation_sizes.size()));
  }
  for (size_t i = 0; i < c.resblock_kernel_sizes.size(); ++i) {
    const std::vector<int>& d = c.resblock_dilation_sizes[i];
    // AMPBlock reads exactly three dilations.
    if (c.resblock_kernel_sizes[i] <= 0 || d.size() != 3 || *std::min_element(d.begin(), d.end()) <= 0) {
      f.fail(fmt::format("resblock {}: a positive kernel and three positive dilations are needed", i));
    }
  }
  return c;
}

}  // namespace

int DitConfig::look_ahead(int layer) const {
  return std::count(look_ahead_layers.begin(), look_ahead_layers.end(), layer) > 0 ? 1 : 0;
}

int DitConfig::look_backward(int layer) const {
  return std::count(look_backward_layers.begin(), look_backward_layers.end(), layer) > 0 ? 1 : 0;
}

int BigVganConfig::hop() const {
  int hop = 1;
  for (const int r : upsample_rates) hop *= r;
  return hop;
}

int BigVganConfig::stage_channels(int stage) const { return upsample_initial_channel >> (stage + 1); }

Token2WavConfig parse_token2wav_config(const Json& config, const std::string& file) {
  const auto it = config.find("token2wav_config");
  if (it == config.end() || !it->is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing object 'token2wav_config'", file);
  }
  Token2WavConfig c;
  c.dit = parse_dit(section(*it, "dit_config", file), file);
  c.bigvgan = parse_bigvgan(section(*it, "bigvgan_config", file), file);
  if (c.dit.mel_dim != c.bigvgan.mel_dim) {
    throw_error(ErrorCode::kLoadFailed,
                "{}: token2wav_config: dit_config.mel_dim {} differs from bigvgan_config.mel_dim {}", file,
                c.dit.mel_dim, c.bigvgan.mel_dim);
  }
  return c;
}

}  // namespace omni::model::qwen2_5_omni
