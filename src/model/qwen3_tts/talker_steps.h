// The frame loop that a talker stage model runs on the engine's steps (model/embedding_input_lm.h):
// the Qwen3-TTS talker's (talker_stage_model.h) and the Qwen3-Omni talker's, which differ only in
// where a request's prompt and text track come from. Per step: the prompt slices take their
// request's prompt rows, every decode row is the request's last frame's embedding plus its text
// track (built on the device where the talker has decode steps, Talker::forward_frames); after the
// engine sampled codebook 0, the code predictor draws codebooks 1..15 of every row that is not
// codec EOS in 15 batched steps on the talker's device (Talker::predict_frames), and each such
// row's step output is its frame in the codec_frames format (codec EOS gives none). Each running
// request holds one predictor slot.
//
// take_step_times() gives each step's "talker" and "code_predictor" time; every few seconds the log
// gets their means and the mean batch. One thread (the stage's engine loop) uses it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/embedding_input_lm.h"
#include "model/qwen3_tts/talker.h"
#include "tensor/tensor.h"

namespace omni::model::qwen3_tts {

// The code predictor's draw parameters (seed and step are set per frame); temperature 0 is greedy.
struct SubtalkerSampling {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
};

// What the frame loop keeps of one request; a stage model's request state derives from it.
class TalkerStream : public ArRequestState {
 public:
  // The prefill rows [n, H] (host float32), needed from the request's first step on.
  virtual const tensor::Tensor& prompt_rows() const = 0;
  // The text-track row (H host floats) that decode step k adds to frame k's embedding.
  virtual const float* text_track(int64_t k) const = 0;

  // The prompt rows' M-RoPE streams [3 * rows] (all t, then h, then w) when they are not the plain
  // positions (the Qwen3-Omni talker's prompt with images or videos), and what decode step rows add
  // to their index on all three streams; empty and 0 for plain positions.
  std::vector<float> mrope_positions;
  float rope_delta = 0.0f;
  SubtalkerSampling predictor;  // the code predictor's draws for this request
  int slot = -1;                // the predictor slot, while running
  std::vector<int32_t> frame;   // the last complete frame's codes
  int frames = 0;
};

// The codec ids a talker request never samples: the control ids at the top of the codec vocabulary
// (its last 1024: specials, languages, speakers), except codec EOS unless `ignore_eos` (then
// exactly max_tokens frames: benchmarks).
std::vector<TokenRange> suppressed_codec_tokens(const Talker& talker, bool ignore_eos);

class TalkerSteps {
 public:
  // `name` names the talker in the log ("Qwen3-TTS talker").
  TalkerSteps(Talker& talker, std::string name);

  // EmbeddingInputLm::prepare_requests: `max_num_seqs` predictor slots and, on a GPU with
  // `frame_steps`, the code predictor as fixed-size frame steps (CUDA graphs with capture_graphs).
  void prepare(int max_num_seqs, const std::vector<int>& batch_sizes, bool capture_graphs, bool frame_steps);
  // The talker's decode steps on a GPU (EmbeddingInputLm::prepare_decode_steps).
  bool prepare_decode_steps(const std::vector<int>& batch_sizes, int max_blocks_per_seq, bool capture_graphs);
  void acquire(TalkerStream& stream);
  void release(TalkerStream& stream);
  // EmbeddingInputLm::forward_step over the requests' streams.
  void forward(const ForwardBatch& batch, std::span<TalkerStream* const> streams, std::vector<float>& logits);
  // EmbeddingInputLm::finish_step for the rows of the last forward.
  void finish(std::span<const ArSampledRow> rows, std::vector<std::vector<uint8_t>>& outputs);
  std::vector<StepPartTime> take_step_times() { return std::exchange(step_times_, {}); }

 private:
  using Clock = std::chrono::steady_clock;
  // A step of decode rows alone: the talker builds them from the last frames.
  void feed_frames(const ForwardBatch& batch, std::vector<float>& logits);
  // A step with prompts in it: every row built on the host.
  void forward_rows(const ForwardBatch& batch, std::vector<float>& logits);
  // `batch` with the streams' positions (TalkerStream::mrope_positions, rope_delta) where any
  // stream has them: whole deltas of decode rows shift `positions` (the decode-step path keeps
  // working), anything else fills mrope_positions. nullopt when every stream is plain.
  std::optional<ForwardBatch> with_stream_positions(const ForwardBatch& batch) const;
  // Logs the mean step parts every few seconds (the stage process has no metrics endpoint).
  void log_step(size_t batch, Clock::duration talker, Clock::duration predictor);

  Talker& talker_;
  std::string name_;
  std::vector<int> free_slots_;
  std::vector<TalkerStream*> streams_;  // of the step in flight
  tensor::Tensor hidden_;               // the talker's post-norm hidden states of the last step, on its device
  Clock::duration talker_time_{};
  std::vector<StepPartTime> step_times_;  // since take_step_times()
  // The log's window.
  Clock::time_point log_since_ = Clock::now();
  int64_t log_steps_ = 0;
  size_t log_rows_ = 0;
  Clock::duration log_talker_{};
  Clock::duration log_predictor_{};
};

}  // namespace omni::model::qwen3_tts
