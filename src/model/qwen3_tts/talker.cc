#include "model/qwen3_tts/talker.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "model/decode_step_inputs.h"
#include "model/safetensors.h"
#include "tensor/dtype.h"
#include "tensor/ops.h"
#include "tensor/sample_packed.h"

namespace omni::model::qwen3_tts {

using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

namespace {

constexpr DecoderVariant kQwen3Layer{.qk_norm = true, .qkv_bias = false};

// Sequences of the predictor fit in few blocks: one frame is num_code_groups positions.
int blocks_for(int positions) { return (positions + kKvBlockSize - 1) / kKvBlockSize; }

// Records `queue` into `graph`, or with `capture_graphs` false runs it once eagerly (the warm-up
// of the eager twin). False when one of its ops has no capturable form on this device
// (kUnsupported): the caller then keeps its ordinary path.
template <typename Queue>
bool record_step(tensor::Device device, bool capture_graphs, tensor::DeviceGraph& graph, Queue&& queue) {
  try {
    if (capture_graphs) {
      graph = tensor::DeviceGraph::capture(device, queue);
    } else {
      queue();
    }
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnsupported) throw;
    return false;
  }
  return true;
}

}  // namespace

Talker::Talker(const std::filesystem::path& dir, TalkerConfig config, tensor::Device device, bool random_weights,
               std::optional<tensor::DType> dtype)
    : config_(std::move(config)),
      talker_(dir, config_.talker, kQwen3Layer,
              DecoderWeights{.prefix = "talker.model.", .has_embedding_and_head = false},
              {.device = device, .dtype = dtype, .random_weights = random_weights}),
      predictor_(dir, config_.code_predictor, kQwen3Layer,
                 DecoderWeights{.prefix = "talker.code_predictor.model.", .has_embedding_and_head = false},
                 {.device = device, .dtype = dtype, .random_weights = random_weights}) {
  const Checkpoint ckpt = random_weights ? Checkpoint::random(dir, 0) : Checkpoint::open(dir);
  const int64_t h = config_.talker.hidden_size, h_cp = config_.code_predictor.hidden_size;
  const int64_t vocab = config_.talker.vocab_size, codebook = config_.code_predictor.vocab_size;
  const int64_t text_hidden = config_.text_hidden_size;
  codec_embedding_ = ckpt.load_f32("talker.model.codec_embedding.weight", {vocab, h});
  codec_head_ = on_device(ckpt.load_f32("talker.codec_head.weight", {vocab, h}));
  Tensor padded = Tensor::zeros({vocab + 1, h}, DType::kF32);
  std::copy_n(codec_embedding_.data<float>(), vocab * h, padded.data<float>());
  padded_codec_embedding_ = on_device(padded);
  // The projections run where the stacks do: on the host they were milliseconds of float32
  // products per prompt in the stage's loop, which every request queued behind them waited for.
  if (config_.text_vocab_size > 0) {
    text_embedding_ =
        on_device(ckpt.load_f32("talker.model.text_embedding.weight", {config_.text_vocab_size, text_hidden}));
  }
  text_projection_ = load_projection(ckpt, "talker.text_projection");
  if (config_.hidden_projection) hidden_projection_ = load_projection(ckpt, "talker.hidden_projection");
  // 1.7B: the predictor is narrower than the talker and every predictor input goes through this
  // projection; 0.6B has equal widths and no tensor (an identity).
  // (A random checkpoint holds every name: there the widths decide.)
  if ((!ckpt.is_random() && ckpt.contains("talker.code_predictor.small_to_mtp_projection.weight")) || h != h_cp) {
    mtp_projection_w_ = on_device(ckpt.load_f32("talker.code_predictor.small_to_mtp_projection.weight", {h_cp, h}));
    mtp_projection_b_ = on_device(ckpt.load_f32("talker.code_predictor.small_to_mtp_projection.bias", {h_cp}));
  }
  for (int g = 0; g + 1 < config_.num_code_groups; ++g) {
    const std::string i = std::to_string(g);
    predictor_embeddings_.push_back(
        ckpt.load_f32("talker.code_predictor.model.codec_embedding." + i + ".weight", {codebook, h}));
    device_predictor_embeddings_.push_back(on_device(predictor_embeddings_.back()));
    predictor_heads_.push_back(
        on_device(ckpt.load_f32("talker.code_predictor.lm_head." + i + ".weight", {codebook, h_cp})));
  }
  predictor_blocks_per_slot_ = blocks_for(config_.num_code_groups);
}

