#include "model/decoder_lm.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "model/safetensors.h"

namespace omni::model {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

DecoderLm::DecoderLm(const std::filesystem::path& dir, const TextModelConfig& config, DecoderVariant variant,
                     tensor::Communicator* tensor_parallel)
    : DecoderLm(dir, config, variant, DecoderWeights{}, tensor_parallel) {}

DecoderLm::DecoderLm(const std::filesystem::path& dir, const TextModelConfig& config, DecoderVariant variant,
                     const DecoderWeights& weights, tensor::Communicator* tensor_parallel)
    : config_(config),
      variant_(variant),
      has_embedding_and_head_(weights.has_embedding_and_head),
      tensor_parallel_(tensor_parallel) {
  if (config.hidden_act != "silu") {
    throw_error(ErrorCode::kUnsupported, "{}/config.json: hidden_act '{}' is not supported (silu)", dir.string(),
                config.hidden_act);
  }
  const int rank = tensor_parallel ? tensor_parallel->rank() : 0;
  shard_ = plan_decoder_shard(config, rank, tensor_parallel ? tensor_parallel->world_size() : 1,
                              (dir / "config.json").string());
  const int64_t hidden = config.hidden_size, hd = config.head_dim, inter_all = config.intermediate_size;
  const int64_t q_out = config.num_attention_heads * hd, kv_out = config.num_key_value_heads * hd;
  // This rank's slices (the whole tensors with one rank).
  const int64_t q_rows = shard_.heads * hd, q_begin = rank * q_rows;
  const int64_t kv_rows = shard_.kv_heads * hd, kv_begin = shard_.kv_head_begin * hd;
  const int64_t inter = shard_.intermediate, inter_begin = rank * inter;
  const Checkpoint ckpt = Checkpoint::open(dir);

  const tensor::Shape vocab_shape{config.vocab_size, hidden};
  if (weights.has_embedding_and_head) {
    embed_tokens_ = load_vocab_shard(ckpt, weights.prefix + "embed_tokens.weight", vocab_shape, shard_.vocab_begin,
                                     shard_.vocab_rows, shard_.vocab_rows + 1);
  }
  final_norm_ = ckpt.load_f32(weights.prefix + "norm.weight", {hidden});
  if (weights.has_embedding_and_head) {
    // A tied checkpoint may still carry lm_head.weight (some exporters write it); the config decides.
    lm_head_ = config.tie_word_embeddings ? embed_tokens_.slice_rows(0, shard_.vocab_rows)
                                          : load_vocab_shard(ckpt, "lm_head.weight", vocab_shape, shard_.vocab_begin,
                                                             shard_.vocab_rows, shard_.vocab_rows);
  }

  layers_.resize(config.num_hidden_layers);
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = weights.prefix + "layers." + std::to_string(i) + ".";
    Layer& l = layers_[i];
    l.input_norm = ckpt.load_f32(p + "input_layernorm.weight", {hidden});
    l.post_attention_norm = ckpt.load_f32(p + "post_attention_layernorm.weight", {hidden});
    l.q_proj = load_row_shard(ckpt, p + "self_attn.q_proj.weight", {q_out, hidden}, q_begin, q_rows);
    l.k_proj = load_row_shard(ckpt, p + "self_attn.k_proj.weight", {kv_out, hidden}, kv_begin, kv_rows);
    l.v_proj = load_row_shard(ckpt, p + "self_attn.v_proj.weight", {kv_out, hidden}, kv_begin, kv_rows);
    l.o_proj = load_column_shard(ckpt, p + "self_attn.o_proj.weight", {hidden, q_out}, q_begin, q_rows);
    if (variant.qkv_bias) {
      l.q_bias = load_row_shard(ckpt, p + "self_attn.q_proj.bias", {q_out}, q_begin, q_rows);
      l.k_bias = load_row_shard(ckpt, p + "self_attn.k_proj.bias", {kv_out}, kv_begin, kv_rows);
      l.v_bias = load_row_shard(ckpt, p + "self_attn.v_proj.bias", {kv_out}, kv_begin, kv_rows);
    }
    if (variant.qk_norm) {
      l.q_norm = ckpt.load_f32(p + "self_attn.q_norm.weight", {hd});
      l.k_norm = ckpt.load_f32(p + "self_attn.k_norm.weight", {hd});
    }
    // Gate and up share one matrix so the MLP's first step is a single product.
    l.gate_up_proj = Tensor::empty({2 * inter, hidden}, DType::kF32);
    ckpt.load_f32_slice_into(p + "mlp.gate_proj.weight", {inter_all, hidden}, 0, inter_begin, inter,
                             l.gate_up_proj.data<float>());
    ckpt.load_f32_slice_into(p + "mlp.up_proj.weight", {inter_all, hidden}, 0, inter_begin, inter,
                             l.gate_up_proj.data<float>() + inter * hidden);
    l.down_proj = load_column_shard(ckpt, p + "mlp.down_proj.weight", {hidden, inter_all}, inter_begin, inter);
  }

