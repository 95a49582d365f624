#include "model/qwen3_tts/talker_steps.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/error.h"
#include "base/log.h"
#include "model/qwen3_tts/codec_frames.h"

namespace omni::model::qwen3_tts {

namespace {

using tensor::DType;
using tensor::Tensor;

void log_prepared(const std::string& name, const char* what, bool prepared, bool graphs) {
  spdlog::info("{}: {} {}", name, what,
               !prepared ? "unavailable on this device"
               : graphs  ? "with CUDA graphs"
                         : "eager (enforce_eager)");
}

}  // namespace

std::vector<TokenRange> suppressed_codec_tokens(const Talker& talker, bool ignore_eos) {
  constexpr int32_t kNumControlIds = 1024;
  const int32_t vocab = talker.codec_vocab_size();
  const int32_t eos = talker.config().codec_eos_id;
  const int32_t controls = std::max(0, vocab - kNumControlIds);
  if (ignore_eos || eos < controls || eos >= vocab) {
    std::vector<TokenRange> ranges = {{controls, vocab}};
    if (ignore_eos && (eos < controls || eos >= vocab)) ranges.push_back({eos, eos + 1});
    return ranges;
  }
  return {{controls, eos}, {eos + 1, vocab}};
}

TalkerSteps::TalkerSteps(Talker& talker, std::string name) : talker_(talker), name_(std::move(name)) {}

void TalkerSteps::prepare(int max_num_seqs, const std::vector<int>& batch_sizes, bool capture_graphs,
                          bool frame_steps) {
  talker_.init_predictor_cache(max_num_seqs);
  free_slots_.clear();
  for (int slot = max_num_seqs - 1; slot >= 0; --slot) free_slots_.push_back(slot);
  if (frame_steps && talker_.device().type == tensor::DeviceType::kCuda) {
    log_prepared(name_, "code predictor frame steps", talker_.prepare_frame_steps(batch_sizes, capture_graphs),
                 capture_graphs);
  }
  spdlog::info("{} on {}, {} predictor slots", name_, tensor::device_name(talker_.device()), max_num_seqs);
}

bool TalkerSteps::prepare_decode_steps(const std::vector<int>& batch_sizes, int max_blocks_per_seq,
                                       bool capture_graphs) {
  if (talker_.device().type != tensor::DeviceType::kCuda) return false;
  const bool prepared = talker_.prepare_decode_steps(batch_sizes, max_blocks_per_seq, capture_graphs);
  log_prepared(name_, "talker decode steps", prepared, capture_graphs);
  return prepared;
}

void TalkerSteps::acquire(TalkerStream& stream) {
  if (free_slots_.empty()) throw_error(ErrorCode::kInternal, "{}: more running requests than predictor slots", name_);
  stream.slot = free_slots_.back();
  free_slots_.pop_back();
}

void TalkerSteps::release(TalkerStream& stream) {
  if (stream.slot >= 0) free_slots_.push_back(stream.slot);
  stream.slot = -1;
}

void TalkerSteps::forward(const ForwardBatch& batch, std::span<TalkerStream* const> streams,
                          std::vector<float>& logits) {
  const auto started = Clock::now();
  streams_.assign(streams.begin(), streams.end());
  const bool prompts =
      std::any_of(batch.seqs.begin(), batch.seqs.end(), [](const SequenceSlice& seq) { return seq.context_len == 0; });
  const std::optional<ForwardBatch> positioned = with_stream_positions(batch);
  const ForwardBatch& b = positioned ? *positioned : batch;
  if (prompts || !b.mrope_positions.empty()) {
    forward_rows(b, logits);
  } else {
    feed_frames(b, logits);
  }
  talker_time_ = Clock::now() - started;
}

std::optional<ForwardBatch> TalkerSteps::with_stream_positions(const ForwardBatch& batch) const {
  bool any = false, whole = true;
  for (size_t i = 0; i < streams_.size(); ++i) {
    const TalkerStream& s = *streams_[i];
    const bool prompt = batch.seqs[i].context_len == 0;
    if (s.rope_delta == 0.0f && (!prompt || s.mrope_positions.empty())) continue;
    any = true;
    whole = whole && !prompt && s.rope_delta == std::round(s.rope_delta);
  }
  if (!any) return std::nullopt;
  ForwardBatch out = batch;
  if (whole) {
    for (size_t i = 0; i < streams_.size(); ++i) {
      const SequenceSlice& seq = batch.seqs[i];
      for (int32_t j = 0; j < seq.query_len; ++j)
        out.positions[seq.query_start + j] += static_cast<int32_t>(streams_[i]->rope_delta);
    }
    return out;
  }
  const size_t tokens = batch.positions.size();
  out.mrope_positions.assign(3 * tokens, 0.0f);
  for (size_t i = 0; i < streams_.size(); ++i) {
    const TalkerStream& s = *streams_[i];
    const SequenceSlice& seq = batch.seqs[i];
    const size_t rows = s.mrope_positions.size() / 3;
    for (int32_t j = 0; j < seq.query_len; ++j) {
      const size_t t = static_cast<size_t>(seq.query_start + j);
      const int32_t index = seq.context_len + j;
      for (size_t k = 0; k < 3; ++k) {
        out.mrope_positions[k * tokens + t] = static_cast<size_t>(index) < rows
                                                  ? s.mrope_positions[k * rows + static_cast<size_t>(index)]
                                                  : static_cast<float>(index) + s.rope_delta;
      }
    }
  }
  return out;
}

void TalkerSteps::feed_frames(const ForwardBatch& batch, std::vector<float>& logits) {
  std::vector<int32_t> slots, frames;
  std::vector<const float*> text;
  for (const TalkerStream* stream : streams_) {
    slots.push_back(stream->slot);
    frames.insert(frames.end(), stream->frame.begin(), stream->frame.end());
    // Decode step k feeds frame k.
    text.push_back(stream->text_track(stream->frames - 1));
  }
  talker_.forward_frames(batch, slots, frames, text, logits, hidden_);
}

void TalkerSteps::forward_rows(const ForwardBatch& batch, std::vector<float>& logits) {
  const int64_t h = talker_.hidden_size();
  Tensor inputs = Tensor::zeros({static_cast<int64_t>(batch.positions.size()), h}, DType::kF32);
  for (size_t i = 0; i < streams_.size(); ++i) {
    const TalkerStream& stream = *streams_[i];
    const SequenceSlice& seq = batch.seqs[i];
    float* out = inputs.data<float>() + static_cast<int64_t>(seq.query_start) * h;
    if (seq.context_len == 0) {
      const Tensor& rows = stream.prompt_rows();
      if (rows.rank() != 2 || seq.query_len != rows.dim(0) || rows.dim(1) != h) {
        throw_error(ErrorCode::kInternal, "{}: a prompt slice of {} rows for a prompt of {}", name_, seq.query_len,
                    tensor::shape_to_string(rows.shape()));
      }
      std::copy_n(rows.data<float>(), seq.query_len * h, out);
    } else {
      std::copy_n(stream.text_track(stream.frames - 1), h, out);
      talker_.add_frame_embedding(stream.frame, out);
    }
  }
  talker_.forward(batch, inputs, logits, hidden_);
}

void TalkerSteps::finish(std::span<const ArSampledRow> rows, std::vector<std::vector<uint8_t>>& outputs) {
  const auto predicting = Clock::now();
  // The code predictor for the rows whose code0 is not the end of speech: one batch per codebook on
  // the talker's device, the draws there too (one copy back per step).
  const int32_t eos = talker_.config().codec_eos_id;
  const int groups = talker_.num_code_groups() - 1;
  std::vector<TalkerStream*> framed;
  std::vector<int32_t> row_ids, slots, code0s;
  std::vector<tensor::ops::SamplingParams> params;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].token == eos) continue;
    auto* stream = static_cast<TalkerStream*>(rows[i].state);
    framed.push_back(stream);
    row_ids.push_back(static_cast<int32_t>(i));
    slots.push_back(stream->slot);
    code0s.push_back(rows[i].token);
    tensor::ops::SamplingParams p;
    p.temperature = stream->predictor.temperature;
    p.top_k = stream->predictor.top_k;
    p.top_p = stream->predictor.top_p;
    p.seed = rows[i].seed;
    p.step = static_cast<uint64_t>(stream->frames) * groups;
    params.push_back(p);
  }
  if (!framed.empty()) {
    Tensor hidden = hidden_;
    if (framed.size() != rows.size()) {
      Tensor ids = Tensor::empty({static_cast<int64_t>(row_ids.size())}, DType::kI32);
      std::copy(row_ids.begin(), row_ids.end(), ids.data<int32_t>());
      hidden = Tensor::empty({ids.dim(0), hidden_.dim(1)}, hidden_.dtype(), hidden_.device());
      tensor::ops::embedding(hidden_, ids, hidden);
    }
    std::vector<int32_t> codes;
    talker_.predict_frames(slots, hidden, code0s, params, codes);
    for (size_t i = 0; i < framed.size(); ++i) {
      TalkerStream& stream = *framed[i];
      stream.frame.assign(1, code0s[i]);
      stream.frame.insert(stream.frame.end(), codes.begin() + static_cast<std::ptrdiff_t>(i * groups),
                          codes.begin() + static_cast<std::ptrdiff_t>((i + 1) * groups));
      ++stream.frames;
      outputs[row_ids[i]] = encode_codec_frames(stream.frame, talker_.num_code_groups());
    }
  }
  const auto predicted = Clock::now();
  log_step(rows.size(), talker_time_, predicted - predicting);
  step_times_.push_back({"talker", std::chrono::duration<double>(talker_time_).count()});
  step_times_.push_back({"code_predictor", std::chrono::duration<double>(predicted - predicting).count()});
}

void TalkerSteps::log_step(size_t batch, Clock::duration talker, Clock::duration predictor) {
  constexpr std::chrono::seconds kInterval{5};
  ++log_steps_;
  log_rows_ += batch;
  log_talker_ += talker;
  log_predictor_ += predictor;
  if (Clock::now() - log_since_ < kInterval) return;
  const double steps = static_cast<double>(log_steps_);
  spdlog::info("{}: {} steps, mean batch {:.1f}; per step: talker {:.2f} ms, code predictor {:.2f} ms", name_,
               log_steps_, static_cast<double>(log_rows_) / steps,
               std::chrono::duration<double, std::milli>(log_talker_).count() / steps,
               std::chrono::duration<double, std::milli>(log_predictor_).count() / steps);
  log_since_ = Clock::now();
  log_steps_ = 0;
  log_rows_ = 0;
  log_talker_ = log_predictor_ = Clock::duration{};
}

}  // namespace omni::model::qwen3_tts