Talker::ProjectionWeights Talker::load_projection(const Checkpoint& ckpt, const std::string& name) const {
  // fc1 gets a second half that is constantly one (zero weights, bias one), so that SiLU(fc1(x))
  // is the silu_and_mul the stacks use: SiLU(fc1(x)) * 1.
  const int64_t text_hidden = config_.text_hidden_size, h = hidden_size();
  const int64_t inner = config_.projection_size > 0 ? config_.projection_size : text_hidden;
  Tensor fc1_w = Tensor::zeros({2 * inner, text_hidden}, DType::kF32);
  Tensor fc1_b = Tensor::zeros({2 * inner}, DType::kF32);
  ckpt.load_f32_into(name + ".linear_fc1.weight", {inner, text_hidden}, fc1_w.data<float>());
  ckpt.load_f32_into(name + ".linear_fc1.bias", {inner}, fc1_b.data<float>());
  std::fill_n(fc1_b.data<float>() + inner, inner, 1.0f);
  return ProjectionWeights{on_device(fc1_w), on_device(fc1_b),
                           on_device(ckpt.load_f32(name + ".linear_fc2.weight", {h, inner})),
                           on_device(ckpt.load_f32(name + ".linear_fc2.bias", {h}))};
}

Tensor Talker::on_device(const Tensor& host) const {
  return device().type == tensor::DeviceType::kCpu ? host : talker_.place(host);
}

void Talker::logits_to_host(const Tensor& device_logits, std::vector<float>& logits) {
  logits.resize(static_cast<size_t>(device_logits.numel()));
  if (logits.empty()) return;
  const Tensor host =
      device_logits.device().type == tensor::DeviceType::kCpu ? device_logits : device_logits.to(tensor::Device::cpu());
  tensor::convert_to_f32(host.dtype(), host.raw(), logits.data(), logits.size());
}

Tensor Talker::project_text(std::span<const int32_t> ids) const {
  const int64_t n = static_cast<int64_t>(ids.size()), text_hidden = config_.text_hidden_size;
  if (n == 0) return Tensor::empty({0, hidden_size()}, DType::kF32);
  if (!text_embedding_.defined()) {
    throw_error(ErrorCode::kInvalidArgument, "this talker has no text embedding: its text rows come from its caller");
  }
  Tensor id_tensor = Tensor::empty({n}, DType::kI32);
  std::copy(ids.begin(), ids.end(), id_tensor.data<int32_t>());
  Tensor embedded = Tensor::empty({n, text_hidden}, text_embedding_.dtype(), device());
  ops::embedding(text_embedding_, id_tensor, embedded);
  return project(embedded, text_projection_);
}

Tensor Talker::project_rows(const Tensor& rows, Projection projection) const {
  const ProjectionWeights& p = projection == Projection::kText ? text_projection_ : hidden_projection_;
  if (!p.fc1_w.defined()) throw_error(ErrorCode::kInvalidArgument, "this talker has no hidden_projection");
  if (rows.rank() != 2 || rows.dim(1) != config_.text_hidden_size) {
    throw_error(ErrorCode::kInvalidArgument, "the talker projects rows of {} values, not of shape {}",
                config_.text_hidden_size, tensor::shape_to_string(rows.shape()));
  }
  if (rows.dim(0) == 0) return Tensor::empty({0, hidden_size()}, DType::kF32);
  return project(on_device(rows), p);
}

Tensor Talker::project(const Tensor& rows, const ProjectionWeights& p) const {
  const int64_t n = rows.dim(0), h = hidden_size(), inner = p.fc1_w.dim(0) / 2;
  const DType dtype = rows.dtype();
  Tensor wide = Tensor::empty({n, 2 * inner}, dtype, device());
  ops::linear(rows, p.fc1_w, p.fc1_b, wide);
  Tensor activated = Tensor::empty({n, inner}, dtype, device());
  ops::silu_and_mul(wide, activated);
  Tensor out = Tensor::empty({n, h}, dtype, device());
  ops::linear(activated, p.fc2_w, p.fc2_b, out);
  if (out.device().type == tensor::DeviceType::kCpu && out.dtype() == DType::kF32) return out;
  std::vector<float> values;
  logits_to_host(out, values);
  Tensor host = Tensor::empty({n, h}, DType::kF32);
  std::copy(values.begin(), values.end(), host.data<float>());
  return host;
}

void Talker::add_codec_embedding(int32_t id, float* row) const {
  if (id < 0 || id >= codec_vocab_size()) {
    throw_error(ErrorCode::kInvalidArgument, "codec id {} is outside the talker's codec vocabulary of {}", id,
                codec_vocab_size());
  }
  const int64_t h = hidden_size();
  const float* e = codec_embedding_.data<float>() + id * h;
  for (int64_t i = 0; i < h; ++i) row[i] += e[i];
}

