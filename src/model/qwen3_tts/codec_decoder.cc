#include "model/qwen3_tts/codec_decoder.h"

#include <algorithm>
#include <cmath>
#include <numeric>
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

// What earlier frames of a stream left for the next ones, on the decoder's device. Histories are
// listed in the order the decoder meets its causal layers (those with history), zero rows for a
// fresh stream (the causal left padding). The attention layers keep their keys and values there
// too, the last sliding_window - 1 frames' [window - 1, kv_heads * head_dim], of which the last
// min(frames, window - 1) rows are real.
class CodecStream final : public AudioDecoderStream {
 public:
  int64_t frames() const override { return frames_; }

  const void* owner_ = nullptr;  // the decoder that opened it
  int64_t frames_ = 0;
  std::vector<Tensor> histories_;
  // Per left-trimmed transposed convolution, in the decoder's order: its rows still to drop.
  std::vector<int64_t> trims_;
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

// Runs the decoder over one batch: the streams' new rows packed one after another (rows_[s] of
// stream s at the current rate). Each causal layer takes its history from every stream, in the
// order the decoder meets them, and leaves the batch's tail there for the next chunk.
class BatchRun {
 public:
  BatchRun(std::span<CodecStream* const> streams, std::vector<int64_t> rows, tensor::Device device)
      : streams_(streams), rows_(std::move(rows)), device_(device) {}

  const std::vector<int64_t>& rows() const { return rows_; }

  Tensor conv(const Conv& c, const Tensor& x) {
    Tensor out = Tensor::empty({x.dim(0), c.weight.dim(0)}, DType::kF32, device_);
    const int64_t history = c.history();
    if (history == 0) {
      ops::conv1d(x, c.weight, c.bias, c.dilation, c.groups, out);
    } else {
      const std::vector<int64_t> segments = with_history(history, x);
      ops::conv1d(padded_, c.weight, c.bias, c.dilation, c.groups, out, segments);
    }
    return out;
  }

  // trim_left: the layer's output starts k - stride rows later (the rows a stream has not
  // dropped yet are dropped from its new ones).
  Tensor trans_conv(const TransConv& c, const Tensor& x, bool trim_left = false) {
    Tensor out = Tensor::empty({x.dim(0) * c.stride, c.weight.dim(1)}, DType::kF32, device_);
    const int64_t history = c.history();
    if (history == 0) {
      ops::conv_transpose1d(x, c.weight, c.bias, c.stride, 0, out, rows_);
    } else {
      const std::vector<int64_t> segments = with_history(history, x);
      ops::conv_transpose1d(padded_, c.weight, c.bias, c.stride, static_cast<int>(history), out, segments);
    }
    for (int64_t& r : rows_) r *= c.stride;
    const int64_t trim = c.weight.dim(2) - c.stride;
    return trim_left && trim > 0 ? drop_leading(out, trim) : out;
  }

  // [kept rows; new rows] of every stream for the next history slot of `history` rows (the
  // attention layers' keys and values). Returns the packed tensor.
  Tensor kept_and_new(const Tensor& x, int64_t history) {
    with_history(history, x);
    return std::move(padded_);
  }

 private:
  // Fills padded_ with [history rows; x rows] per stream and advances the streams' histories;
  // returns the segments (rows_[s] + history).
  std::vector<int64_t> with_history(int64_t history, const Tensor& x) {
    const size_t slot = next_++;
    std::vector<Tensor> histories;
    histories.reserve(streams_.size());
    for (CodecStream* stream : streams_) {
      if (stream->histories_.size() <= slot) {
        stream->histories_.push_back(Tensor::zeros({history, x.dim(1)}, DType::kF32, device_));
      }
      histories.push_back(stream->histories_[slot]);
    }
    padded_ =
        Tensor::empty({x.dim(0) + history * static_cast<int64_t>(streams_.size()), x.dim(1)}, DType::kF32, device_);
    ops::prepend_history(x, rows_, histories, padded_);
    std::vector<int64_t> segments(rows_);
    for (int64_t& s : segments) s += history;
    return segments;
  }

