#include "model/qwen3_tts/codec_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "base/error.h"
#include "model/safetensors.h"
#include "tensor/ops.h"

namespace omni::model::qwen3_tts {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;
namespace ops = tensor::ops;

namespace {

// A causal convolution: the stream keeps its last (k - 1) * dilation input rows.
struct Conv {
  Tensor weight;  // [C_out, C_in / groups, k]
  Tensor bias;    // [C_out]
  int dilation = 1;
  int groups = 1;
  int64_t history() const { return (weight.dim(2) - 1) * dilation; }
  int64_t in_channels() const { return weight.dim(1) * groups; }
};

// A transposed convolution trimmed on the right: the stream keeps the input rows whose outputs
// overlap the next input's ((k - 1) / stride of them).
struct TransConv {
  Tensor weight;  // [C_in, C_out, k]
  Tensor bias;
  int stride = 1;
  int64_t history() const { return (weight.dim(2) - 1) / stride; }
};

// A Linear layer, its weight viewed as a k = 1 convolution so that it goes through conv1d,
// whose rows do not depend on the chunking (ops.h).
struct Linear {
  Tensor weight;  // [N, K, 1]
  Tensor bias;    // [N] or undefined
};

struct Snake {
  Tensor alpha, beta;
};

struct TransformerLayer {
  Tensor input_norm, post_norm;
  Linear q, k, v, o, gate_up, down;
  Tensor attn_scale, mlp_scale;
};

struct ConvNeXt {
  Conv dwconv;
  Tensor norm_weight, norm_bias;
  Linear pwconv1, pwconv2;
  Tensor gamma;
};

struct ResidualUnit {
  Snake act1, act2;
  Conv conv1, conv2;
};

struct DecoderBlock {
  Snake snake;
  TransConv upsample;
  ResidualUnit units[3];
};

// What earlier frames of a stream left for the next ones. Histories are listed in the order the
// decoder meets its convolutions; a fresh stream's are zero rows (the causal left padding).
class CodecStream final : public AudioDecoderStream {
 public:
  int64_t frames() const override { return frames_; }

  int64_t frames_ = 0;
  std::vector<Tensor> histories_;
  std::vector<Tensor> keys_, values_;  // per layer: [kept, kv_heads, head_dim], kept < window
};

Tensor tensor_of(const Checkpoint& ckpt, const std::string& name, const Shape& shape) {
  return ckpt.load_f32(name, shape);
}

Conv load_conv(const Checkpoint& ckpt, const std::string& prefix, int64_t c_out, int64_t c_in, int64_t k,
               int dilation = 1, int groups = 1) {
  return Conv{tensor_of(ckpt, prefix + ".weight", {c_out, c_in / groups, k}),
              tensor_of(ckpt, prefix + ".bias", {c_out}), dilation, groups};
}

Linear load_linear(const Checkpoint& ckpt, const std::string& prefix, int64_t n, int64_t k, bool bias) {
  return Linear{tensor_of(ckpt, prefix + ".weight", {n, k}).reshape({n, k, 1}),
                bias ? tensor_of(ckpt, prefix + ".bias", {n}) : Tensor()};
}

Snake load_snake(const Checkpoint& ckpt, const std::string& prefix, int64_t channels) {
  return Snake{tensor_of(ckpt, prefix + ".alpha", {channels}), tensor_of(ckpt, prefix + ".beta", {channels})};
}

// Runs the decoder over one chunk of a stream, taking each convolution's history from the stream
// in order and leaving the chunk's tail there for the next chunk.
class ChunkRun {
 public:
  explicit ChunkRun(CodecStream& stream) : stream_(stream) {}

  Tensor conv(const Conv& c, const Tensor& x) {
    Tensor padded = with_history(c.history(), x);
    Tensor out = Tensor::empty({x.dim(0), c.weight.dim(0)}, DType::kF32);
    ops::conv1d(padded, c.weight, c.bias, c.dilation, c.groups, out);
    return out;
  }