void Talker::add_frame_embedding(std::span<const int32_t> codes, float* row) const {
  if (static_cast<int>(codes.size()) != num_code_groups()) {
    throw_error(ErrorCode::kInvalidArgument, "a frame has {} codes, the talker {} codebooks", codes.size(),
                num_code_groups());
  }
  add_codec_embedding(codes[0], row);
  const int64_t h = hidden_size();
  for (size_t g = 1; g < codes.size(); ++g) {
    if (codes[g] < 0 || codes[g] >= codebook_size()) {
      throw_error(ErrorCode::kInvalidArgument, "code {} of codebook {} is outside [0, {})", codes[g], g,
                  codebook_size());
    }
    const float* e = predictor_embeddings_[g - 1].data<float>() + codes[g] * h;
    for (int64_t i = 0; i < h; ++i) row[i] += e[i];
  }
}

void Talker::forward(const ForwardBatch& batch, const Tensor& inputs_embeds, std::vector<float>& logits,
                     Tensor& hidden) {
  talker_.forward_embeds(batch, inputs_embeds, hidden);
  const int64_t rows = hidden.shape()[0];
  Tensor out = Tensor::empty({rows, static_cast<int64_t>(codec_vocab_size())}, hidden.dtype(), device());
  if (rows > 0) ops::linear(hidden, codec_head_, Tensor(), out);
  logits_to_host(out, logits);
}

void Talker::init_kv_cache(int num_blocks) {
  decode_steps_.clear();
  talker_.init_kv_cache(num_blocks);
  talker_blocks_ = num_blocks;
}

void Talker::forward_frames(const ForwardBatch& batch, std::span<const int32_t> slots, std::span<const int32_t> frames,
                            std::span<const float* const> text, std::vector<float>& logits, Tensor& hidden) {
  const size_t n = batch.seqs.size(), groups = static_cast<size_t>(num_code_groups());
  if (slots.size() != n || text.size() != n || frames.size() != n * groups || !batch.token_ids.empty() ||
      batch.positions.size() != n) {
    throw_error(ErrorCode::kInvalidArgument,
                "forward_frames: {} slices, {} positions, {} slots, {} text rows, {} codes ({} per frame) and {} token "
                "ids",
                n, batch.positions.size(), slots.size(), text.size(), frames.size(), groups, batch.token_ids.size());
  }
  for (size_t i = 0; i < n; ++i) {
    const SequenceSlice& seq = batch.seqs[i];
    if (seq.query_start != static_cast<int32_t>(i) || seq.query_len != 1 || !seq.wants_logits || text[i] == nullptr) {
      throw_error(ErrorCode::kInvalidArgument,
                  "forward_frames: slice {} must be one decode row at {} that wants logits, with a text row", i, i);
    }
    for (size_t g = 0; g < groups; ++g) {
      const int32_t code = frames[i * groups + g];
      const int32_t limit = g == 0 ? codec_vocab_size() : codebook_size();
      if (code < 0 || code >= limit) {
        throw_error(ErrorCode::kInvalidArgument, "forward_frames: code {} of codebook {} in row {} is outside [0, {})",
                    code, g, i, limit);
      }
    }
  }
  DecodeStep* step = decode_step_for(batch);
  if (step == nullptr) {
    forward_frames_on_host(batch, frames, text, logits, hidden);
    return;
  }
  upload_decode_inputs(batch, slots, frames, text, *step);
  if (step->graph.defined()) {
    step->graph.replay();
  } else {
    queue_decode_step(*step);
  }
  hidden = step->hidden.slice_rows(0, static_cast<int64_t>(n));
  logits_to_host(step->logits.slice_rows(0, static_cast<int64_t>(n)), logits);
}

void Talker::forward_frames_on_host(const ForwardBatch& batch, std::span<const int32_t> frames,
                                    std::span<const float* const> text, std::vector<float>& logits, Tensor& hidden) {
  const int64_t n = static_cast<int64_t>(batch.seqs.size()), h = hidden_size();
  const size_t groups = static_cast<size_t>(num_code_groups());
  Tensor rows = Tensor::empty({n, h}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) {
    float* row = rows.data<float>() + i * h;
    std::copy_n(text[i], h, row);
    add_frame_embedding(frames.subspan(static_cast<size_t>(i) * groups, groups), row);
  }
  forward(batch, rows, logits, hidden);
}

Talker::DecodeStep* Talker::decode_step_for(const ForwardBatch& batch) {
  if (decode_steps_.empty()) return nullptr;
  // fits_decode_step reads one token id per slice; a decode row's code0 stands in for it.
  for (const SequenceSlice& seq : batch.seqs) {
    const int64_t blocks = (static_cast<int64_t>(seq.context_len) + kKvBlockSize) / kKvBlockSize;
    if (blocks > decode_table_width_ || static_cast<int64_t>(seq.block_table.size()) < blocks) return nullptr;
    // The kernels would read and write any block the table names; forward() checks the same.
    for (int64_t b = 0; b < blocks; ++b) {
      if (seq.block_table[b] < 0 || seq.block_table[b] >= talker_blocks_) {
        throw_error(ErrorCode::kInvalidArgument, "forward_frames: a slice names KV block {}, the cache has {}",
                    seq.block_table[b], talker_blocks_);
      }
    }
  }
  for (DecodeStep& step : decode_steps_) {
    if (step.rows >= static_cast<int64_t>(batch.seqs.size())) return &step;
  }
  return nullptr;
}

