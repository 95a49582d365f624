// The Qwen3-Omni talker as an autoregressive stage model (model/embedding_input_lm.h): stage 1 of
// the qwen3_omni_moe pipeline, "qwen3_omni_talker". It reads the thinker's rows
// (thinker_payload.h) as they come: with async_chunk, one payload per thinker token through
// add_input, so the talker starts while the thinker still writes; without, all of them at the
// start. Its prompt (talker_prompt.h, built from the thinker's rows through the reply's first
// token; with images or videos at the 3-D positions talker_positions derives from the thinker's)
// is ready once those rows came; the later reply rows, tts_eos after the last, make the text track
// (tts_pad from then on), projected at the step that first needs them, all of a batch's together;
// a decode step whose text row has not come yet waits (ready()). Sync and async runs therefore feed the talker the same
// rows.
//
// The frame loop is the Qwen3-TTS talker's (model/qwen3_tts/talker_steps.h): codebook 0 sampled by
// the engine (the control ids suppressed except codec EOS; defaults temperature 0.9, top_k 50,
// top_p 1.0, repetition penalty 1.05, 4096 frames at most), codebooks 1..15 by the code predictor
// (top_k 50, top_p 0.8, temperature 1.0; greedy when the talker's own draw is). Each frame leaves
// as the codec_frames payload that code2wav decodes.
//
// Request fields (additional_information): voice (a speaker of talker_config.speaker_id, any
// case; default Ethan, else the first speaker). engine_args read here: code_predictor_frame_steps
// and talker_decode_steps, as the Qwen3-TTS talker's.
// Threads: like every CausalLm, used by one thread.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/embedding_input_lm.h"
#include "model/qwen3_omni/talker_config.h"
#include "model/qwen3_tts/talker.h"
#include "model/qwen3_tts/talker_steps.h"

namespace omni::model::qwen3_omni {

inline constexpr std::string_view kTalkerStageModel = "qwen3_omni_talker";

class TalkerStageModel final : public EmbeddingInputLm {
 public:
  // Loads the talker of `dir` (random weights: load_format dummy, qwen3_tts::Talker) on `device`
  // in `dtype` (the stage's dtype; nullopt: auto, bfloat16 on CUDA); throws what the loaders throw
  // (kNotFound, kLoadFailed).
  TalkerStageModel(const std::filesystem::path& dir, const Json& engine_args, tensor::Device device,
                   bool random_weights = false, std::optional<tensor::DType> dtype = std::nullopt);

  const CausalLmInfo& info() const override { return info_; }
  size_t kv_bytes_per_block() const override { return talker_->kv_bytes_per_block(); }
  void init_kv_cache(int num_blocks) override { talker_->init_kv_cache(num_blocks); }
  // Token ids are not the talker's input: kUnsupported.
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  bool prepare_decode_steps(const std::vector<int>& batch_sizes, int max_blocks_per_seq, bool capture_graphs) override;
  tensor::Device device() const override { return talker_->device(); }
  size_t activation_bytes(int max_tokens, int max_logit_rows) const override;

  std::vector<std::string> ignored_sampling_keys() const override { return {"stop_token_ids"}; }
  ArSamplingDefaults sampling_defaults() const override;
  ArRequestStart start_request(const ArRequestInput& input) override;
  void add_input(ArRequestState& state, std::span<const std::span<const uint8_t>> payloads, bool last) override;
  bool ready(const ArRequestState& state) const override;
  void prepare_requests(int max_num_seqs, const std::vector<int>& batch_sizes, bool capture_graphs) override;
  void acquire(ArRequestState& state) override;
  void release(ArRequestState& state) override;
  void forward_step(const ForwardBatch& batch, std::span<ArRequestState* const> states,
                    std::vector<float>& logits) override;
  void finish_step(std::span<const ArSampledRow> rows, std::vector<std::vector<uint8_t>>& outputs) override;
  std::vector<StepPartTime> take_step_times() override { return steps_->take_step_times(); }

 private:
  struct Request;
  // Takes the thinker's next payloads into `request`: its rows, then its prompt once they reach
  // the reply's first token, then its text track.
  void take(Request& request, std::span<const std::span<const uint8_t>> payloads, bool last) const;
  // Projects the text-track rows the requests took since their last step, in one product.
  void project_text_rows(std::span<Request* const> requests) const;

  TalkerConfig config_;
  std::unique_ptr<qwen3_tts::Talker> talker_;
  std::unique_ptr<qwen3_tts::TalkerSteps> steps_;
  CausalLmInfo info_;
  bool frame_steps_ = true;
  bool decode_steps_ = true;
};

}  // namespace omni::model::qwen3_omni
