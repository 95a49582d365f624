#include "model/decoder_lm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "base/error.h"
#include "model/decode_step_inputs.h"
#include "model/model_dtype.h"
#include "model/safetensors.h"

namespace omni::model {

using tensor::Device;
using tensor::DeviceType;
using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

namespace {

// A new host tensor with the float32 `rows` in `dtype` (f32, or bf16/f16 rounded to nearest even).
Tensor host_copy_as(const Tensor& rows, DType dtype) {
  Tensor out = Tensor::empty(rows.shape(), dtype);
  const float* src = rows.data<float>();
  const size_t n = static_cast<size_t>(rows.numel());
  if (dtype == DType::kF32) {
    std::copy_n(src, n, out.data<float>());
    return out;
  }
  auto* dst = static_cast<uint16_t*>(out.raw());
  for (size_t i = 0; i < n; ++i)
    dst[i] = dtype == DType::kBF16 ? tensor::f32_to_bf16(src[i]) : tensor::f32_to_f16(src[i]);
  return out;
}

// A tensor's values as host float32 (a capture for a downstream stage).
std::vector<float> host_floats(const Tensor& t) {
  const Tensor host = t.device().type == DeviceType::kCpu ? t : t.to(tensor::Device::cpu());
  std::vector<float> out(static_cast<size_t>(host.numel()));
  tensor::convert_to_f32(host.dtype(), host.raw(), out.data(), out.size());
  return out;
}

}  // namespace

DecoderLm::DecoderLm(const std::filesystem::path& dir, const TextModelConfig& config, DecoderVariant variant,
                     const CausalLmLoadOptions& options)
    : DecoderLm(dir, config, variant, DecoderWeights{}, options) {}

DecoderLm::DecoderLm(const std::filesystem::path& dir, const TextModelConfig& config, DecoderVariant variant,
                     const DecoderWeights& weights, const CausalLmLoadOptions& options)
    : config_(config),
      variant_(variant),
      has_embedding_and_head_(weights.has_embedding_and_head),
      device_(options.device),
      dtype_(resolve_model_dtype(options.dtype, config.dtype, options.device, (dir / "config.json").string())),
      tensor_parallel_(options.tensor_parallel) {
  if (config.hidden_act != "silu") {
    throw_error(ErrorCode::kUnsupported, "{}/config.json: hidden_act '{}' is not supported (silu)", dir.string(),
                config.hidden_act);
  }
  has_moe_ = std::find(config.moe.sparse_layers.begin(), config.moe.sparse_layers.end(), true) !=
             config.moe.sparse_layers.end();
  if (has_moe_ && tensor_parallel_ != nullptr && tensor_parallel_->world_size() > 1) {
    throw_error(ErrorCode::kUnsupported, "{}/config.json: a mixture-of-experts model cannot be split over {} ranks yet",
                dir.string(), tensor_parallel_->world_size());
  }
  const int rank = tensor_parallel_ ? tensor_parallel_->rank() : 0;
  shard_ = plan_decoder_shard(config, rank, tensor_parallel_ ? tensor_parallel_->world_size() : 1,
                              (dir / "config.json").string());
  const int64_t hidden = config.hidden_size, hd = config.head_dim, inter_all = config.intermediate_size;
  const int64_t q_out = config.num_attention_heads * hd, kv_out = config.num_key_value_heads * hd;
  // This rank's slices (the whole tensors with one rank).
  const int64_t q_rows = shard_.heads * hd, q_begin = rank * q_rows;
  const int64_t kv_rows = shard_.kv_heads * hd, kv_begin = shard_.kv_head_begin * hd;
  const int64_t inter = shard_.intermediate, inter_begin = rank * inter;
  const Checkpoint ckpt = options.random_weights ? Checkpoint::random(dir, 0) : Checkpoint::open(dir);

  const tensor::Shape vocab_shape{config.vocab_size, hidden};
  if (weights.has_embedding_and_head) {
    embed_tokens_ = load_vocab_shard(ckpt, weights.prefix + "embed_tokens.weight", vocab_shape, shard_.vocab_begin,
                                     shard_.vocab_rows, shard_.vocab_rows + 1, dtype_, device_);
    // A tied checkpoint may still carry lm_head.weight (some exporters write it); the config decides.
    lm_head_ = config.tie_word_embeddings ? embed_tokens_.slice_rows(0, shard_.vocab_rows)
                                          : load_vocab_shard(ckpt, weights.lm_head, vocab_shape, shard_.vocab_begin,
                                                             shard_.vocab_rows, shard_.vocab_rows, dtype_, device_);
  }
  final_norm_ = load_weight(ckpt, weights.prefix + "norm.weight", {hidden});

  layers_.resize(config.num_hidden_layers);
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = weights.prefix + "layers." + std::to_string(i) + ".";
    Layer& l = layers_[i];
    l.input_norm = load_weight(ckpt, p + "input_layernorm.weight", {hidden});
    l.post_attention_norm = load_weight(ckpt, p + "post_attention_layernorm.weight", {hidden});
    // q, k and v share one matrix (this rank's query rows, then its key rows, then its value rows) so
    // that attention starts with a single product.
    const std::string attn = p + "self_attn.";
    l.qkv_proj = Tensor::empty({q_rows + 2 * kv_rows, hidden}, dtype_, device_);
    ckpt.load_slice_into(attn + "q_proj.weight", {q_out, hidden}, 0, q_begin, q_rows, l.qkv_proj, 0);
    ckpt.load_slice_into(attn + "k_proj.weight", {kv_out, hidden}, 0, kv_begin, kv_rows, l.qkv_proj,
                         static_cast<size_t>(q_rows * hidden));
    ckpt.load_slice_into(attn + "v_proj.weight", {kv_out, hidden}, 0, kv_begin, kv_rows, l.qkv_proj,
                         static_cast<size_t>((q_rows + kv_rows) * hidden));
    l.o_proj = load_column_shard(ckpt, attn + "o_proj.weight", {hidden, q_out}, q_begin, q_rows, dtype_, device_);
    if (variant.qkv_bias) {
      l.qkv_bias = Tensor::empty({q_rows + 2 * kv_rows}, dtype_, device_);
      ckpt.load_slice_into(attn + "q_proj.bias", {q_out}, 0, q_begin, q_rows, l.qkv_bias, 0);
      ckpt.load_slice_into(attn + "k_proj.bias", {kv_out}, 0, kv_begin, kv_rows, l.qkv_bias,
                           static_cast<size_t>(q_rows));
      ckpt.load_slice_into(attn + "v_proj.bias", {kv_out}, 0, kv_begin, kv_rows, l.qkv_bias,
                           static_cast<size_t>(q_rows + kv_rows));
    }
    if (variant.qk_norm) {
      l.q_norm = load_weight(ckpt, p + "self_attn.q_norm.weight", {hd});
      l.k_norm = load_weight(ckpt, p + "self_attn.k_norm.weight", {hd});
    }
    if (config.moe.sparse(i)) {
      l.moe = std::make_unique<MoeMlp>(ckpt, p + "mlp.", config.moe, hidden, dtype_, device_);
      moe_reads_back_ = moe_reads_back_ || !l.moe->runs_on_device();
      continue;
    }
    // Gate and up share one matrix so the MLP's first step is a single product.
    l.gate_up_proj = Tensor::empty({2 * inter, hidden}, dtype_, device_);
    ckpt.load_slice_into(p + "mlp.gate_proj.weight", {inter_all, hidden}, 0, inter_begin, inter, l.gate_up_proj, 0);
    ckpt.load_slice_into(p + "mlp.up_proj.weight", {inter_all, hidden}, 0, inter_begin, inter, l.gate_up_proj,
                         static_cast<size_t>(inter * hidden));
    l.down_proj =
        load_column_shard(ckpt, p + "mlp.down_proj.weight", {hidden, inter_all}, inter_begin, inter, dtype_, device_);
  }