void Talker::upload_decode_inputs(const ForwardBatch& batch, std::span<const int32_t> slots,
                                  std::span<const int32_t> frames, std::span<const float* const> text,
                                  DecodeStep& step) {
  const int64_t n = static_cast<int64_t>(batch.seqs.size()), rows = step.rows, h = hidden_size();
  const int64_t groups = num_code_groups(), width = decode_table_width_;
  const Tensor host = decode_staging_.slice_rows(0, step.inputs.dim(0));
  int32_t* ints = host.data<int32_t>();
  ForwardBatch with_ids = batch;
  for (int64_t i = 0; i < n; ++i) with_ids.token_ids.push_back(frames[i * groups]);
  const int64_t packed = decode_step_inputs_size(rows, width);
  pack_decode_step_inputs(with_ids, rows, width, std::span<int32_t>(ints, static_cast<size_t>(packed)));
  int32_t* codes = ints + packed;
  int32_t* text_slots = codes + (groups - 1) * rows;
  std::fill(codes, text_slots + rows, 0);
  // The text rows that changed since their slot's last step go up in one copy of the span of
  // slots they cover (most steps: none, as the text track ends in tts_pad).
  int64_t first = -1, last = -1;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t slot = slots[i];
    if (slot < 0 || slot >= predictor_slots_) {
      throw_error(ErrorCode::kInvalidArgument, "forward_frames: slot {} of row {} is outside the {} slots", slot, i,
                  predictor_slots_);
    }
    for (int64_t g = 1; g < groups; ++g) codes[(g - 1) * rows + i] = frames[i * groups + g];
    text_slots[i] = slot;
    float* known = slot_text_f32_.data<float>() + slot * h;
    if (slot_text_set_[slot] && std::equal(text[i], text[i] + h, known)) continue;
    std::copy_n(text[i], h, known);
    auto* staged = static_cast<uint16_t*>(slot_text_staged_.raw()) + slot * h;
    const bool bf16 = slot_text_staged_.dtype() == DType::kBF16;
    for (int64_t k = 0; k < h; ++k) staged[k] = bf16 ? tensor::f32_to_bf16(known[k]) : tensor::f32_to_f16(known[k]);
    slot_text_set_[slot] = true;
    first = first < 0 ? slot : std::min<int64_t>(first, slot);
    last = std::max<int64_t>(last, slot);
  }
  if (first >= 0) {
    Tensor span = slot_text_.slice_rows(first, last + 1);
    ops::upload(slot_text_staged_.slice_rows(first, last + 1), span);
  }
  ops::upload(host, step.inputs);
}

bool Talker::prepare_decode_steps(const std::vector<int>& batch_sizes, int max_blocks_per_seq, bool capture_graphs) {
  decode_steps_.clear();
  const DType dtype = talker_.dtype();
  if (device().type != tensor::DeviceType::kCuda || predictor_slots_ == 0 || batch_sizes.empty() ||
      max_blocks_per_seq < 1 || (dtype != DType::kBF16 && dtype != DType::kF16)) {
    return false;
  }
  check_step_batch_sizes(batch_sizes, "prepare_decode_steps");
  const int64_t h = hidden_size(), groups = num_code_groups();
  decode_table_width_ = max_blocks_per_seq;
  auto inputs_size = [&](int64_t rows) { return decode_step_inputs_size(rows, decode_table_width_) + groups * rows; };
  decode_staging_ = Tensor::empty({inputs_size(batch_sizes.back())}, DType::kI32);
  slot_text_ = Tensor::zeros({predictor_slots_, h}, dtype, device());
  slot_text_f32_ = Tensor::zeros({predictor_slots_, h}, DType::kF32);
  slot_text_staged_ = Tensor::zeros({predictor_slots_, h}, dtype);
  slot_text_set_.assign(static_cast<size_t>(predictor_slots_), false);
  for (int size : batch_sizes) {
    DecodeStep step;
    step.rows = size;
    step.inputs = Tensor::empty({inputs_size(size)}, DType::kI32, device());
    step.hidden = Tensor::zeros({size, h}, dtype, device());
    step.logits = Tensor::zeros({size, static_cast<int64_t>(codec_vocab_size())}, dtype, device());
    decode_steps_.push_back(std::move(step));
  }
  // Every row padding: the warm-up runs and the recordings write no KV slot.
  for (DecodeStep& step : decode_steps_) {
    const Tensor host = decode_staging_.slice_rows(0, step.inputs.dim(0));
    int32_t* ints = host.data<int32_t>();
    const int64_t packed = decode_step_inputs_size(step.rows, decode_table_width_);
    pack_decode_step_inputs(ForwardBatch{}, step.rows, decode_table_width_,
                            std::span<int32_t>(ints, static_cast<size_t>(packed)));
    std::fill(ints + packed, ints + host.numel(), 0);
    ops::upload(host, step.inputs);
    if (!record_step(device(), capture_graphs, step.graph, [&] { queue_decode_step(step); })) {
      decode_steps_.clear();
      return false;
    }
  }
  return true;
}

