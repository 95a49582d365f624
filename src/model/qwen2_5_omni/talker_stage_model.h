// The Qwen2.5-Omni talker as an autoregressive stage model (model/embedding_input_lm.h): stage 1 of
// the qwen2_5_omni pipeline, "qwen2_5_omni_talker". It reads the thinker's rows
// (model/thinker_payload.h: ids, embeddings and final-norm outputs of every row, the prompt's
// M-RoPE streams) and starts once all of them came (the pipeline hands whole outputs over, as
// vLLM-Omni runs this model); its prompt and decode rows are talker_prompt.h's. Each sampled code
// leaves as a one-code codec_frames payload (model/qwen3_tts/codec_frames.h); the stop codes
// (codec pad and end) leave nothing.
//
// Sampling defaults are generate()'s talker ones: temperature 0.9, top_k 40, top_p 0.8,
// repetition penalty 1.05, 4096 codes at most; codec_bos is never sampled.
// Request fields (additional_information): voice, a speaker of spk_dict.pt (any case; default
// Chelsie, else the first). Threads: like every CausalLm, used by one thread.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/embedding_input_lm.h"
#include "model/qwen2_5_omni/talker.h"
#include "model/qwen2_5_omni/talker_prompt.h"

namespace omni::model::qwen2_5_omni {

inline constexpr std::string_view kTalkerStageModel = "qwen2_5_omni_talker";

class TalkerStageModel final : public EmbeddingInputLm {
 public:
  // The talker of `dir` with the speakers of its spk_dict.pt (kNotFound when it is missing).
  TalkerStageModel(const std::filesystem::path& dir, tensor::Device device, bool random_weights = false,
                   std::optional<tensor::DType> dtype = std::nullopt);
  // The same with the given speakers (name -> bos token id), for checkpoints without spk_dict.pt.
  TalkerStageModel(const std::filesystem::path& dir, const std::map<std::string, int64_t>& speakers,
                   tensor::Device device, bool random_weights = false,
                   std::optional<tensor::DType> dtype = std::nullopt);

  const CausalLmInfo& info() const override { return info_; }
  size_t kv_bytes_per_block() const override { return talker_->stack().kv_bytes_per_block(); }
  void init_kv_cache(int num_blocks) override { talker_->stack().init_kv_cache(num_blocks); }
  // Token ids are not the talker's input: kUnsupported.
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  tensor::Device device() const override { return talker_->stack().device(); }
  size_t activation_bytes(int max_tokens, int max_logit_rows) const override {
    return talker_->stack().activation_bytes(max_tokens, max_logit_rows);
  }

  std::vector<std::string> ignored_sampling_keys() const override { return {"stop_token_ids"}; }
  ArSamplingDefaults sampling_defaults() const override;
  ArRequestStart start_request(const ArRequestInput& input) override;
  void add_input(ArRequestState& state, std::span<const std::span<const uint8_t>> payloads, bool last) override;
  bool ready(const ArRequestState& state) const override;
  void prepare_requests(int, const std::vector<int>&, bool) override {}
  void acquire(ArRequestState&) override {}
  void release(ArRequestState&) override {}
  void forward_step(const ForwardBatch& batch, std::span<ArRequestState* const> states,
                    std::vector<float>& logits) override;
  void finish_step(std::span<const ArSampledRow> rows, std::vector<std::vector<uint8_t>>& outputs) override;

  // The speakers' names, sorted.
  std::vector<std::string> speakers() const;

 private:
  struct Request;
  void take(Request& request, std::span<const std::span<const uint8_t>> payloads, bool last) const;

  std::unique_ptr<Talker> talker_;
  std::map<std::string, std::vector<float>> speaker_bos_;  // lower-case name -> bos row
  std::map<std::string, std::string> speaker_names_;       // lower-case name -> name
  TalkerTextRows eos_pad_;                                 // text_eos, text_pad (speaker_bos empty)
  CausalLmInfo info_;
};

// The speakers of `dir`'s spk_dict.pt, name -> bos token id. Errors as SpeakerDict::load.
std::map<std::string, int64_t> read_speaker_bos_tokens(const std::filesystem::path& dir);

}  // namespace omni::model::qwen2_5_omni