  // The engine's positions are one stream; for text all M-RoPE streams are equal, which makes
  // every M-RoPE layout the plain NeoX rotation (ops::qkv_norm_rope_store's).
  rope_theta_ = config.rope.theta;
  if (!config.rope.mrope_section.empty()) {
    mrope_.layout =
        config.rope.mrope_interleaved ? ops::RopeLayout::kMropeInterleaved : ops::RopeLayout::kMropeSectioned;
    mrope_.theta = config.rope.theta;
    std::copy_n(config.rope.mrope_section.begin(), 3, mrope_.mrope_section.begin());
  }

  info_.vocab_size = config.vocab_size;
  info_.max_position_embeddings = config.max_position_embeddings;
  const GenerationDefaults defaults = read_generation_defaults(dir);
  info_.eos_token_ids = defaults.eos_token_ids.empty() ? config.eos_token_ids : defaults.eos_token_ids;
}

Tensor DecoderLm::placed(const Tensor& host) const {
  return device_.type == DeviceType::kCpu ? host : host.to(device_);
}

Tensor DecoderLm::load_weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const {
  return ckpt.load(name, shape, dtype_, device_);
}

size_t DecoderLm::kv_bytes_per_block() const {
  return static_cast<size_t>(config_.num_hidden_layers) * 2 * kKvBlockSize * shard_.kv_heads * config_.head_dim *
         tensor::dtype_size(dtype_);
}

size_t DecoderLm::activation_bytes(int max_tokens, int max_logit_rows) const {
  const size_t hidden = config_.hidden_size, inter = shard_.intermediate;
  const size_t q_out = static_cast<size_t>(shard_.heads) * config_.head_dim;
  const size_t kv_out = static_cast<size_t>(shard_.kv_heads) * config_.head_dim;
  // What run() holds at once: h, x, proj; qkv (q_out + 2 * kv_out), q, attn; gate_up and act.
  const size_t per_token = 3 * hidden + 3 * q_out + 2 * kv_out + 3 * inter;
  // Picked rows; the shard's logits, the gathered and the ordered logits; argmax.
  const size_t vocab = static_cast<size_t>(shard_.vocab_rows) * shard_.size;
  const size_t per_row = hidden + static_cast<size_t>(shard_.vocab_rows) + 3 * vocab;
  const size_t elements = per_token * static_cast<size_t>(max_tokens) + per_row * static_cast<size_t>(max_logit_rows);
  // The attention's split-KV partial results, cuBLASLt's workspace and the allocator's rounding.
  constexpr size_t kScratch = size_t{256} << 20;
  size_t moe = 0;
  for (const Layer& l : layers_) {
    if (l.moe) moe = std::max(moe, l.moe->activation_bytes(max_tokens));
  }
  return elements * tensor::dtype_size(dtype_) + moe + static_cast<size_t>(max_tokens) * 64 + kScratch;
}

void DecoderLm::init_kv_cache(int num_blocks) {
  if (num_blocks < 0) throw_error(ErrorCode::kInvalidArgument, "init_kv_cache: negative block count {}", num_blocks);
  // Recorded decode steps hold the old caches' addresses.
  decode_steps_.clear();
  for (Layer& l : layers_) {
    l.k_cache = Tensor();
    l.v_cache = Tensor();
  }
  // Written once here, so the cache's memory is committed at start, as a GPU reservation is: on
  // the CPU, untouched pages would otherwise be faulted in one by one as prefix caching hands out
  // never-used blocks before cached ones, and the process would grow for as long as that lasts.
  for (Layer& l : layers_) {
    const tensor::Shape shape{num_blocks, kKvBlockSize, shard_.kv_heads, config_.head_dim};
    l.k_cache = Tensor::zeros(shape, dtype_, device_);
    l.v_cache = Tensor::zeros(shape, dtype_, device_);
  }
  num_blocks_ = num_blocks;
}