void Talker::queue_decode_step(DecodeStep& step) {
  const int64_t rows = step.rows, width = decode_table_width_, groups = num_code_groups(), h = hidden_size();
  const DType dtype = talker_.dtype();
  auto part = [&](int64_t index) { return step.inputs.slice_rows(index * rows, (index + 1) * rows); };
  const Tensor tables = step.inputs.slice_rows(4 * rows, 4 * rows + rows * width).reshape({rows, width});
  const int64_t extra = decode_step_inputs_size(rows, width);
  auto extra_part = [&](int64_t index) {
    return step.inputs.slice_rows(extra + index * rows, extra + (index + 1) * rows);
  };
  // The G codebook embeddings of each row side by side ([G * rows, H]: codebook g in rows
  // [g * rows, (g + 1) * rows)), summed pairwise: half the blocks onto the other half per add.
  Tensor embedded = Tensor::empty({groups * rows, h}, dtype, device());
  Tensor code0_rows = embedded.slice_rows(0, rows);
  ops::embedding(padded_codec_embedding_, part(0), code0_rows);
  for (int64_t g = 1; g < groups; ++g) {
    Tensor out = embedded.slice_rows(g * rows, (g + 1) * rows);
    ops::embedding(device_predictor_embeddings_[g - 1], extra_part(g - 1), out);
  }
  for (int64_t count = groups; count > 1;) {
    const int64_t half = count / 2;
    Tensor low = embedded.slice_rows(0, half * rows);
    ops::add(low, embedded.slice_rows((count - half) * rows, count * rows), low);
    count -= half;
  }
  Tensor text = Tensor::empty({rows, h}, dtype, device());
  ops::embedding(slot_text_, extra_part(groups - 1), text);
  ops::add(embedded.slice_rows(0, rows), text, step.hidden);
  talker_.decode_embeds(step.hidden, part(1), part(2), part(3), tables);
  ops::linear(step.hidden, codec_head_, Tensor(), step.logits);
}

void Talker::init_predictor_cache(int num_slots) {
  // The recordings hold the old cache's addresses (and the decode steps the old slot count).
  frame_steps_.clear();
  decode_steps_.clear();
  predictor_.init_kv_cache(num_slots * predictor_blocks_per_slot_);
  predictor_slots_ = num_slots;
}

Tensor Talker::run_predictor(const ForwardBatch& batch, const Tensor& rows, int head) {
  const int64_t n = rows.shape()[0];
  Tensor inputs = rows;
  if (mtp_projection_w_.defined()) {
    inputs = Tensor::empty({n, static_cast<int64_t>(config_.code_predictor.hidden_size)}, rows.dtype(), device());
    ops::linear(rows, mtp_projection_w_, mtp_projection_b_, inputs);
  }
  Tensor hidden;
  predictor_.forward_embeds(batch, inputs, hidden);
  const int64_t out_rows = hidden.shape()[0];
  Tensor logits = Tensor::empty({out_rows, static_cast<int64_t>(codebook_size())}, hidden.dtype(), device());
  if (out_rows > 0) ops::linear(hidden, predictor_heads_[head], Tensor(), logits);
  return logits;
}

namespace {

// A batch of one predictor sequence per slot, `len` new positions after `context` cached ones.
ForwardBatch predictor_batch(std::span<const int32_t> slots, int blocks_per_slot, int slot_count, int len,
                             int context) {
  ForwardBatch batch;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] < 0 || slots[i] >= slot_count) {
      throw_error(ErrorCode::kInvalidArgument, "code predictor slot {} is outside the {} slots", slots[i], slot_count);
    }
    SequenceSlice seq;
    seq.query_start = static_cast<int32_t>(i) * len;
    seq.query_len = len;
    seq.context_len = context;
    for (int b = 0; b < blocks_per_slot; ++b) seq.block_table.push_back(slots[i] * blocks_per_slot + b);
    batch.seqs.push_back(std::move(seq));
    for (int p = 0; p < len; ++p) batch.positions.push_back(context + p);
  }
  return batch;
}

}  // namespace