  // Drops from each stream's rows of x those of the next trimmed layer's first `trim` it has not
  // dropped yet.
  Tensor drop_leading(const Tensor& x, int64_t trim) {
    const size_t slot = next_trim_++;
    std::vector<int64_t> drops(streams_.size());
    int64_t kept_rows = 0;
    for (size_t s = 0; s < streams_.size(); ++s) {
      std::vector<int64_t>& trims = streams_[s]->trims_;
      if (trims.size() <= slot) trims.push_back(trim);
      drops[s] = std::min(trims[slot], rows_[s]);
      trims[slot] -= drops[s];
      kept_rows += rows_[s] - drops[s];
    }
    if (kept_rows == x.dim(0)) return x;
    Tensor kept = Tensor::empty({kept_rows, x.dim(1)}, DType::kF32, device_);
    int64_t from = 0, to = 0;
    for (size_t s = 0; s < streams_.size(); ++s) {
      const int64_t n = rows_[s] - drops[s];
      if (n > 0) {
        Tensor into = kept.slice_rows(to, to + n);
        ops::copy_columns(x.slice_rows(from + drops[s], from + rows_[s]), 0, into, 0, x.dim(1));
      }
      from += rows_[s];
      to += n;
      rows_[s] = n;
    }
    return kept;
  }

  std::span<CodecStream* const> streams_;
  std::vector<int64_t> rows_;
  tensor::Device device_;
  size_t next_ = 0;
  size_t next_trim_ = 0;
  Tensor padded_;
};

Tensor linear(const Linear& l, const Tensor& x) {
  Tensor out = Tensor::empty({x.dim(0), l.weight.dim(0)}, DType::kF32, x.device());
  ops::conv1d(x, l.weight, l.bias, 1, 1, out);
  return out;
}

Tensor snake(const Snake& s, const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), DType::kF32, x.device());
  ops::snake_beta(x, s.alpha, s.beta, out);
  return out;
}

}  // namespace

struct CodecDecoder::Weights {
  std::vector<Tensor> codebooks;  // per quantizer: [codebook_size, codebook_dim / 2], usage folded in
  Tensor code_embedding;          // without residual VQ: [num_quantizers * codebook_size, hidden_size]
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

  // Every tensor to `device` (loaded and prepared on the CPU first).
  void move_to(tensor::Device device) {
    auto move = [device](Tensor& t) {
      if (t.defined()) t = t.to(device);
    };
    auto conv = [&](Conv& c) { move(c.weight), move(c.bias); };
    auto lin = [&](Linear& l) { move(l.weight), move(l.bias); };
    auto act = [&](Snake& s) { move(s.alpha), move(s.beta); };
    for (Tensor& t : codebooks) move(t);
    move(code_embedding);
    lin(first_proj), lin(rest_proj), conv(pre_conv), lin(input_proj), lin(output_proj);
    for (TransformerLayer& l : layers) {
      move(l.input_norm), move(l.post_norm), move(l.attn_scale), move(l.mlp_scale);
      lin(l.q), lin(l.k), lin(l.v), lin(l.o), lin(l.gate_up), lin(l.down);
    }
    move(final_norm);
    for (auto& [up, cn] : upsamplers) {
      move(up.weight), move(up.bias), conv(cn.dwconv), move(cn.norm_weight), move(cn.norm_bias);
      lin(cn.pwconv1), lin(cn.pwconv2), move(cn.gamma);
    }
    conv(decoder_in);
    for (DecoderBlock& b : blocks) {
      act(b.snake), move(b.upsample.weight), move(b.upsample.bias);
      for (ResidualUnit& u : b.units) act(u.act1), conv(u.conv1), act(u.act2), conv(u.conv2);
    }
    act(final_snake), conv(decoder_out);
  }
};

CodecDecoder::CodecDecoder(CodecDecoderConfig config, CodecDecoderLayout layout, tensor::Device device,
                           std::unique_ptr<Weights> weights)
    : config_(std::move(config)), layout_(std::move(layout)), device_(device), weights_(std::move(weights)) {}

int64_t CodecDecoder::samples_trimmed() const {
  if (!layout_.trim_transposed_left) return 0;
  // Each decoder block's transposed convolution (k = 2 * rate) drops `rate` rows at its output
  // rate, which the blocks after it multiply.
  int64_t trimmed = 0;
  for (int r : config_.upsample_rates) trimmed = trimmed * r + r;
  return trimmed;
}

CodecDecoder::~CodecDecoder() = default;

std::unique_ptr<CodecDecoder> CodecDecoder::load(const std::filesystem::path& dir, tensor::Device device) {
  return load(Checkpoint::open(dir), read_codec_decoder_config(dir), CodecDecoderLayout{}, device);
}