void DecoderLm::check_batch(const ForwardBatch& batch, size_t tokens) const {
  if (batch.positions.size() != tokens) {
    throw_error(ErrorCode::kInvalidArgument, "forward: {} positions for {} tokens", batch.positions.size(), tokens);
  }
  if (!layers_.empty() && !layers_[0].k_cache.defined()) {
    throw_error(ErrorCode::kInvalidArgument, "forward: init_kv_cache was not called");
  }
  // Checked here, on the host: a vocabulary shard maps foreign ids to its zero row, and the ops do
  // not check the ids and slots a device step uploads without waiting for the device.
  for (size_t t = 0; t < batch.token_ids.size(); ++t) {
    if (batch.token_ids[t] < 0 || batch.token_ids[t] >= config_.vocab_size) {
      throw_error(ErrorCode::kInvalidArgument, "forward: token id {} at index {} is outside the vocabulary [0, {})",
                  batch.token_ids[t], t, config_.vocab_size);
    }
  }
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SequenceSlice& seq = batch.seqs[s];
    if (seq.query_start < 0 || seq.query_len < 0 || seq.context_len < 0 ||
        static_cast<size_t>(seq.query_start) + seq.query_len > tokens) {
      throw_error(ErrorCode::kInvalidArgument, "forward: slice {} covers tokens [{}, {}) of {}", s, seq.query_start,
                  seq.query_start + seq.query_len, tokens);
    }
    const size_t needed = (static_cast<size_t>(seq.context_len) + seq.query_len + kKvBlockSize - 1) / kKvBlockSize;
    if (seq.block_table.size() < needed) {
      throw_error(ErrorCode::kInvalidArgument, "forward: slice {} needs {} KV blocks for {} tokens, its table has {}",
                  s, needed, seq.context_len + seq.query_len, seq.block_table.size());
    }
    for (size_t b = 0; b < needed; ++b) {
      if (seq.block_table[b] < 0 || seq.block_table[b] >= num_blocks_) {
        throw_error(ErrorCode::kInvalidArgument, "forward: slice {} names KV block {}, the cache has {}", s,
                    seq.block_table[b], num_blocks_);
      }
    }
  }
}

Tensor DecoderLm::run(const ForwardBatch& batch, const Tensor* inputs_embeds, Tensor* hidden_out,
                      const StepChaining* chaining, bool final_norm) {
  const int64_t tokens =
      inputs_embeds != nullptr ? inputs_embeds->dim(0) : static_cast<int64_t>(batch.token_ids.size());
  check_batch(batch, static_cast<size_t>(tokens));
  const int64_t hidden = config_.hidden_size;

  // Only the rows that produce logits go through the final norm and the vocabulary projection.
  std::vector<int32_t> rows;
  if (batch.all_logits) {
    for (int32_t t = 0; t < tokens; ++t) rows.push_back(t);
  } else {
    for (const SequenceSlice& seq : batch.seqs) {
      if (seq.wants_logits && seq.query_len > 0) rows.push_back(seq.query_start + seq.query_len - 1);
    }
  }
  const int64_t r = static_cast<int64_t>(rows.size());
  // With several ranks, the gathered logits [rank, row, shard column] are put in row order by a
  // gather of rows (row i, rank k reads gathered row k * r + i).
  const int64_t order = shard_.size > 1 ? r * shard_.size : 0;

  // The step's integers in one host buffer: ids into the vocabulary shard (ids of other shards
  // read its zero row), positions, KV slots, logits rows, logits order; on a GPU they travel in
  // one copy (the device is idle here: the previous step's results were read back; an asynchronous
  // step's go through pinned staging instead, behind the step in flight).
  Tensor ints = Tensor::empty({3 * tokens + r + order}, DType::kI32);
  int32_t* host = ints.data<int32_t>();
  for (int64_t t = 0; inputs_embeds == nullptr && t < tokens; ++t) {
    const int64_t local = batch.token_ids[t] - shard_.vocab_begin;
    host[t] = static_cast<int32_t>(local >= 0 && local < shard_.vocab_rows ? local : shard_.vocab_rows);
  }
  std::copy(batch.positions.begin(), batch.positions.end(), host + tokens);
  std::vector<ops::PagedSequence> seqs;
  for (const SequenceSlice& seq : batch.seqs) {
    for (int32_t i = 0; i < seq.query_len; ++i) {
      const int32_t pos = seq.context_len + i;
      host[2 * tokens + seq.query_start + i] = seq.block_table[pos / kKvBlockSize] * kKvBlockSize + pos % kKvBlockSize;
    }
    seqs.push_back({seq.query_start, seq.query_len, seq.context_len, seq.block_table});
  }
  std::copy(rows.begin(), rows.end(), host + 3 * tokens);
  for (int64_t i = 0; i < r && order > 0; ++i) {
    for (int64_t k = 0; k < shard_.size; ++k)
      host[3 * tokens + r + i * shard_.size + k] = static_cast<int32_t>(k * r + i);
  }
  // Rows already on the device may still be being computed: the integers then stay on the host
  // and each op stages its own without waiting for the device.
  const bool resident_embeds =
      inputs_embeds != nullptr && device_.type != DeviceType::kCpu && inputs_embeds->device() == device_;
  if (device_.type != DeviceType::kCpu && !resident_embeds) {
    if (chaining != nullptr) {
      Tensor on_device = Tensor::empty(ints.shape(), DType::kI32, device_);
      ops::upload(ints, on_device);
      ints = on_device;
    } else {
      ints = ints.to(device_);
    }
  }
  Tensor ids = ints.slice_rows(0, tokens);
  if (chaining != nullptr && chaining->rows.defined()) ops::substitute_ids(chaining->previous_ids, chaining->rows, ids);
  const Tensor positions = ints.slice_rows(tokens, 2 * tokens);
  const Tensor slots = ints.slice_rows(2 * tokens, 3 * tokens);
  const Tensor row_ids = ints.slice_rows(3 * tokens, 3 * tokens + r);

  Tensor h = Tensor::empty({tokens, hidden}, dtype_, device_);
  if (inputs_embeds != nullptr) {
    // The caller's rows are whole on every rank: no partial sums to reduce.
    h = resident_embeds ? *inputs_embeds : placed(host_copy_as(*inputs_embeds, dtype_));
  } else {
    ops::embedding(embed_tokens_, ids, h);
    reduce_partial_sums(h);
    if (!batch.input_rows.empty()) substitute_input_rows(batch, h);
  }
  if (batch.capture != nullptr) {
    if (batch.capture->layer < 0 || batch.capture->layer > static_cast<int>(layers_.size()) + 1) {
      throw_error(ErrorCode::kInvalidArgument, "forward: capture layer {} is outside 0..{}", batch.capture->layer,
                  layers_.size() + 1);
    }
    batch.capture->embeddings = host_floats(h);
    if (batch.capture->layer == 0) batch.capture->hidden = batch.capture->embeddings;
  }
  Tensor mrope_positions;
  if (!batch.mrope_positions.empty()) {
    if (mrope_.layout == ops::RopeLayout::kNeox) {
      throw_error(ErrorCode::kInvalidArgument, "forward: mrope_positions given, but the model has no mrope_section");
    }
    if (batch.mrope_positions.size() != static_cast<size_t>(3 * tokens)) {
      throw_error(ErrorCode::kInvalidArgument, "forward: {} mrope_positions for {} tokens (3 per token)",
                  batch.mrope_positions.size(), tokens);
    }
    mrope_positions = Tensor::empty({3, tokens}, DType::kF32);
    std::copy(batch.mrope_positions.begin(), batch.mrope_positions.end(), mrope_positions.data<float>());
  }
  const Tensor last =
      run_layers(h, positions, slots, AttentionBatch{seqs, Tensor(), Tensor()}, mrope_positions, &batch);
  if (last.defined()) ops::add(h, last, h);
  if (batch.capture != nullptr && batch.capture->layer == static_cast<int>(layers_.size()) && !layers_.empty()) {
    batch.capture->hidden = host_floats(h);
  }
  if (batch.capture != nullptr && batch.capture->layer == static_cast<int>(layers_.size()) + 1) {
    Tensor normed = Tensor::empty({tokens, hidden}, dtype_, device_);
    ops::rms_norm(h, final_norm_, config_.rms_norm_eps, normed);
    batch.capture->hidden = host_floats(normed);
  }

  if (r == 0) return Tensor::empty({0, config_.vocab_size}, dtype_, device_);
  Tensor picked = Tensor::empty({r, hidden}, dtype_, device_);
  ops::embedding(h, row_ids, picked);
  if (!final_norm) {
    *hidden_out = picked;
    return Tensor();
  }
  ops::rms_norm(picked, final_norm_, config_.rms_norm_eps, picked);
  if (hidden_out != nullptr) *hidden_out = picked;
  if (!has_embedding_and_head_) return Tensor();
  return project_vocabulary(picked, ints.slice_rows(3 * tokens + r, 3 * tokens + r + order));
}