void Talker::predictor_prefill(std::span<const int32_t> slots, const Tensor& hidden, std::span<const int32_t> code0s,
                               std::vector<float>& logits) {
  const int64_t n = static_cast<int64_t>(slots.size()), h = hidden_size();
  if (code0s.size() != slots.size() || hidden.shape().size() != 2 || hidden.shape()[0] != n || hidden.shape()[1] != h) {
    throw_error(ErrorCode::kInvalidArgument, "predictor_prefill: {} slots, {} codes and hidden {}", n, code0s.size(),
                tensor::shape_to_string(hidden.shape()));
  }
  // The rows are built on the host: forward()'s hidden states come back from the device first.
  std::vector<float> host_hidden;
  logits_to_host(hidden, host_hidden);
  Tensor rows = Tensor::zeros({2 * n, h}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(host_hidden.data() + i * h, h, rows.data<float>() + 2 * i * h);
    add_codec_embedding(code0s[i], rows.data<float>() + (2 * i + 1) * h);
  }
  logits_to_host(
      run_predictor(predictor_batch(slots, predictor_blocks_per_slot_, predictor_slots_, 2, 0), on_device(rows), 0),
      logits);
}

void Talker::predictor_step(int group, std::span<const int32_t> slots, std::span<const int32_t> prev_codes,
                            std::vector<float>& logits) {
  if (group < 2 || group >= num_code_groups() || prev_codes.size() != slots.size()) {
    throw_error(ErrorCode::kInvalidArgument, "predictor_step: group {} (2..{}) with {} codes for {} slots", group,
                num_code_groups() - 1, prev_codes.size(), slots.size());
  }
  const int64_t n = static_cast<int64_t>(slots.size()), h = hidden_size();
  const Tensor& table = predictor_embeddings_[group - 2];
  Tensor rows = Tensor::empty({n, h}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) {
    if (prev_codes[i] < 0 || prev_codes[i] >= codebook_size()) {
      throw_error(ErrorCode::kInvalidArgument, "code {} of codebook {} is outside [0, {})", prev_codes[i], group - 1,
                  codebook_size());
    }
    std::copy_n(table.data<float>() + prev_codes[i] * h, h, rows.data<float>() + i * h);
  }
  logits_to_host(run_predictor(predictor_batch(slots, predictor_blocks_per_slot_, predictor_slots_, 1, group),
                               on_device(rows), group - 1),
                 logits);
}