  // The engine's positions are one stream; for text all M-RoPE streams are equal, which makes
  // every M-RoPE layout the plain NeoX rotation.
  rope_.layout = ops::RopeLayout::kNeox;
  rope_.theta = config.rope.theta;

  info_.vocab_size = config.vocab_size;
  info_.max_position_embeddings = config.max_position_embeddings;
  const GenerationDefaults defaults = read_generation_defaults(dir);
  info_.eos_token_ids = defaults.eos_token_ids.empty() ? config.eos_token_ids : defaults.eos_token_ids;
}

size_t DecoderLm::kv_bytes_per_block() const {
  return static_cast<size_t>(config_.num_hidden_layers) * 2 * kKvBlockSize * shard_.kv_heads * config_.head_dim *
         sizeof(float);
}

void DecoderLm::init_kv_cache(int num_blocks) {
  if (num_blocks < 0) throw_error(ErrorCode::kInvalidArgument, "init_kv_cache: negative block count {}", num_blocks);
  for (Layer& l : layers_) {
    l.k_cache = Tensor();
    l.v_cache = Tensor();
  }
  for (Layer& l : layers_) {
    const tensor::Shape shape{num_blocks, kKvBlockSize, shard_.kv_heads, config_.head_dim};
    l.k_cache = Tensor::empty(shape, DType::kF32);
    l.v_cache = Tensor::empty(shape, DType::kF32);
  }
  num_blocks_ = num_blocks;
}