Tensor DecoderLm::run_layers(Tensor& h, const Tensor& positions, const Tensor& slots, const AttentionBatch& attention,
                             const Tensor& mrope_positions, const ForwardBatch* media) {
  const size_t deepstack_layers =
      media != nullptr && !media->input_rows.empty() ? media->input_row_deepstack.size() : 0;
  const int64_t tokens = h.dim(0);
  const int64_t hidden = config_.hidden_size, hd = config_.head_dim, inter = shard_.intermediate;
  const int64_t heads = shard_.heads, kv_heads = shard_.kv_heads;
  Tensor x = Tensor::empty({tokens, hidden}, dtype_, device_);
  Tensor qkv = Tensor::empty({tokens, heads + 2 * kv_heads, hd}, dtype_, device_);
  Tensor q = Tensor::empty({tokens, heads, hd}, dtype_, device_);
  Tensor attn = Tensor::empty({tokens, heads, hd}, dtype_, device_);
  Tensor proj = Tensor::empty({tokens, hidden}, dtype_, device_);
  Tensor gate_up = Tensor::empty({tokens, 2 * inter}, dtype_, device_);
  Tensor act = Tensor::empty({tokens, inter}, dtype_, device_);
  Tensor qkv_rows = qkv.reshape({tokens, (heads + 2 * kv_heads) * hd});
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  // Few rows on one GPU: every kernel launch costs about what a product does, so the norms go into
  // the products after them and the residual adds into the products before them (the fused ops give
  // the bits of the unfused sequence); each sublayer's output is then in h when the loop ends. A
  // fused op that falls back costs one kernel more, so this layout (4 products + fallbacks) is taken
  // where at most one of the four products falls back (the other takes 4 products + 2 add_rms_norm;
  // the layers share their shapes).
  const bool capture = media != nullptr && media->capture != nullptr;
  const bool fused = shard_.size == 1 && !has_moe_ && !mrope_positions.defined() && deepstack_layers == 0 && !capture &&
                     !layers_.empty() && [&] {
                       const Layer& l = layers_[0];
                       const int native = ops::linear_fuses(h, l.qkv_proj, qkv_rows) +
                                          ops::linear_fuses(h, l.gate_up_proj, gate_up) +
                                          ops::linear_fuses(attn.reshape({tokens, heads * hd}), l.o_proj, h) +
                                          ops::linear_fuses(act, l.down_proj, h);
                       return native >= 3;
                     }();
  // Otherwise h is the residual stream; each sublayer's output is added to it by the next norm
  // (add_rms_norm), the last one's by the caller.
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    if (fused) {
      ops::rms_norm_linear(h, l.input_norm, config_.rms_norm_eps, l.qkv_proj, l.qkv_bias, qkv_rows);
    } else if (i == 0) {
      ops::rms_norm(h, l.input_norm, config_.rms_norm_eps, x);
    } else {
      ops::add_rms_norm(proj, h, l.input_norm, config_.rms_norm_eps, x);
    }
    if (mrope_positions.defined()) {
      multimodal_attention_input(l, x, mrope_positions, slots, q);
    } else {
      if (!fused) ops::linear(x, l.qkv_proj, l.qkv_bias, qkv_rows);
      // Without qk_norm the norms are undefined and this is the rotation alone.
      ops::qkv_norm_rope_store(qkv, l.q_norm, l.k_norm, config_.rms_norm_eps, positions, rope_theta_, slots, q,
                               l.k_cache, l.v_cache);
    }
    if (attention.block_tables.defined()) {
      ops::paged_decode_attention(q, l.k_cache, l.v_cache, attention.context_lens, attention.block_tables, scale,
                                  config_.sliding_window[i], attn);
    } else {
      ops::paged_attention(q, l.k_cache, l.v_cache, attention.seqs, scale, config_.sliding_window[i], attn);
    }
    if (fused) {
      ops::linear_add(attn.reshape({tokens, heads * hd}), l.o_proj, h);
      ops::rms_norm_linear(h, l.post_attention_norm, config_.rms_norm_eps, l.gate_up_proj, Tensor(), gate_up);
      // Not ops::silu_and_mul_linear_add: every column group of its kernel recomputes SiLU over
      // the whole row, which cost more than the kernel it saves (Qwen3-0.6B shape on an H200:
      // 1.98 against 1.58 ms per step at batch 8).
      ops::silu_and_mul(gate_up, act);
      ops::linear_add(act, l.down_proj, h);
      continue;
    }
    ops::linear(attn.reshape({tokens, heads * hd}), l.o_proj, Tensor(), proj);
    reduce_partial_sums(proj);
    ops::add_rms_norm(proj, h, l.post_attention_norm, config_.rms_norm_eps, x);
    if (l.moe) {
      l.moe->forward(x, proj);
    } else {
      ops::linear(x, l.gate_up_proj, Tensor(), gate_up);
      ops::silu_and_mul(gate_up, act);
      ops::linear(act, l.down_proj, Tensor(), proj);
      reduce_partial_sums(proj);
    }
    if (capture && media->capture->layer == static_cast<int>(i) + 1 && i + 1 < layers_.size()) {
      // The layer's output is the residual stream plus its MLP output (before any DeepStack add).
      Tensor output = Tensor::empty({tokens, hidden}, dtype_, device_);
      ops::add(h, proj, output);
      media->capture->hidden = host_floats(output);
    }
    if (i < deepstack_layers) {
      // DeepStack adds to the layer's output: the residual stream is completed here, and the next
      // norm adds nothing more.
      ops::add(h, proj, h);
      add_deepstack_rows(*media, i, h);
      proj = Tensor::zeros({tokens, hidden}, dtype_, device_);
    }
  }
  return layers_.empty() || fused ? Tensor() : proj;
}