void Talker::predict_frames(std::span<const int32_t> slots, const Tensor& hidden, std::span<const int32_t> code0s,
                            std::span<const ops::SamplingParams> params, std::vector<int32_t>& codes) {
  const int64_t n = static_cast<int64_t>(slots.size()), h = hidden_size();
  const int groups = num_code_groups() - 1;
  if (code0s.size() != slots.size() || params.size() != slots.size() || hidden.shape().size() != 2 ||
      hidden.shape()[0] != n || hidden.shape()[1] != h) {
    throw_error(ErrorCode::kInvalidArgument, "predict_frames: {} slots, {} codes, {} sampling parameters and hidden {}",
                n, code0s.size(), params.size(), tensor::shape_to_string(hidden.shape()));
  }
  codes.assign(static_cast<size_t>(n * groups), 0);
  if (n == 0) return;
  const int32_t vocab = codec_vocab_size();
  for (int32_t code : code0s) {
    if (code < 0 || code >= vocab) {
      throw_error(ErrorCode::kInvalidArgument, "codec id {} is outside the talker's codec vocabulary of {}", code,
                  vocab);
    }
  }
  if (FrameStep* step = frame_step_for(n, params)) {
    const int64_t rows = step->rows;
    const Tensor host = frame_staging_.slice_rows(0, step->inputs.dim(0));
    pack_frame_inputs(slots, code0s, rows, std::span<int32_t>(host.data<int32_t>(), static_cast<size_t>(host.numel())));
    ops::upload(host, step->inputs);
    std::vector<ops::SamplingParams> padded(params.begin(), params.end());
    padded.resize(static_cast<size_t>(rows));
    ops::write_sampling_params(padded, step->params);
    Tensor all_rows = Tensor::empty({n}, DType::kI32);
    for (int64_t i = 0; i < n; ++i) all_rows.data<int32_t>()[i] = static_cast<int32_t>(i);
    Tensor hidden_rows = step->hidden.slice_rows(0, n);
    ops::embedding(hidden, all_rows, hidden_rows);
    if (step->graph.defined()) {
      step->graph.replay();
    } else {
      queue_frame_step(*step);
    }
    const Tensor drawn = step->drawn.to(tensor::Device::cpu());
    for (int g = 0; g < groups; ++g) {
      for (int64_t i = 0; i < n; ++i) codes[i * groups + g] = drawn.data<int32_t>()[g * rows + i];
    }
    return;
  }
  const DType dtype = hidden.dtype();
  // The prefill rows [hidden_i, codec_embedding[code0_i]] per slot, without leaving the device: the
  // sum of a gather of the hidden states (a zero row at the odd positions) and one of the codec
  // embeddings (the zero row at the even positions).
  Tensor padded_hidden = Tensor::zeros({n + 1, h}, dtype, device());
  Tensor hidden_body = padded_hidden.slice_rows(0, n);
  Tensor all_rows = Tensor::empty({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) all_rows.data<int32_t>()[i] = static_cast<int32_t>(i);
  ops::embedding(hidden, all_rows, hidden_body);
  Tensor hidden_ids = Tensor::empty({2 * n}, DType::kI32), code_ids = Tensor::empty({2 * n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) {
    hidden_ids.data<int32_t>()[2 * i] = static_cast<int32_t>(i);
    hidden_ids.data<int32_t>()[2 * i + 1] = static_cast<int32_t>(n);
    code_ids.data<int32_t>()[2 * i] = vocab;
    code_ids.data<int32_t>()[2 * i + 1] = code0s[i];
  }
  Tensor from_hidden = Tensor::empty({2 * n, h}, dtype, device());
  Tensor from_codes = Tensor::empty({2 * n, h}, dtype, device());
  ops::embedding(padded_hidden, hidden_ids, from_hidden);
  ops::embedding(padded_codec_embedding_, code_ids, from_codes);
  Tensor rows = Tensor::empty({2 * n, h}, dtype, device());
  ops::add(from_hidden, from_codes, rows);

  // Codebook g's codes land in row g-1; each step's gather reads the previous row on the device.
  Tensor drawn = Tensor::empty({groups, n}, DType::kI32, device());
  std::vector<ops::SamplingParams> step_params(params.begin(), params.end());
  for (int g = 1; g <= groups; ++g) {
    Tensor logits;
    if (g == 1) {
      logits = run_predictor(predictor_batch(slots, predictor_blocks_per_slot_, predictor_slots_, 2, 0), rows, 0);
    } else {
      Tensor step_rows = Tensor::empty({n, h}, dtype, device());
      ops::embedding(device_predictor_embeddings_[g - 2], drawn.slice_rows(g - 2, g - 1).reshape({n}), step_rows);
      logits =
          run_predictor(predictor_batch(slots, predictor_blocks_per_slot_, predictor_slots_, 1, g), step_rows, g - 1);
    }
    for (size_t i = 0; i < step_params.size(); ++i) step_params[i].step = params[i].step + g - 1;
    Tensor ids = drawn.slice_rows(g - 1, g).reshape({n});
    ops::sample(logits, step_params, ids);
  }
  const Tensor host = device().type == tensor::DeviceType::kCpu ? drawn : drawn.to(tensor::Device::cpu());
  const int32_t* out = host.data<int32_t>();
  for (int g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < n; ++i) codes[i * groups + g] = out[g * n + i];
  }
}

bool Talker::prepare_frame_steps(const std::vector<int>& batch_sizes, bool capture_graphs) {
  frame_steps_.clear();
  if (device().type != tensor::DeviceType::kCuda || predictor_slots_ == 0 || batch_sizes.empty()) return false;
  check_step_batch_sizes(batch_sizes, "prepare_frame_steps");
  const int positions = num_code_groups();
  const int64_t h = hidden_size(), width = predictor_blocks_per_slot_;
  const int64_t largest = batch_sizes.back();
  frame_staging_ = Tensor::empty({largest * (1 + 3 * positions + 2 * width)}, DType::kI32);
  for (int size : batch_sizes) {
    FrameStep step;
    step.rows = size;
    step.inputs = Tensor::empty({size * (1 + 3 * positions + 2 * width)}, DType::kI32, device());
    step.params = Tensor::empty({size, ops::kPackedSamplingParamsWords}, DType::kI32, device());
    step.hidden = Tensor::zeros({2 * size, h}, predictor_.dtype(), device());
    step.drawn = Tensor::zeros({positions - 1, size}, DType::kI32, device());
    frame_steps_.push_back(std::move(step));
  }
  // Every row padding: the warm-up runs and the recordings write no KV slot.
  const std::vector<ops::SamplingParams> greedy(static_cast<size_t>(largest), ops::SamplingParams{.temperature = 0.0f});
  for (FrameStep& step : frame_steps_) {
    const Tensor host = frame_staging_.slice_rows(0, step.inputs.dim(0));
    pack_frame_inputs({}, {}, step.rows, std::span<int32_t>(host.data<int32_t>(), static_cast<size_t>(host.numel())));
    ops::upload(host, step.inputs);
    ops::write_sampling_params(std::span(greedy).first(static_cast<size_t>(step.rows)), step.params);
    if (!record_step(device(), capture_graphs, step.graph, [&] { queue_frame_step(step); })) {
      frame_steps_.clear();
      return false;
    }
  }
  return true;
}

void Talker::pack_frame_inputs(std::span<const int32_t> slots, std::span<const int32_t> code0s, int64_t rows,
                               std::span<int32_t> out) const {
  const int64_t n = static_cast<int64_t>(slots.size()), positions = num_code_groups(),
                width = predictor_blocks_per_slot_;
  int32_t* code0 = out.data();
  int32_t* position = code0 + rows;
  int32_t* kv_slot = position + positions * rows;
  int32_t* context = kv_slot + positions * rows;
  int32_t* tables = context + positions * rows;
  for (int64_t i = 0; i < rows; ++i) {
    const bool real = i < n;
    if (real && (slots[i] < 0 || slots[i] >= predictor_slots_)) {
      throw_error(ErrorCode::kInvalidArgument, "code predictor slot {} is outside the {} slots", slots[i],
                  predictor_slots_);
    }
    code0[i] = real ? code0s[i] : 0;
    // Both rows of the slot in the first pass (position 0 at row i, 1 at row rows + i) read its table.
    for (int64_t b = 0; b < width; ++b) {
      const int32_t block = real ? static_cast<int32_t>(slots[i] * width + b) : 0;
      tables[i * width + b] = block;
      tables[(rows + i) * width + b] = block;
    }
    for (int64_t p = 0; p < positions; ++p) {
      const int64_t block = real ? slots[i] * width + p / kKvBlockSize : 0;
      position[p * rows + i] = real ? static_cast<int32_t>(p) : 0;
      kv_slot[p * rows + i] = real ? static_cast<int32_t>(block * kKvBlockSize + p % kKvBlockSize) : -1;
      context[p * rows + i] = real ? static_cast<int32_t>(p) : -1;
    }
  }
}

Talker::FrameStep* Talker::frame_step_for(int64_t n, std::span<const ops::SamplingParams> params) {
  for (const ops::SamplingParams& p : params) {
    // sample_packed applies no penalties; such frames take the ordinary path.
    if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) return nullptr;
  }
  for (FrameStep& step : frame_steps_) {
    if (step.rows >= n) return &step;
  }
  return nullptr;
}