  Tensor trans_conv(const TransConv& c, const Tensor& x) {
    const int64_t history = c.history();
    Tensor padded = with_history(history, x);
    Tensor out = Tensor::empty({x.dim(0) * c.stride, c.weight.dim(1)}, DType::kF32);
    ops::conv_transpose1d(padded, c.weight, c.bias, c.stride, static_cast<int>(history), out);
    return out;
  }

 private:
  // [history rows of the stream; x], and the last `history` rows of that become the stream's.
  Tensor with_history(int64_t history, const Tensor& x) {
    const size_t slot = next_++;
    if (stream_.histories_.size() <= slot) {
      stream_.histories_.push_back(Tensor::zeros({history, x.dim(1)}, DType::kF32));
    }
    Tensor& kept = stream_.histories_[slot];
    if (history == 0) return x;
    const int64_t rows = history + x.dim(0);
    Tensor padded = Tensor::empty({rows, x.dim(1)}, DType::kF32);
    std::memcpy(padded.raw(), kept.raw(), kept.nbytes());
    std::memcpy(padded.data<float>() + history * x.dim(1), x.raw(), x.nbytes());
    std::memcpy(kept.raw(), padded.data<float>() + (rows - history) * x.dim(1), kept.nbytes());
    return padded;
  }

  CodecStream& stream_;
  size_t next_ = 0;
};

Tensor linear(const Linear& l, const Tensor& x) {
  Tensor out = Tensor::empty({x.dim(0), l.weight.dim(0)}, DType::kF32);
  ops::conv1d(x, l.weight, l.bias, 1, 1, out);
  return out;
}

Tensor snake(const Snake& s, const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), DType::kF32);
  ops::snake_beta(x, s.alpha, s.beta, out);
  return out;
}

}  // namespace

struct CodecDecoder::Weights {
  std::vector<Tensor> codebooks;  // per quantizer: [codebook_size, codebook_dim / 2], usage folded in
  Linear first_proj, rest_proj;
  Conv pre_conv;
  Linear input_proj, output_proj;
  std::vector<TransformerLayer> layers;
  Tensor final_norm;
  std::vector<std::pair<TransConv, ConvNeXt>> upsamplers;
  Conv decoder_in;
  std::vector<DecoderBlock> blocks;
  Snake final_snake;
  Conv decoder_out;
};

CodecDecoder::CodecDecoder(CodecDecoderConfig config, std::unique_ptr<Weights> weights)
    : config_(std::move(config)), weights_(std::move(weights)) {}

CodecDecoder::~CodecDecoder() = default;