void DecoderLm::multimodal_attention_input(Layer& l, const Tensor& x, const Tensor& mrope_positions,
                                           const Tensor& slots, Tensor& q) {
  const int64_t tokens = x.dim(0), hd = config_.head_dim;
  const int64_t q_rows = shard_.heads * hd, kv_rows = shard_.kv_heads * hd;
  // The query, key and value rows of the fused projection, each into its own contiguous tensor.
  Tensor k = Tensor::empty({tokens, shard_.kv_heads, hd}, dtype_, device_);
  Tensor v = Tensor::empty({tokens, shard_.kv_heads, hd}, dtype_, device_);
  const int64_t bounds[4] = {0, q_rows, q_rows + kv_rows, q_rows + 2 * kv_rows};
  Tensor* outs[3] = {&q, &k, &v};
  for (int part = 0; part < 3; ++part) {
    Tensor rows = outs[part]->reshape({tokens, bounds[part + 1] - bounds[part]});
    const Tensor bias = l.qkv_bias.defined() ? l.qkv_bias.slice_rows(bounds[part], bounds[part + 1]) : Tensor();
    ops::linear(x, l.qkv_proj.slice_rows(bounds[part], bounds[part + 1]), bias, rows);
  }
  if (l.q_norm.defined()) {
    ops::rms_norm(q, l.q_norm, config_.rms_norm_eps, q);
    ops::rms_norm(k, l.k_norm, config_.rms_norm_eps, k);
  }
  ops::rotary_embedding(q, mrope_positions, mrope_);
  ops::rotary_embedding(k, mrope_positions, mrope_);
  ops::store_kv(k, v, slots, l.k_cache, l.v_cache);
}

void DecoderLm::reduce_partial_sums(Tensor& x) {
  if (shard_.size > 1) tensor_parallel_->all_reduce_sum(x);
}

Tensor DecoderLm::project_vocabulary(const Tensor& picked, const Tensor& order) {
  const int64_t r = picked.dim(0), rows = shard_.vocab_rows;
  Tensor local = Tensor::empty({r, rows}, dtype_, device_);
  ops::linear(picked, lm_head_, Tensor(), local);
  if (shard_.size == 1) return local;
  Tensor gathered = Tensor::empty({shard_.size * r, rows}, dtype_, device_);
  tensor_parallel_->all_gather(local, gathered);
  Tensor ordered = Tensor::empty({r * shard_.size, rows}, dtype_, device_);
  ops::embedding(gathered, order, ordered);
  return ordered.reshape({r, shard_.size * rows});
}

void DecoderLm::check_has_head(const char* caller) const {
  if (!has_embedding_and_head_) {
    throw_error(ErrorCode::kInvalidArgument,
                "{}: this decoder stack has no embedding or output head (it is fed through forward_embeds)", caller);
  }
}

void DecoderLm::forward(const ForwardBatch& batch, std::vector<float>& logits) {
  check_has_head("forward");
  const Tensor out = run(batch, nullptr, nullptr);
  const int64_t r = out.dim(0), columns = out.dim(1), vocab = config_.vocab_size;
  logits.resize(static_cast<size_t>(r * vocab));
  if (r == 0) return;
  const Tensor host = device_.type == DeviceType::kCpu ? out : out.to(Device::cpu());
  const auto* bytes = static_cast<const char*>(host.raw());
  if (columns == vocab) {
    tensor::convert_to_f32(host.dtype(), bytes, logits.data(), logits.size());
    return;
  }
  // The last shard's padding columns (vocab_size not a multiple of the ranks) are dropped.
  const size_t row_bytes = static_cast<size_t>(columns) * tensor::dtype_size(host.dtype());
  for (int64_t i = 0; i < r; ++i) {
    tensor::convert_to_f32(host.dtype(), bytes + i * row_bytes, logits.data() + i * vocab, static_cast<size_t>(vocab));
  }
}