void Talker::queue_frame_step(FrameStep& step) {
  const int64_t rows = step.rows, positions = num_code_groups(), width = predictor_blocks_per_slot_;
  const int64_t h_cp = config_.code_predictor.hidden_size;
  const DType dtype = predictor_.dtype();
  auto part = [&](int64_t begin, int64_t length) { return step.inputs.slice_rows(begin, begin + length); };
  const Tensor code0 = part(0, rows);
  const int64_t tables_begin = rows * (1 + 3 * positions);
  const Tensor tables = part(tables_begin, 2 * rows * width).reshape({2 * rows, width});
  // The frame's two prefill rows (the talker's hidden state, codebook 0's embedding) run as one pass
  // of 2 x rows rows whose positions, KV slots and context lengths are those of positions 0 and 1 side
  // by side; every later pass feeds back one drawn code per row (codebook p-1's embedding).
  Tensor prefill_embeddings = step.hidden.slice_rows(rows, 2 * rows);
  ops::embedding(padded_codec_embedding_, code0, prefill_embeddings);
  for (int64_t p = 1; p < positions; ++p) {
    const int64_t first = p == 1 ? 0 : p, n = p == 1 ? 2 * rows : rows;
    Tensor x;
    if (p == 1) {
      x = step.hidden;
    } else {
      x = Tensor::empty({rows, hidden_size()}, dtype, device());
      ops::embedding(device_predictor_embeddings_[p - 2], step.drawn.slice_rows(p - 2, p - 1).reshape({rows}), x);
    }
    if (mtp_projection_w_.defined()) {
      Tensor projected = Tensor::empty({n, h_cp}, dtype, device());
      ops::linear(x, mtp_projection_w_, mtp_projection_b_, projected);
      x = projected;
    }
    // Without a projection (0.6B) decode_embeds overwrites step.hidden, whose hidden states every
    // frame rewrites before the step runs and whose embeddings the step gathers again.
    predictor_.decode_embeds(x, part(rows * (1 + first), n), part(rows * (1 + positions + first), n),
                             part(rows * (1 + 2 * positions + first), n), tables.slice_rows(0, n));
    // Only codebook 0's row of the prefill pass predicts (codebook 1).
    const Tensor last = p == 1 ? x.slice_rows(rows, 2 * rows) : x;
    Tensor logits = Tensor::empty({rows, static_cast<int64_t>(codebook_size())}, dtype, device());
    ops::linear(last, predictor_heads_[p - 1], Tensor(), logits);
    Tensor ids = step.drawn.slice_rows(p - 1, p).reshape({rows});
    ops::sample_packed(logits, step.params, static_cast<uint64_t>(p - 1), ids);
  }
}

}  // namespace omni::model::qwen3_tts