std::unique_ptr<CodecDecoder> CodecDecoder::load(const std::filesystem::path& dir) {
  CodecDecoderConfig c = read_codec_decoder_config(dir);
  const Checkpoint ckpt = Checkpoint::open(dir);
  auto w = std::make_unique<Weights>();
  const int64_t half = c.codebook_dim / 2, vocab = c.codebook_size;
  const std::string q = "decoder.quantizer.";
  for (int i = 0; i < c.num_quantizers; ++i) {
    const std::string p = i == 0 ? q + "rvq_first.vq.layers.0._codebook."
                                 : q + "rvq_rest.vq.layers." + std::to_string(i - 1) + "._codebook.";
    Tensor table = tensor_of(ckpt, p + "embedding_sum", {vocab, half});
    const Tensor usage = tensor_of(ckpt, p + "cluster_usage", {vocab});
    float* t = table.data<float>();
    for (int64_t e = 0; e < vocab; ++e) {
      const float u = std::max(usage.data<float>()[e], 1e-5f);
      for (int64_t d = 0; d < half; ++d) t[e * half + d] /= u;
    }
    w->codebooks.push_back(std::move(table));
  }
  auto proj = [&](const std::string& group) {
    return Linear{tensor_of(ckpt, q + group + ".output_proj.weight", {c.codebook_dim, half, 1}), Tensor()};
  };
  w->first_proj = proj("rvq_first");
  w->rest_proj = proj("rvq_rest");
  w->pre_conv = load_conv(ckpt, "decoder.pre_conv.conv", c.latent_dim, c.codebook_dim, 3);

  const std::string t = "decoder.pre_transformer.";
  const int64_t h = c.hidden_size, qd = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kvd = int64_t{c.num_key_value_heads} * c.head_dim, inter = c.intermediate_size;
  w->input_proj = load_linear(ckpt, t + "input_proj", h, c.latent_dim, true);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = t + "layers." + std::to_string(i) + ".";
    TransformerLayer l;
    l.input_norm = tensor_of(ckpt, p + "input_layernorm.weight", {h});
    l.post_norm = tensor_of(ckpt, p + "post_attention_layernorm.weight", {h});
    l.q = load_linear(ckpt, p + "self_attn.q_proj", qd, h, false);
    l.k = load_linear(ckpt, p + "self_attn.k_proj", kvd, h, false);
    l.v = load_linear(ckpt, p + "self_attn.v_proj", kvd, h, false);
    l.o = load_linear(ckpt, p + "self_attn.o_proj", h, qd, false);
    // gate then up in one product, the layout silu_and_mul takes.
    Tensor gate_up = Tensor::empty({2 * inter, h, 1}, DType::kF32);
    ckpt.load_f32_into(p + "mlp.gate_proj.weight", {inter, h}, gate_up.data<float>());
    ckpt.load_f32_into(p + "mlp.up_proj.weight", {inter, h}, gate_up.data<float>() + inter * h);
    l.gate_up = Linear{gate_up, Tensor()};
    l.down = load_linear(ckpt, p + "mlp.down_proj", h, inter, false);
    l.attn_scale = tensor_of(ckpt, p + "self_attn_layer_scale.scale", {h});
    l.mlp_scale = tensor_of(ckpt, p + "mlp_layer_scale.scale", {h});
    w->layers.push_back(std::move(l));
  }
  w->final_norm = tensor_of(ckpt, t + "norm.weight", {h});
  w->output_proj = load_linear(ckpt, t + "output_proj", c.latent_dim, h, true);

  const int64_t lat = c.latent_dim;
  for (size_t i = 0; i < c.upsampling_ratios.size(); ++i) {
    const std::string p = "decoder.upsample." + std::to_string(i) + ".";
    const int r = c.upsampling_ratios[i];
    TransConv up{tensor_of(ckpt, p + "0.conv.weight", {lat, lat, r}), tensor_of(ckpt, p + "0.conv.bias", {lat}), r};
    ConvNeXt cn;
    cn.dwconv = load_conv(ckpt, p + "1.dwconv.conv", lat, lat, 7, 1, static_cast<int>(lat));
    cn.norm_weight = tensor_of(ckpt, p + "1.norm.weight", {lat});
    cn.norm_bias = tensor_of(ckpt, p + "1.norm.bias", {lat});
    cn.pwconv1 = load_linear(ckpt, p + "1.pwconv1", 4 * lat, lat, true);
    cn.pwconv2 = load_linear(ckpt, p + "1.pwconv2", lat, 4 * lat, true);
    cn.gamma = tensor_of(ckpt, p + "1.gamma", {lat});
    w->upsamplers.emplace_back(std::move(up), std::move(cn));
  }
  w->decoder_in = load_conv(ckpt, "decoder.decoder.0.conv", c.decoder_dim, lat, 7);
  for (size_t i = 0; i < c.upsample_rates.size(); ++i) {
    const std::string p = "decoder.decoder." + std::to_string(i + 1) + ".block.";
    const int r = c.upsample_rates[i];
    const int64_t in = c.decoder_dim >> i, out = c.block_channels(static_cast<int>(i));
    DecoderBlock b;
    b.snake = load_snake(ckpt, p + "0", in);
    b.upsample =
        TransConv{tensor_of(ckpt, p + "1.conv.weight", {in, out, 2 * r}), tensor_of(ckpt, p + "1.conv.bias", {out}), r};
    const int dilations[3] = {1, 3, 9};
    for (int u = 0; u < 3; ++u) {
      const std::string pu = p + std::to_string(u + 2) + ".";
      b.units[u].act1 = load_snake(ckpt, pu + "act1", out);
      b.units[u].conv1 = load_conv(ckpt, pu + "conv1.conv", out, out, 7, dilations[u]);
      b.units[u].act2 = load_snake(ckpt, pu + "act2", out);
      b.units[u].conv2 = load_conv(ckpt, pu + "conv2.conv", out, out, 1);
    }
    w->blocks.push_back(std::move(b));
  }
  const int64_t last = c.block_channels(static_cast<int>(c.upsample_rates.size()) - 1);
  const std::string tail = "decoder.decoder." + std::to_string(c.upsample_rates.size() + 1);
  w->final_snake = load_snake(ckpt, tail, last);
  w->decoder_out =
      load_conv(ckpt, "decoder.decoder." + std::to_string(c.upsample_rates.size() + 2) + ".conv", 1, last, 7);
  return std::unique_ptr<CodecDecoder>(new CodecDecoder(std::move(c), std::move(w)));
}