void DecoderLm::substitute_input_rows(const ForwardBatch& batch, Tensor& h) const {
  const int64_t tokens = h.dim(0), hidden = config_.hidden_size;
  const size_t given = batch.input_rows.size();
  if (batch.input_row_values.size() != given * static_cast<size_t>(hidden)) {
    throw_error(ErrorCode::kInvalidArgument, "forward: {} input_row_values for {} input_rows of {} (hidden size)",
                batch.input_row_values.size(), given, hidden);
  }
  // The rows are patched on the host: they come with prompts only, whose other work dwarfs one copy.
  Tensor host = Tensor::empty({tokens, hidden}, DType::kF32);
  if (device_.type == DeviceType::kCpu && h.dtype() == DType::kF32) {
    host = h;
  } else {
    const Tensor raw = h.to(Device::cpu());
    tensor::convert_to_f32(raw.dtype(), raw.raw(), host.data<float>(), static_cast<size_t>(tokens * hidden));
  }
  float* rows = host.data<float>();
  for (size_t i = 0; i < given; ++i) {
    const int32_t row = batch.input_rows[i];
    if (row < 0 || row >= tokens) {
      throw_error(ErrorCode::kInvalidArgument, "forward: input_rows[{}] = {} is outside the batch's {} rows", i, row,
                  tokens);
    }
    std::copy_n(batch.input_row_values.data() + i * hidden, hidden, rows + static_cast<int64_t>(row) * hidden);
  }
  if (host.raw() != h.raw()) h = placed(host_copy_as(host, dtype_));
}

void DecoderLm::add_deepstack_rows(const ForwardBatch& batch, size_t layer, Tensor& h) const {
  const int64_t tokens = h.dim(0), hidden = config_.hidden_size;
  const std::vector<float>& values = batch.input_row_deepstack[layer];
  if (values.size() != batch.input_rows.size() * static_cast<size_t>(hidden)) {
    throw_error(ErrorCode::kInvalidArgument, "forward: {} input_row_deepstack[{}] values for {} input_rows of {}",
                values.size(), layer, batch.input_rows.size(), hidden);
  }
  Tensor host = Tensor::empty({tokens, hidden}, DType::kF32);
  if (device_.type == DeviceType::kCpu && h.dtype() == DType::kF32) {
    host = h;
  } else {
    const Tensor raw = h.to(Device::cpu());
    tensor::convert_to_f32(raw.dtype(), raw.raw(), host.data<float>(), static_cast<size_t>(tokens * hidden));
  }
  float* rows = host.data<float>();
  for (size_t i = 0; i < batch.input_rows.size(); ++i) {
    float* dst = rows + static_cast<int64_t>(batch.input_rows[i]) * hidden;
    const float* src = values.data() + i * hidden;
    for (int64_t e = 0; e < hidden; ++e) dst[e] += src[e];
  }
  if (host.raw() != h.raw()) h = placed(host_copy_as(host, dtype_));
}

void DecoderLm::forward_embeds(const ForwardBatch& batch, const Tensor& inputs_embeds, Tensor& hidden) {
  const bool on_host = inputs_embeds.device().type == DeviceType::kCpu && inputs_embeds.dtype() == DType::kF32;
  const bool on_device = inputs_embeds.device() == device_ && inputs_embeds.dtype() == dtype_;
  if (!batch.token_ids.empty() || !(on_host || on_device) || inputs_embeds.shape().size() != 2 ||
      inputs_embeds.shape()[0] != static_cast<int64_t>(batch.positions.size()) ||
      inputs_embeds.shape()[1] != config_.hidden_size) {
    throw_error(ErrorCode::kInvalidArgument,
                "forward_embeds: inputs_embeds must be [{} positions, {}], host float32 or {} {}, with no token ids "
                "(got {} {} {} and {} token ids)",
                batch.positions.size(), config_.hidden_size, tensor::device_name(device_), tensor::dtype_name(dtype_),
                tensor::device_name(inputs_embeds.device()), tensor::dtype_name(inputs_embeds.dtype()),
                tensor::shape_to_string(inputs_embeds.shape()), batch.token_ids.size());
  }
  run(batch, &inputs_embeds, &hidden);
}

void DecoderLm::forward_hidden(const ForwardBatch& batch, Tensor& hidden) {
  run(batch, nullptr, &hidden, nullptr, /*final_norm=*/false);
}

void DecoderLm::decode_embeds(Tensor& h, const Tensor& positions, const Tensor& slots, const Tensor& context_lens,
                              const Tensor& block_tables) {
  if (device_.type != DeviceType::kCuda || shard_.size > 1 || layers_.empty() || !layers_[0].k_cache.defined()) {
    throw_error(ErrorCode::kUnsupported, "decode_embeds: needs one rank on a CUDA device with a KV cache (model on {})",
                tensor::device_name(device_));
  }
  const Tensor last = run_layers(h, positions, slots, AttentionBatch{{}, context_lens, block_tables});
  if (last.defined()) ops::add(h, last, h);
  ops::rms_norm(h, final_norm_, config_.rms_norm_eps, h);
}

void DecoderLm::upload_step_inputs(const ForwardBatch& batch, DecodeStep& step) {
  const Tensor host = decode_staging_.slice_rows(0, step.inputs.dim(0));
  pack_decode_step_inputs(batch, step.rows, decode_table_width_,
                          std::span<int32_t>(host.data<int32_t>(), static_cast<size_t>(host.numel())));
  ops::upload(host, step.inputs);
}

std::vector<float> DecoderLm::embed_on_host(std::span<const int32_t> ids) const {
  if (shard_.size > 1 || !has_embedding_and_head_) {
    throw_error(ErrorCode::kUnsupported, "embed_on_host: needs the whole embedding on one rank");
  }
  Tensor host_ids = Tensor::empty({static_cast<int64_t>(ids.size())}, DType::kI32);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= config_.vocab_size) {
      throw_error(ErrorCode::kInvalidArgument, "embed_on_host: token {} is outside the vocabulary of {}", ids[i],
                  config_.vocab_size);
    }
    host_ids.data<int32_t>()[i] = ids[i];
  }
  Tensor rows = Tensor::empty({host_ids.dim(0), config_.hidden_size}, dtype_, device_);
  ops::embedding(embed_tokens_, device_.type == DeviceType::kCpu ? host_ids : host_ids.to(device_), rows);
  return host_floats(rows);
}

