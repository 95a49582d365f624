// The Qwen3-TTS talker as an autoregressive stage model (model/embedding_input_lm.h): stage 0 of the
// qwen3_tts pipeline, driven by engine::ArEngine. Each request's prompt is the talker prompt
// (prompt.h) of its additional_information; the prompts admitted in one step are projected together
// (one text projection for all). Every step the engine samples codebook 0 on the host from the
// talker's logits (suppressed_codec_tokens; the repetition penalty sees the earlier code0s only;
// at least two code0s, min_tokens 2), and the frame loop (talker_steps.h) runs the code
// predictor with the sub-talker sampling parameters; a frame's step output is the frame in the
// codec_frames format, codec EOS gives none (the request ends with "stop"), max_new_tokens frames
// end it with "length". The talker cannot recompute its KV (the frames are not kept), so the
// engine reserves each request's whole prompt + max_new_tokens on admission.
//
// engine_args read here (besides the engine's own):
//   subtalker_sampling_params: {do_sample, temperature, top_k, top_p} over generation_config.json's
//     subtalker_* (do_sample false = greedy)
//   tts_max_instructions_length (default 500 characters)
//   code_predictor_frame_steps (default true; false turns them off): on a GPU, the code predictor
//     as fixed-size frame steps per batch size (the engine's step batch sizes), each
//     one CUDA graph (Talker::prepare_frame_steps) unless enforce_eager. On the CPU the ordinary
//     path runs either way.
//   talker_decode_steps (default true; false turns them off): on a GPU, the talker's steps without
//     a prompt in them as fixed-size steps (Talker::prepare_decode_steps), CUDA graphs unless
//     enforce_eager. Steps with a prompt in them, and every step on the CPU, build the rows on the
//     host.
// Request fields (additional_information): text (required), voice, language, instructions,
// task_type, max_new_tokens (over sampling_params.max_tokens, over generation_config.json's),
// seed (over sampling_params.seed), speaker_embedding (Base: the x-vector, an array of floats),
// non_streaming_mode (the prompt's text layout, prompt.h), ref_code and ref_text (Base in-context
// cloning: the reference's codec frames, flat and frame-major, and its transcript).
// Threads: like every CausalLm, used by one thread.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/embedding_input_lm.h"
#include "model/model_registry.h"
#include "model/qwen3_tts/talker.h"
#include "model/qwen3_tts/talker_steps.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::model::qwen3_tts {

class TalkerStageModel final : public EmbeddingInputLm {
 public:
  // Loads the talker and its tokenizer; throws what the loaders throw (kNotFound, kLoadFailed) and
  // kInvalidConfig naming the engine argument at fault.
  TalkerStageModel(const std::filesystem::path& dir, const Json& engine_args, tensor::Device device);

  const CausalLmInfo& info() const override { return info_; }
  size_t kv_bytes_per_block() const override { return talker_->kv_bytes_per_block(); }
  void init_kv_cache(int num_blocks) override { talker_->init_kv_cache(num_blocks); }
  // Token ids are not the talker's input: kUnsupported.
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  bool prepare_decode_steps(const std::vector<int>& batch_sizes, int max_blocks_per_seq, bool capture_graphs) override;
  tensor::Device device() const override { return talker_->device(); }
  size_t activation_bytes(int max_tokens, int max_logit_rows) const override;

  std::vector<std::string> ignored_sampling_keys() const override;
  ArSamplingDefaults sampling_defaults() const override;
  ArRequestStart start_request(const ArRequestInput& input) override;
  void prepare_requests(int max_num_seqs, const std::vector<int>& batch_sizes, bool capture_graphs) override;
  void acquire(ArRequestState& state) override;
  void release(ArRequestState& state) override;
  void forward_step(const ForwardBatch& batch, std::span<ArRequestState* const> states,
                    std::vector<float>& logits) override;
  void finish_step(std::span<const ArSampledRow> rows, std::vector<std::vector<uint8_t>>& outputs) override;
  std::vector<StepPartTime> take_step_times() override { return steps_->take_step_times(); }

 private:
  struct Request;

  std::unique_ptr<Talker> talker_;
  std::unique_ptr<TalkerSteps> steps_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  CausalLmInfo info_;
  ArSamplingDefaults defaults_;
  int default_max_new_tokens_ = 0;
  SubtalkerSampling subtalker_;
  int max_instructions_length_ = 0;
  bool frame_steps_ = true;
  bool decode_steps_ = true;
};

// Registers the talker's architecture (Qwen3TTSForConditionalGeneration) as a stage model.
void register_family(ModelRegistry& registry);

}  // namespace omni::model::qwen3_tts