std::unique_ptr<CodecDecoder> CodecDecoder::load(const Checkpoint& ckpt, CodecDecoderConfig c,
                                                 const CodecDecoderLayout& layout, tensor::Device device) {
  auto w = std::make_unique<Weights>();
  const std::string& d = layout.prefix;
  if (layout.residual_vq) {
    load_residual_vq(ckpt, c, d, *w);
  } else {
    if (c.latent_dim != c.hidden_size) {
      throw_error(ErrorCode::kLoadFailed,
                  "codec decoder: without residual VQ the latent width {} must be the hidden "
                  "size {}",
                  c.latent_dim, c.hidden_size);
    }
    w->code_embedding =
        tensor_of(ckpt, d + "code_embedding.weight", {int64_t{c.num_quantizers} * c.codebook_size, c.hidden_size});
  }
  load_stack(ckpt, c, d, *w);
  if (device != tensor::Device::cpu()) w->move_to(device);
  return std::unique_ptr<CodecDecoder>(new CodecDecoder(std::move(c), layout, device, std::move(w)));
}

void CodecDecoder::load_residual_vq(const Checkpoint& ckpt, const CodecDecoderConfig& c, const std::string& d,
                                    Weights& weights) {
  Weights* w = &weights;
  const int64_t half = c.codebook_dim / 2, vocab = c.codebook_size;
  const std::string q = d + "quantizer.";
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
  w->pre_conv = load_conv(ckpt, d + "pre_conv.conv", c.latent_dim, c.codebook_dim, 3);
  w->input_proj = load_linear(ckpt, d + "pre_transformer.input_proj", c.hidden_size, c.latent_dim, true);
  w->output_proj = load_linear(ckpt, d + "pre_transformer.output_proj", c.latent_dim, c.hidden_size, true);
}