void DecoderLm::check_batch(const ForwardBatch& batch, size_t tokens) const {
  if (batch.positions.size() != tokens) {
    throw_error(ErrorCode::kInvalidArgument, "forward: {} positions for {} tokens", batch.positions.size(), tokens);
  }
  // Checked here rather than by the embedding op: a vocabulary shard maps foreign ids to its zero row.
  for (size_t t = 0; t < batch.token_ids.size(); ++t) {
    if (batch.token_ids[t] < 0 || batch.token_ids[t] >= config_.vocab_size) {
      throw_error(ErrorCode::kInvalidArgument, "embedding: token id {} at index {} is outside the vocabulary [0, {})",
                  batch.token_ids[t], t, config_.vocab_size);
    }
  }
  if (!layers_.empty() && !layers_[0].k_cache.defined()) {
    throw_error(ErrorCode::kInvalidArgument, "forward: init_kv_cache was not called");
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

void DecoderLm::forward(const ForwardBatch& batch, std::vector<float>& logits) {
  if (!has_embedding_and_head_) {
    throw_error(ErrorCode::kInvalidArgument, "forward: this decoder stack takes input embeddings (forward_embeds)");
  }
  run(batch, nullptr, &logits, nullptr);
}

void DecoderLm::forward_embeds(const ForwardBatch& batch, const Tensor& inputs_embeds, Tensor& hidden) {
  if (!batch.token_ids.empty() || inputs_embeds.dtype() != DType::kF32 || inputs_embeds.shape().size() != 2 ||
      inputs_embeds.shape()[0] != static_cast<int64_t>(batch.positions.size()) ||
      inputs_embeds.shape()[1] != config_.hidden_size) {
    throw_error(ErrorCode::kInvalidArgument,
                "forward_embeds: inputs_embeds must be float32 [{} positions, {}] with no token ids (got {} token ids)",
                batch.positions.size(), config_.hidden_size, batch.token_ids.size());
  }
  run(batch, &inputs_embeds, nullptr, &hidden);
}

void DecoderLm::run(const ForwardBatch& batch, const Tensor* inputs_embeds, std::vector<float>* logits,
                    Tensor* hidden_out) {
  const int64_t tokens =
      inputs_embeds != nullptr ? inputs_embeds->shape()[0] : static_cast<int64_t>(batch.token_ids.size());
  check_batch(batch, static_cast<size_t>(tokens));
  const int64_t hidden = config_.hidden_size, hd = config_.head_dim, inter = shard_.intermediate;
  const int64_t heads = shard_.heads, kv_heads = shard_.kv_heads;

  // Row ids into the vocabulary shard; ids of other shards read its zero row.
  Tensor ids = Tensor::empty({tokens}, DType::kI32);
  for (int64_t t = 0; inputs_embeds == nullptr && t < tokens; ++t) {
    const int64_t local = batch.token_ids[t] - shard_.vocab_begin;
    ids.data<int32_t>()[t] = static_cast<int32_t>(local >= 0 && local < shard_.vocab_rows ? local : shard_.vocab_rows);
  }
  Tensor positions = Tensor::empty({tokens}, DType::kI32);
  std::copy(batch.positions.begin(), batch.positions.end(), positions.data<int32_t>());
  Tensor slots = Tensor::empty({tokens}, DType::kI32);
  std::vector<ops::PagedSequence> seqs;
  for (const SequenceSlice& seq : batch.seqs) {
    for (int32_t i = 0; i < seq.query_len; ++i) {
      const int32_t pos = seq.context_len + i;
      slots.data<int32_t>()[seq.query_start + i] =
          seq.block_table[pos / kKvBlockSize] * kKvBlockSize + pos % kKvBlockSize;
    }
    seqs.push_back({seq.query_start, seq.query_len, seq.context_len, seq.block_table});
  }

  Tensor h = Tensor::empty({tokens, hidden}, DType::kF32);
  if (inputs_embeds != nullptr) {
    std::copy_n(inputs_embeds->data<float>(), tokens * hidden, h.data<float>());
  } else {
    ops::embedding(embed_tokens_, ids, h);
    reduce_partial_sums(h);
  }
  Tensor x = Tensor::empty({tokens, hidden}, DType::kF32);
  Tensor q = Tensor::empty({tokens, heads * hd}, DType::kF32);
  Tensor k = Tensor::empty({tokens, kv_heads * hd}, DType::kF32);
  Tensor v = Tensor::empty({tokens, kv_heads * hd}, DType::kF32);
  Tensor attn = Tensor::empty({tokens, heads, hd}, DType::kF32);
  Tensor proj = Tensor::empty({tokens, hidden}, DType::kF32);
  Tensor gate_up = Tensor::empty({tokens, 2 * inter}, DType::kF32);
  Tensor act = Tensor::empty({tokens, inter}, DType::kF32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    ops::rms_norm(h, l.input_norm, config_.rms_norm_eps, x);
    ops::linear(x, l.q_proj, l.q_bias, q);
    ops::linear(x, l.k_proj, l.k_bias, k);
    ops::linear(x, l.v_proj, l.v_bias, v);
    Tensor q_heads = q.reshape({tokens, heads, hd});
    Tensor k_heads = k.reshape({tokens, kv_heads, hd});
    if (variant_.qk_norm) {
      ops::rms_norm(q_heads, l.q_norm, config_.rms_norm_eps, q_heads);
      ops::rms_norm(k_heads, l.k_norm, config_.rms_norm_eps, k_heads);
    }
    ops::rotary_embedding(q_heads, positions, rope_);
    ops::rotary_embedding(k_heads, positions, rope_);
    ops::store_kv(k_heads, v.reshape({tokens, kv_heads, hd}), slots, l.k_cache, l.v_cache);
    ops::paged_attention(q_heads, l.k_cache, l.v_cache, seqs, scale, config_.sliding_window[i], attn);
    ops::linear(attn.reshape({tokens, heads * hd}), l.o_proj, Tensor(), proj);
    reduce_partial_sums(proj);
    ops::add(h, proj, h);
    ops::rms_norm(h, l.post_attention_norm, config_.rms_norm_eps, x);
    ops::linear(x, l.gate_up_proj, Tensor(), gate_up);
    ops::silu_and_mul(gate_up, act);
    ops::linear(act, l.down_proj, Tensor(), proj);
    reduce_partial_sums(proj);
    ops::add(h, proj, h);
  }

  // Only the rows that produce logits go through the final norm and the vocabulary projection.
  std::vector<int64_t> rows;
  if (batch.all_logits) {
    for (int64_t t = 0; t < tokens; ++t) rows.push_back(t);
  } else {
    for (const SequenceSlice& seq : batch.seqs) {
      if (seq.wants_logits && seq.query_len > 0) rows.push_back(seq.query_start + seq.query_len - 1);
    }
  }
  const int64_t r = static_cast<int64_t>(rows.size());
  Tensor picked = Tensor::empty({r, hidden}, DType::kF32);
  for (int64_t i = 0; i < r; ++i) {
    std::copy_n(h.data<float>() + rows[i] * hidden, hidden, picked.data<float>() + i * hidden);
  }
  ops::rms_norm(picked, final_norm_, config_.rms_norm_eps, picked);
  if (hidden_out != nullptr) *hidden_out = picked;
  if (logits == nullptr) return;
  logits->resize(static_cast<size_t>(r) * config_.vocab_size);
  Tensor out = Tensor::borrow(logits->data(), {r, config_.vocab_size}, DType::kF32);
  if (r > 0) project_vocabulary(picked, out);
}

void DecoderLm::reduce_partial_sums(Tensor& x) {
  if (shard_.size > 1) tensor_parallel_->all_reduce_sum(x);
}

void DecoderLm::project_vocabulary(const Tensor& picked, Tensor& out) {
  if (shard_.size == 1) {
    ops::linear(picked, lm_head_, Tensor(), out);
    return;
  }
  const int64_t r = picked.dim(0), rows = shard_.vocab_rows, vocab = config_.vocab_size;
  Tensor local = Tensor::empty({r, rows}, DType::kF32);
  ops::linear(picked, lm_head_, Tensor(), local);
  Tensor gathered = Tensor::empty({shard_.size, r, rows}, DType::kF32);
  tensor_parallel_->all_gather(local, gathered);
  // [rank, row, shard column] -> [row, vocabulary id], dropping the last shard's padding.
  for (int rank = 0; rank < shard_.size; ++rank) {
    const int64_t begin = rank * rows, count = std::min(rows, vocab - begin);
    for (int64_t i = 0; count > 0 && i < r; ++i) {
      std::copy_n(gathered.data<float>() + (rank * r + i) * rows, count, out.data<float>() + i * vocab + begin);
    }
  }
}

}  // namespace omni::model