Tensor DecoderLm::place(const Tensor& host_f32) const { return placed(host_copy_as(host_f32, dtype_)); }

void DecoderLm::forward_greedy(const ForwardBatch& batch, std::vector<int32_t>& token_ids) {
  check_has_head("forward_greedy");
  if (batch.all_logits) throw_error(ErrorCode::kInvalidArgument, "forward_greedy: all_logits is not supported");
  if (DecodeStep* step = decode_step_for(batch)) {
    check_batch(batch, batch.token_ids.size());
    upload_step_inputs(batch, *step);
    previous_ids_stale_ = true;
    ++fixed_decode_steps_;
    if (step->graph.defined()) {
      step->graph.replay();
    } else {
      queue_decode_step(*step);
    }
    const Tensor ids = step->best.slice_rows(0, static_cast<int64_t>(batch.seqs.size())).to(Device::cpu());
    token_ids.assign(ids.data<int32_t>(), ids.data<int32_t>() + ids.numel());
    return;
  }
  // Padding columns would compete in the argmax; the rows are picked from forward()'s then.
  if (shard_.vocab_rows * shard_.size != config_.vocab_size) {
    CausalLm::forward_greedy(batch, token_ids);
    return;
  }
  const Tensor logits = run(batch, nullptr, nullptr);
  token_ids.resize(static_cast<size_t>(logits.dim(0)));
  if (token_ids.empty()) return;
  Tensor best = Tensor::empty({logits.dim(0)}, DType::kI32, device_);
  ops::argmax(logits, best);
  const Tensor host = device_.type == DeviceType::kCpu ? best : best.to(Device::cpu());
  std::copy_n(host.data<int32_t>(), token_ids.size(), token_ids.begin());
}

void DecoderLm::forward_sample(const ForwardBatch& batch, std::span<const ops::SamplingParams> params,
                               std::vector<int32_t>& token_ids) {
  check_has_head("forward_sample");
  if (batch.all_logits) throw_error(ErrorCode::kInvalidArgument, "forward_sample: all_logits is not supported");
  // Padding columns would take part in the draw; the rows are sampled from forward()'s then.
  if (shard_.vocab_rows * shard_.size != config_.vocab_size) {
    CausalLm::forward_sample(batch, params, token_ids);
    return;
  }
  Tensor logits = run(batch, nullptr, nullptr);
  token_ids.resize(static_cast<size_t>(logits.dim(0)));
  if (token_ids.empty()) return;
  // Host ids: ops::sample copies them back once the kernel is done (the step's only wait).
  Tensor ids = Tensor::borrow(token_ids.data(), {logits.dim(0)}, DType::kI32);
  ops::sample(logits, params, ids);
}

bool DecoderLm::steps_run_async() const {
  return device_.type == DeviceType::kCuda && shard_.size == 1 && has_embedding_and_head_ && !moe_reads_back_;
}

void DecoderLm::launch_step(const ForwardBatch& batch, std::span<const ops::SamplingParams> params,
                            std::span<const int32_t> previous_rows) {
  if (!steps_run_async()) {
    CausalLm::launch_step(batch, params, previous_rows);
    return;
  }
  if (launched_steps_ - waited_steps_ >= 2) {
    throw_error(ErrorCode::kInternal, "launch_step: two steps are outstanding; wait for the older one first");
  }
  if (!previous_rows.empty() && previous_rows.size() != batch.token_ids.size()) {
    throw_error(ErrorCode::kInvalidArgument, "launch_step: {} previous rows for {} tokens", previous_rows.size(),
                batch.token_ids.size());
  }
  const AsyncStep* previous = launched_steps_ > 0 ? &async_steps_[(launched_steps_ - 1) % 2] : nullptr;
  // A synchronous fixed-size step since then may have rewritten the ids the previous one left on
  // the device.
  const int64_t previous_count = previous != nullptr && !previous_ids_stale_ ? previous->rows : 0;
  bool reads_previous = false;
  for (size_t i = 0; i < previous_rows.size(); ++i) {
    if (previous_rows[i] < 0) continue;
    if (previous_rows[i] >= previous_count) {
      throw_error(ErrorCode::kInvalidArgument, "launch_step: token {} reads row {} of a previous step with {} rows", i,
                  previous_rows[i], previous_count);
    }
    reads_previous = true;
  }
  AsyncStep& slot = async_steps_[launched_steps_ % 2];
  // The slot's step was waited for (at most two outstanding), so its pinned buffer is free.
  slot.ids = queue_async_step(batch, params, reads_previous ? previous_rows : std::span<const int32_t>(), previous);
  slot.rows = slot.ids.defined() ? slot.ids.numel() : 0;
  if (slot.rows > 0) slot.readback.start(slot.ids);
  previous_ids_stale_ = false;
  if (launched_steps_ > waited_steps_) ++overlapped_launches_;
  ++launched_steps_;
}