void CodecDecoder::load_stack(const Checkpoint& ckpt, const CodecDecoderConfig& c, const std::string& d,
                              Weights& weights) {
  Weights* w = &weights;
  const std::string t = d + "pre_transformer.";
  const int64_t h = c.hidden_size, qd = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kvd = int64_t{c.num_key_value_heads} * c.head_dim, inter = c.intermediate_size;
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

  const int64_t lat = c.latent_dim;
  for (size_t i = 0; i < c.upsampling_ratios.size(); ++i) {
    const std::string p = d + "upsample." + std::to_string(i) + ".";
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
  w->decoder_in = load_conv(ckpt, d + "decoder.0.conv", c.decoder_dim, lat, 7);
  for (size_t i = 0; i < c.upsample_rates.size(); ++i) {
    const std::string p = d + "decoder." + std::to_string(i + 1) + ".block.";
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
  w->final_snake = load_snake(ckpt, d + "decoder." + std::to_string(c.upsample_rates.size() + 1), last);
  w->decoder_out = load_conv(ckpt, d + "decoder." + std::to_string(c.upsample_rates.size() + 2) + ".conv", 1, last, 7);
}

std::unique_ptr<AudioDecoderStream> CodecDecoder::open_stream() const {
  auto stream = std::make_unique<CodecStream>();
  stream->owner_ = this;
  return stream;
}

std::unique_ptr<AudioDecoderStream> CodecDecoder::copy_stream(const AudioDecoderStream& stream) const {
  const auto* from = dynamic_cast<const CodecStream*>(&stream);
  if (from == nullptr || from->owner_ != this) {
    throw_error(ErrorCode::kInvalidArgument, "copy_stream: the stream was not opened by this decoder");
  }
  auto copy = std::make_unique<CodecStream>();
  copy->owner_ = this;
  copy->frames_ = from->frames_;
  copy->trims_ = from->trims_;
  // One allocation for all histories and queued copies, no synchronisation: a copy per history
  // through Tensor::to waits for the device each time, which on an idle GPU cost ~60 ms a stream.
  int64_t total = 0;
  for (const Tensor& history : from->histories_) total += history.numel();
  const Tensor flat = Tensor::empty({std::max<int64_t>(total, 1)}, DType::kF32, device_);
  int64_t at = 0;
  for (const Tensor& history : from->histories_) {
    Tensor view = flat.slice_rows(at, at + history.numel()).reshape(history.shape());
    ops::copy_columns(history, 0, view, 0, history.dim(1));
    copy->histories_.push_back(std::move(view));
    at += history.numel();
  }
  return copy;
}

std::vector<float> CodecDecoder::decode(std::span<const int32_t> codes) const {
  std::vector<float> audio;
  CodecStream stream;
  stream.owner_ = this;
  decode(stream, codes, audio);
  return audio;
}

void CodecDecoder::decode(AudioDecoderStream& stream, std::span<const int32_t> codes, std::vector<float>& audio) const {
  const AudioDecodeItem item{&stream, codes, &audio};
  decode_batch(std::span(&item, 1));
}

Tensor CodecDecoder::residual_vq(const std::vector<Tensor>& ids, int64_t total) const {
  // The first codebook and the sum of the others, each through its own projection.
  const Weights& w = *weights_;
  const int64_t half = config_.codebook_dim / 2;
  Tensor first = Tensor::empty({total, half}, DType::kF32, device_);
  Tensor rest = Tensor::zeros({total, half}, DType::kF32, device_);
  Tensor code_row = Tensor::empty({total, half}, DType::kF32, device_);
  ops::embedding(w.codebooks[0], ids[0], first);
  for (size_t g = 1; g < ids.size(); ++g) {
    ops::embedding(w.codebooks[g], ids[g], code_row);
    ops::add(rest, code_row, rest);
  }
  Tensor x = linear(w.first_proj, first);
  ops::add(x, linear(w.rest_proj, rest), x);
  return x;
}

Tensor CodecDecoder::mean_code_embedding(const std::vector<Tensor>& ids, int64_t total) const {
  // Codebook g's code i is row g * codebook_size + i of the one table.
  const int groups = static_cast<int>(ids.size());
  Tensor index = Tensor::empty({total, groups}, DType::kI32);
  Tensor weights = Tensor::empty({total, groups}, DType::kF32);
  for (int64_t t = 0; t < total; ++t) {
    for (int g = 0; g < groups; ++g) {
      index.data<int32_t>()[t * groups + g] = ids[g].data<int32_t>()[t] + g * config_.codebook_size;
      weights.data<float>()[t * groups + g] = 1.0f / static_cast<float>(groups);
    }
  }
  Tensor x = Tensor::empty({total, config_.hidden_size}, DType::kF32, device_);
  // The index from the host (validated, uploaded without a synchronisation), the weights likewise.
  Tensor device_weights = Tensor::empty({total, groups}, DType::kF32, device_);
  ops::upload(weights, device_weights);
  ops::gather_weighted_sum(weights_->code_embedding, index, device_weights, x);
  return x;
}

void CodecDecoder::decode_batch(std::span<const AudioDecodeItem> items) const {
  const CodecDecoderConfig& c = config_;
  const int groups = c.num_quantizers;
  // Everything is checked before any stream moves. "item i: " names the item in a batch.
  std::vector<CodecStream*> streams;
  std::vector<const AudioDecodeItem*> decoded;
  std::vector<int64_t> frames;
  for (size_t i = 0; i < items.size(); ++i) {
    const AudioDecodeItem& item = items[i];
    const std::string where =
        items.size() > 1 ? fmt::format("{}: item {}: ", layout_.name, i) : fmt::format("{}: ", layout_.name);
    auto* stream = dynamic_cast<CodecStream*>(item.stream);
    if (stream == nullptr || stream->owner_ != this) {
      throw_error(ErrorCode::kInvalidArgument, "{}the stream was not opened by this decoder", where);
    }
    if (item.audio == nullptr) throw_error(ErrorCode::kInvalidArgument, "{}no audio output", where);
    if (item.codes.size() % static_cast<size_t>(groups) != 0) {
      throw_error(ErrorCode::kInvalidArgument, "{}{} codes are not whole frames of {}", where, item.codes.size(),
                  groups);
    }
    for (size_t at = 0; at < item.codes.size(); ++at) {
      if (item.codes[at] >= c.codebook_size) {
        throw_error(ErrorCode::kInvalidArgument, "{}code {} of codebook {} in frame {} is outside [0, {})", where,
                    item.codes[at], at % groups, stream->frames_ + static_cast<int64_t>(at / groups), c.codebook_size);
      }
    }
    if (item.codes.empty()) continue;
    if (std::find(streams.begin(), streams.end(), stream) != streams.end()) {
      throw_error(ErrorCode::kInvalidArgument, "{}its stream is already in the batch", where);
    }
    streams.push_back(stream);
    decoded.push_back(&item);
    frames.push_back(static_cast<int64_t>(item.codes.size()) / groups);
  }
  if (streams.empty()) return;
  const int64_t total = std::accumulate(frames.begin(), frames.end(), int64_t{0});

  // Codes per codebook, clamped at 0 like the reference's padding, and each frame's RoPE position.
  std::vector<Tensor> ids(static_cast<size_t>(groups));
  for (int g = 0; g < groups; ++g) ids[g] = Tensor::empty({total}, DType::kI32);
  Tensor positions = Tensor::empty({total}, DType::kI32);
  int64_t row = 0;
  for (size_t s = 0; s < streams.size(); ++s) {
    const std::span<const int32_t> codes = decoded[s]->codes;
    for (int64_t f = 0; f < frames[s]; ++f, ++row) {
      for (int g = 0; g < groups; ++g) ids[g].data<int32_t>()[row] = std::max(codes[f * groups + g], 0);
      positions.data<int32_t>()[row] = static_cast<int32_t>(streams[s]->frames_ + f);
    }
  }
  const Weights& w = *weights_;
  const tensor::Device dev = device_;
  BatchRun run(streams, frames, dev);

  // Transformer over the new frames; each stream attends to its kept keys of the last window - 1
  // frames. Keys and values are laid out per stream as [window - 1 kept rows; new rows] (the
  // leading ones zero until the stream has that many frames), and the attention reads them as
  // one-row blocks: stream s's block table lists its real kept rows, then its new ones.
  Tensor hidden = layout_.residual_vq ? linear(w.input_proj, run.conv(w.pre_conv, residual_vq(ids, total)))
                                      : mean_code_embedding(ids, total);
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads, hd = c.head_dim;
  const int64_t kept_rows = c.sliding_window - 1;
  std::vector<std::vector<int32_t>> tables(streams.size());
  std::vector<ops::PagedSequence> seqs(streams.size());
  int64_t query_at = 0;
  for (size_t s = 0; s < streams.size(); ++s) {
    const int64_t kept = std::min(streams[s]->frames_, kept_rows);
    const int64_t segment = query_at + static_cast<int64_t>(s) * kept_rows;  // where stream s's rows start
    for (int64_t r = kept_rows - kept; r < kept_rows + frames[s]; ++r) {
      tables[s].push_back(static_cast<int32_t>(segment + r));
    }
    seqs[s] = ops::PagedSequence{static_cast<int32_t>(query_at), static_cast<int32_t>(frames[s]),
                                 static_cast<int32_t>(kept), tables[s]};
    query_at += frames[s];
  }
  ops::RopeSpec rope;
  rope.theta = c.rope_theta;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Tensor normed = Tensor::empty(hidden.shape(), DType::kF32, dev);
  for (const TransformerLayer& layer : w.layers) {
    ops::rms_norm(hidden, layer.input_norm, c.rms_norm_eps, normed);
    Tensor q = linear(layer.q, normed).reshape({total, heads, hd});
    Tensor k = linear(layer.k, normed).reshape({total, kv_heads, hd});
    Tensor v = linear(layer.v, normed);
    ops::rotary_embedding(q, positions, rope);
    ops::rotary_embedding(k, positions, rope);
    // Positions shift by the same amount for every key of a stream, so the window mask and the
    // rotated keys are those of the whole sequence.
    Tensor keys = run.kept_and_new(k.reshape({total, kv_heads * hd}), kept_rows);
    Tensor values = run.kept_and_new(v, kept_rows);
    const Tensor k_cache = keys.reshape({keys.dim(0), 1, kv_heads, hd});
    const Tensor v_cache = values.reshape({values.dim(0), 1, kv_heads, hd});
    Tensor attn = Tensor::empty({total, heads, hd}, DType::kF32, dev);
    ops::paged_attention(q, k_cache, v_cache, seqs, scale, c.sliding_window, attn);
    ops::add_scaled(hidden, linear(layer.o, attn.reshape({total, heads * hd})), layer.attn_scale, hidden);

    ops::rms_norm(hidden, layer.post_norm, c.rms_norm_eps, normed);
    Tensor gate_up = linear(layer.gate_up, normed);
    Tensor act = Tensor::empty({total, c.intermediate_size}, DType::kF32, dev);
    ops::silu_and_mul(gate_up, act);
    ops::add_scaled(hidden, linear(layer.down, act), layer.mlp_scale, hidden);
  }
  ops::rms_norm(hidden, w.final_norm, c.rms_norm_eps, normed);
  Tensor x = layout_.residual_vq ? linear(w.output_proj, normed) : normed;

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
    x = run.trans_conv(b.upsample, snake(b.snake, x), layout_.trim_transposed_left);
    for (const ResidualUnit& u : b.units) {
      Tensor y = run.conv(u.conv1, snake(u.act1, x));
      y = run.conv(u.conv2, snake(u.act2, y));
      ops::add(x, y, x);
    }
  }
  x = run.conv(w.decoder_out, snake(w.final_snake, x));
  ops::clamp(x, -1.0f, 1.0f, x);
  const Tensor samples = dev == tensor::Device::cpu() ? x : x.to(tensor::Device::cpu());
  const float* at = samples.data<float>();
  for (size_t s = 0; s < streams.size(); ++s) {
    const int64_t n = run.rows()[s];
    decoded[s]->audio->insert(decoded[s]->audio->end(), at, at + n);
    at += n;
    streams[s]->frames_ += frames[s];
  }
}

}  // namespace omni::model::qwen3_tts