std::unique_ptr<AudioDecoderStream> CodecDecoder::open_stream() const { return std::make_unique<CodecStream>(); }

std::vector<float> CodecDecoder::decode(std::span<const int32_t> codes) const {
  std::vector<float> audio;
  CodecStream stream;
  decode(stream, codes, audio);
  return audio;
}

void CodecDecoder::decode(AudioDecoderStream& base, std::span<const int32_t> codes, std::vector<float>& audio) const {
  auto* stream = dynamic_cast<CodecStream*>(&base);
  if (stream == nullptr) {
    throw_error(ErrorCode::kInvalidArgument, "qwen3_tts codec decoder: the stream was not opened by this decoder");
  }
  const CodecDecoderConfig& c = config_;
  const int groups = c.num_quantizers;
  if (codes.size() % static_cast<size_t>(groups) != 0) {
    throw_error(ErrorCode::kInvalidArgument, "qwen3_tts codec decoder: {} codes are not whole frames of {}",
                codes.size(), groups);
  }
  const int64_t frames = static_cast<int64_t>(codes.size()) / groups;
  if (frames == 0) return;
  // Codes per codebook, clamped at 0 like the reference's padding; checked before any state moves.
  std::vector<Tensor> ids(static_cast<size_t>(groups));
  for (int g = 0; g < groups; ++g) ids[g] = Tensor::empty({frames}, DType::kI32);
  for (int64_t f = 0; f < frames; ++f) {
    for (int g = 0; g < groups; ++g) {
      const int32_t code = codes[static_cast<size_t>(f * groups + g)];
      if (code >= c.codebook_size) {
        throw_error(ErrorCode::kInvalidArgument,
                    "qwen3_tts codec decoder: code {} of codebook {} in frame {} is outside [0, {})", code, g,
                    stream->frames_ + f, c.codebook_size);
      }
      ids[g].data<int32_t>()[f] = std::max(code, 0);
    }
  }
  const Weights& w = *weights_;
  ChunkRun run(*stream);

  // RVQ: the first codebook and the sum of the others, each through its own projection.
  const int64_t half = c.codebook_dim / 2;
  Tensor first = Tensor::empty({frames, half}, DType::kF32), rest = Tensor::zeros({frames, half}, DType::kF32);
  Tensor row = Tensor::empty({frames, half}, DType::kF32);
  ops::embedding(w.codebooks[0], ids[0], first);
  for (int g = 1; g < groups; ++g) {
    ops::embedding(w.codebooks[g], ids[g], row);
    ops::add(rest, row, rest);
  }
  Tensor x = linear(w.first_proj, first);
  ops::add(x, linear(w.rest_proj, rest), x);
  x = run.conv(w.pre_conv, x);

  // Transformer over the chunk's frames, attending to the kept keys of the last window - 1 frames.
  Tensor hidden = linear(w.input_proj, x);
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads, hd = c.head_dim;
  Tensor positions = Tensor::empty({frames}, DType::kI32);
  for (int64_t f = 0; f < frames; ++f) positions.data<int32_t>()[f] = static_cast<int32_t>(stream->frames_ + f);
  ops::RopeSpec rope;
  rope.theta = c.rope_theta;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (stream->keys_.empty()) {
    for (size_t l = 0; l < w.layers.size(); ++l) {
      stream->keys_.push_back(Tensor::zeros({0, kv_heads, hd}, DType::kF32));
      stream->values_.push_back(Tensor::zeros({0, kv_heads, hd}, DType::kF32));
    }
  }
  Tensor normed = Tensor::empty(hidden.shape(), DType::kF32);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const TransformerLayer& layer = w.layers[l];
    ops::rms_norm(hidden, layer.input_norm, c.rms_norm_eps, normed);
    Tensor q = linear(layer.q, normed).reshape({frames, heads, hd});
    Tensor k = linear(layer.k, normed).reshape({frames, kv_heads, hd});
    Tensor v = linear(layer.v, normed).reshape({frames, kv_heads, hd});
    ops::rotary_embedding(q, positions, rope);
    ops::rotary_embedding(k, positions, rope);
    // The kept keys and the chunk's in one block: positions shift by the same amount for every
    // key, so the window mask and the rotated keys are those of the whole sequence.
    Tensor& kept_k = stream->keys_[l];
    Tensor& kept_v = stream->values_[l];
    const int64_t kept = kept_k.dim(0), total = kept + frames;
    Tensor k_cache = Tensor::empty({1, total, kv_heads, hd}, DType::kF32);
    Tensor v_cache = Tensor::empty({1, total, kv_heads, hd}, DType::kF32);
    if (kept > 0) {
      std::memcpy(k_cache.raw(), kept_k.raw(), kept_k.nbytes());
      std::memcpy(v_cache.raw(), kept_v.raw(), kept_v.nbytes());
    }
    std::memcpy(static_cast<char*>(k_cache.raw()) + kept_k.nbytes(), k.raw(), k.nbytes());
    std::memcpy(static_cast<char*>(v_cache.raw()) + kept_v.nbytes(), v.raw(), v.nbytes());
    const std::vector<int32_t> block_table = {0};
    const ops::PagedSequence seq{0, static_cast<int32_t>(frames), static_cast<int32_t>(kept), block_table};
    Tensor attn = Tensor::empty({frames, heads, hd}, DType::kF32);
    ops::paged_attention(q, k_cache, v_cache, std::span(&seq, 1), scale, c.sliding_window, attn);
    const int64_t keep = std::min<int64_t>(total, c.sliding_window - 1);
    kept_k = k_cache.reshape({total, kv_heads, hd}).slice_rows(total - keep, total).to(tensor::Device::cpu());
    kept_v = v_cache.reshape({total, kv_heads, hd}).slice_rows(total - keep, total).to(tensor::Device::cpu());
    ops::add_scaled(hidden, linear(layer.o, attn.reshape({frames, heads * hd})), layer.attn_scale, hidden);

    ops::rms_norm(hidden, layer.post_norm, c.rms_norm_eps, normed);
    Tensor gate_up = linear(layer.gate_up, normed);
    Tensor act = Tensor::empty({frames, c.intermediate_size}, DType::kF32);
    ops::silu_and_mul(gate_up, act);
    ops::add_scaled(hidden, linear(layer.down, act), layer.mlp_scale, hidden);
  }
  ops::rms_norm(hidden, w.final_norm, c.rms_norm_eps, normed);
  x = linear(w.output_proj, normed);

  for (const auto& [up, cn] : w.upsamplers) {
    x = run.trans_conv(up, x);
    Tensor y = run.conv(cn.dwconv, x);
    ops::layer_norm(y, cn.norm_weight, cn.norm_bias, 1e-6f, y);
    Tensor wide = linear(cn.pwconv1, y);
    ops::gelu(wide, ops::GeluApproximation::kNone, wide);
    ops::add_scaled(x, linear(cn.pwconv2, wide), cn.gamma, x);
  }
  x = run.conv(w.decoder_in, x);
  for (const DecoderBlock& b : w.blocks) {
    x = run.trans_conv(b.upsample, snake(b.snake, x));
    for (const ResidualUnit& u : b.units) {
      Tensor y = run.conv(u.conv1, snake(u.act1, x));
      y = run.conv(u.conv2, snake(u.act2, y));
      ops::add(x, y, x);
    }
  }
  x = run.conv(w.decoder_out, snake(w.final_snake, x));
  ops::clamp(x, -1.0f, 1.0f, x);
  audio.insert(audio.end(), x.data<float>(), x.data<float>() + x.numel());
  stream->frames_ += frames;
}

}  // namespace omni::model::qwen3_tts