Tensor DecoderLm::queue_async_step(const ForwardBatch& batch, std::span<const ops::SamplingParams> params,
                                   std::span<const int32_t> previous_rows, const AsyncStep* previous) {
  const char* caller = params.empty() ? "forward_greedy" : "forward_sample";
  check_has_head(caller);
  if (batch.all_logits) throw_error(ErrorCode::kInvalidArgument, "{}: all_logits is not supported", caller);
  if (params.empty()) {
    if (DecodeStep* step = decode_step_for(batch)) {
      check_batch(batch, batch.token_ids.size());
      upload_step_inputs(batch, *step);
      ++fixed_decode_steps_;
      if (!previous_rows.empty()) {
        // Into the uploaded ids, on the stream before the replay: the recording reads them from there.
        Tensor rows = Tensor::empty({step->rows}, DType::kI32);
        pack_decode_step_previous_rows(batch, previous_rows,
                                       std::span<int32_t>(rows.data<int32_t>(), static_cast<size_t>(step->rows)));
        Tensor ids = step->inputs.slice_rows(0, step->rows);
        ops::substitute_ids(previous->ids, rows, ids);
      }
      if (step->graph.defined()) {
        step->graph.replay();
      } else {
        queue_decode_step(*step);
      }
      // A view: a later step of this size rewrites `best` only in ops queued after this step's
      // readback and after the next step's substitution has read it.
      return step->best.slice_rows(0, static_cast<int64_t>(batch.seqs.size()));
    }
  }
  StepChaining chaining;
  if (!previous_rows.empty()) {
    chaining.previous_ids = previous->ids;
    chaining.rows = Tensor::empty({static_cast<int64_t>(previous_rows.size())}, DType::kI32);
    std::copy(previous_rows.begin(), previous_rows.end(), chaining.rows.data<int32_t>());
  }
  Tensor logits = run(batch, nullptr, nullptr, &chaining);
  const int64_t rows = logits.dim(0);
  if (rows == 0) return Tensor();
  Tensor ids = Tensor::empty({rows}, DType::kI32, device_);
  if (params.empty()) {
    ops::argmax(logits, ids);
  } else {
    ops::sample(logits, params, ids);
  }
  return ids;
}

void DecoderLm::wait_step(std::vector<int32_t>& token_ids) {
  if (!steps_run_async()) {
    CausalLm::wait_step(token_ids);
    return;
  }
  if (waited_steps_ == launched_steps_) {
    throw_error(ErrorCode::kInternal, "wait_step: no launched step is outstanding");
  }
  AsyncStep& slot = async_steps_[waited_steps_ % 2];
  ++waited_steps_;
  token_ids.clear();
  if (slot.rows == 0) return;
  const Tensor host = slot.readback.wait();
  token_ids.assign(host.data<int32_t>(), host.data<int32_t>() + host.numel());
}

DecoderLm::DecodeStep* DecoderLm::decode_step_for(const ForwardBatch& batch) {
  if (decode_steps_.empty() || !batch.input_rows.empty() || batch.capture != nullptr ||
      !fits_decode_step(batch, decode_table_width_)) {
    return nullptr;
  }
  for (DecodeStep& step : decode_steps_) {
    if (step.rows >= static_cast<int64_t>(batch.seqs.size())) return &step;
  }
  return nullptr;
}

void DecoderLm::queue_decode_step(DecodeStep& step) {
  const int64_t n = step.rows, w = decode_table_width_;
  const Tensor ids = step.inputs.slice_rows(0, n);
  const Tensor positions = step.inputs.slice_rows(n, 2 * n);
  const Tensor slots = step.inputs.slice_rows(2 * n, 3 * n);
  const Tensor context_lens = step.inputs.slice_rows(3 * n, 4 * n);
  const Tensor tables = step.inputs.slice_rows(4 * n, 4 * n + n * w).reshape({n, w});
  Tensor h = Tensor::empty({n, config_.hidden_size}, dtype_, device_);
  ops::embedding(embed_tokens_, ids, h);
  Tensor last = run_layers(h, positions, slots, AttentionBatch{{}, context_lens, tables});
  // Every row gives logits, so the last sublayer's output joins the residual stream in the final
  // norm's pass.
  if (last.defined()) {
    ops::add_rms_norm(last, h, final_norm_, config_.rms_norm_eps, last);
  } else {
    last = h;
    ops::rms_norm(h, final_norm_, config_.rms_norm_eps, last);
  }
  const Tensor logits = project_vocabulary(last, Tensor());
  ops::argmax(logits, step.best);
}

bool DecoderLm::prepare_decode_steps(const std::vector<int>& batch_sizes, int max_blocks_per_seq, bool capture_graphs) {
  decode_steps_.clear();
  previous_ids_stale_ = true;
  // A mixture-of-experts layer that routes on the host cannot be recorded; one on the device can.
  if (device_.type != DeviceType::kCuda || shard_.size > 1 || !has_embedding_and_head_ || moe_reads_back_ ||
      batch_sizes.empty() || max_blocks_per_seq < 1 || layers_.empty() || !layers_[0].k_cache.defined()) {
    return false;
  }
  // The fixed-size path needs the decode kernel for this dtype and head size; probe it once.
  const int64_t hd = config_.head_dim;
  try {
    Tensor q = Tensor::zeros({1, shard_.heads, hd}, dtype_, device_);
    Tensor out = Tensor::empty(q.shape(), dtype_, device_);
    Tensor lens = Tensor::empty({1}, DType::kI32);
    lens.data<int32_t>()[0] = -1;
    Tensor tables = Tensor::zeros({1, 1}, DType::kI32);
    ops::paged_decode_attention(q, layers_[0].k_cache, layers_[0].v_cache, lens, tables, 1.0f, 0, out);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnsupported) throw;
    return false;
  }
  check_step_batch_sizes(batch_sizes, "prepare_decode_steps");
  decode_table_width_ = max_blocks_per_seq;
  const int64_t largest = batch_sizes.back();
  decode_staging_ = Tensor::empty({decode_step_inputs_size(largest, decode_table_width_)}, DType::kI32);
  for (int size : batch_sizes) {
    DecodeStep step;
    step.rows = size;
    step.inputs = Tensor::empty({decode_step_inputs_size(size, decode_table_width_)}, DType::kI32, device_);
    step.best = Tensor::empty({size}, DType::kI32, device_);
    decode_steps_.push_back(std::move(step));
  }
  // Every row padding: the recording (and its warm-up run) touches neither the KV cache nor anything
  // else.
  const ForwardBatch all_padding;
  for (DecodeStep& step : decode_steps_) {
    upload_step_inputs(all_padding, step);
    if (capture_graphs) step.graph = tensor::DeviceGraph::capture(device_, [&] { queue_decode_step(step); });
  }
  return true;
}

}  // namespace omni::model
