#include "model/qwen3_tts/talker_stage_model.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "base/error.h"
#include "base/log.h"
#include "config/sampling_ranges.h"
#include "model/qwen3_tts/codec_frames.h"
#include "model/qwen3_tts/config.h"
#include "model/qwen3_tts/prompt.h"
#include "tensor/backend.h"

namespace omni::model::qwen3_tts {

namespace {

using tensor::DType;
using tensor::Tensor;

template <typename T>
std::optional<T> engine_arg(const Json& args, const char* key) {
  auto it = args.find(key);
  if (it == args.end() || it->is_null()) return std::nullopt;
  try {
    return it->get<T>();
  } catch (const std::exception&) {
    throw_error(ErrorCode::kInvalidConfig, "engine argument {} has the wrong type ({})", key, it->dump());
  }
}

// The talker's defaults: generation_config.json, and the rule that an utterance has at least two
// code0s (so never an empty reply).
ArSamplingDefaults talker_defaults(const TalkerGenerationDefaults& d) {
  ArSamplingDefaults p;
  p.temperature = d.do_sample.value_or(true) ? d.temperature.value_or(1.0f) : 0.0f;
  p.top_k = d.top_k.value_or(0);
  p.top_p = d.top_p.value_or(1.0f);
  p.repetition_penalty = d.repetition_penalty.value_or(1.0f);
  p.min_tokens = 2;
  return p;
}

// The sub-talker's parameters: generation_config.json's subtalker_*, then the deploy's
// subtalker_sampling_params (do_sample false = greedy, as in the official code), in the ranges and
// with the normalisation of the request sampling parameters (a temperature below 1e-5 is greedy,
// one below 1e-2 is raised to it; top_k -1 means all).
SubtalkerSampling subtalker_sampling(const TalkerGenerationDefaults& d, const Json& overrides) {
  bool do_sample = d.subtalker_do_sample.value_or(true);
  SubtalkerSampling p;
  p.temperature = d.subtalker_temperature.value_or(1.0f);
  p.top_k = d.subtalker_top_k.value_or(0);
  p.top_p = d.subtalker_top_p.value_or(1.0f);
  if (!overrides.is_null()) {
    if (!overrides.is_object()) throw_error(ErrorCode::kInvalidConfig, "subtalker_sampling_params must be a mapping");
    for (const auto& [key, value] : overrides.items()) {
      try {
        if (key == "do_sample") {
          do_sample = value.get<bool>();
        } else if (key == "temperature") {
          p.temperature = value.get<float>();
        } else if (key == "top_k") {
          p.top_k = value.get<int>();
        } else if (key == "top_p") {
          p.top_p = value.get<float>();
        } else {
          throw_error(ErrorCode::kInvalidConfig,
                      "subtalker_sampling_params.{} is not supported (do_sample, temperature, top_k, top_p)", key);
        }
      } catch (const Json::exception&) {
        throw_error(ErrorCode::kInvalidConfig, "subtalker_sampling_params.{} has the wrong type ({})", key,
                    value.dump());
      }
    }
  }
  if (!do_sample) p.temperature = 0.0f;
  const std::pair<const config::SamplingRange&, double> checked[] = {
      {config::kTemperature, p.temperature}, {config::kTopP, p.top_p}, {config::kTopK, p.top_k}};
  for (const auto& [range, value] : checked) {
    if (!range.contains(value)) {
      throw_error(ErrorCode::kInvalidConfig, "subtalker_sampling_params.{} must be {}, got {}", range.field, range.rule,
                  value);
    }
  }
  constexpr float kGreedyTemperature = 1e-5f, kMinTemperature = 1e-2f;
  if (p.temperature < kGreedyTemperature) {
    p.top_p = 1.0f;
    p.top_k = 0;
  } else if (p.temperature < kMinTemperature) {
    p.temperature = kMinTemperature;
  }
  if (p.top_k == -1) p.top_k = 0;
  return p;
}

}  // namespace

struct TalkerStageModel::Request final : TalkerStream {
  TalkerPromptPlan plan;  // until the prompt is built
  TalkerPrompt prompt;    // from the first step on

  const Tensor& prompt_rows() const override { return prompt.rows; }
  // The text-track vector decode step k adds: the prompt's trailing rows, then tts_pad.
  const float* text_track(int64_t k) const override {
    const Tensor& trailing = prompt.trailing;
    return k < trailing.shape()[0] ? trailing.data<float>() + k * trailing.shape()[1] : prompt.tts_pad.data<float>();
  }
};

TalkerStageModel::TalkerStageModel(const std::filesystem::path& dir, const Json& engine_args, tensor::Device device) {
  talker_ = std::make_unique<Talker>(dir, read_talker_config(dir), device);
  steps_ = std::make_unique<TalkerSteps>(*talker_, "Qwen3-TTS talker");
  tokenizer_ = text::Tokenizer::load(dir);
  const TalkerGenerationDefaults defaults = read_talker_generation_defaults(dir);
  defaults_ = talker_defaults(defaults);
  default_max_new_tokens_ = defaults.max_new_tokens.value_or(std::numeric_limits<int>::max());
  auto sub = engine_args.find("subtalker_sampling_params");
  subtalker_ = subtalker_sampling(defaults, sub == engine_args.end() ? Json() : *sub);
  max_instructions_length_ =
      engine_arg<int>(engine_args, "tts_max_instructions_length").value_or(kDefaultMaxInstructionsLength);
  if (max_instructions_length_ < 0) {
    throw_error(ErrorCode::kInvalidConfig, "tts_max_instructions_length must be >= 0, got {}",
                max_instructions_length_);
  }
  frame_steps_ = engine_arg<bool>(engine_args, "code_predictor_frame_steps").value_or(true);
  decode_steps_ = engine_arg<bool>(engine_args, "talker_decode_steps").value_or(true);
  info_.vocab_size = talker_->codec_vocab_size();
  info_.max_position_embeddings = talker_->config().talker.max_position_embeddings;
  info_.eos_token_ids = {talker_->config().codec_eos_id};
  info_.text_tokens = false;
}

void TalkerStageModel::forward(const ForwardBatch& /*batch*/, std::vector<float>& /*logits*/) {
  throw_error(ErrorCode::kUnsupported, "the Qwen3-TTS talker builds its own input rows; it takes no token ids");
}

bool TalkerStageModel::prepare_decode_steps(const std::vector<int>& batch_sizes, int max_blocks_per_seq,
                                            bool capture_graphs) {
  return decode_steps_ && steps_->prepare_decode_steps(batch_sizes, max_blocks_per_seq, capture_graphs);
}

size_t TalkerStageModel::activation_bytes(int max_tokens, int max_logit_rows) const {
  return talker_->talker_stack().activation_bytes(max_tokens, max_logit_rows);
}

// The talker never detokenizes, and it stops on the checkpoint's own codec EOS id.
std::vector<std::string> TalkerStageModel::ignored_sampling_keys() const { return {"stop_token_ids"}; }

ArSamplingDefaults TalkerStageModel::sampling_defaults() const { return defaults_; }

ArRequestStart TalkerStageModel::start_request(const ArRequestInput& input) {
  const std::string_view id = input.request_id;
  const Json& info = input.additional_information;
  if (!info.is_object()) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: additional_information must be an object with the text", id);
  }
  SpeechRequest speech;
  speech.text = request_field<std::string>(info, "text", id).value_or("");
  speech.task_type = request_field<std::string>(info, "task_type", id).value_or("");
  speech.voice = request_field<std::string>(info, "voice", id).value_or("");
  speech.language = request_field<std::string>(info, "language", id).value_or("");
  speech.instructions = request_field<std::string>(info, "instructions", id).value_or("");
  speech.speaker_embedding =
      request_field<std::vector<float>>(info, "speaker_embedding", id).value_or(std::vector<float>{});
  speech.non_streaming_mode = request_field<bool>(info, "non_streaming_mode", id);
  // In-context cloning: the reference's codec frames (flat, frame-major) and its transcript.
  speech.ref_codes = request_field<std::vector<int32_t>>(info, "ref_code", id).value_or(std::vector<int32_t>{});
  speech.ref_text = request_field<std::string>(info, "ref_text", id).value_or("");
  int max_new = input.max_tokens.value_or(default_max_new_tokens_);
  if (auto v = request_field<int>(info, "max_new_tokens", id)) max_new = *v;
  if (max_new < 1) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: max_new_tokens must be at least 1, got {}", id, max_new);
  }
  ArRequestStart start;
  start.max_tokens = max_new;
  start.seed = input.seed;
  if (auto v = request_field<int64_t>(info, "seed", id)) start.seed = *v;
  // The prompt itself is built on its first step, together with the others starting then.
  auto request = std::make_unique<Request>();
  request->predictor = subtalker_;
  request->plan = plan_talker_prompt(speech, *talker_, *tokenizer_, max_instructions_length_);
  start.num_prompt_rows = static_cast<int>(request->plan.num_rows());
  start.state = std::move(request);
  start.suppressed_tokens = suppressed_codec_tokens(*talker_, input.ignore_eos);
  return start;
}

void TalkerStageModel::prepare_requests(int max_num_seqs, const std::vector<int>& batch_sizes, bool capture_graphs) {
  steps_->prepare(max_num_seqs, batch_sizes, capture_graphs, frame_steps_);
}

void TalkerStageModel::acquire(ArRequestState& state) { steps_->acquire(static_cast<Request&>(state)); }

void TalkerStageModel::release(ArRequestState& state) { steps_->release(static_cast<Request&>(state)); }

void TalkerStageModel::forward_step(const ForwardBatch& batch, std::span<ArRequestState* const> states,
                                    std::vector<float>& logits) {
  std::vector<Request*> starting;
  std::vector<TalkerStream*> streams;
  for (size_t i = 0; i < states.size(); ++i) {
    auto* request = static_cast<Request*>(states[i]);
    streams.push_back(request);
    if (batch.seqs[i].context_len == 0) starting.push_back(request);
  }
  if (!starting.empty()) {
    // One text projection for every prompt of the step reads its weights once.
    std::vector<TalkerPromptPlan> plans;
    plans.reserve(starting.size());
    for (Request* request : starting) plans.push_back(std::move(request->plan));
    std::vector<TalkerPrompt> prompts = build_talker_prompts(plans, *talker_);
    for (size_t i = 0; i < starting.size(); ++i) starting[i]->prompt = std::move(prompts[i]);
  }
  steps_->forward(batch, streams, logits);
}

void TalkerStageModel::finish_step(std::span<const ArSampledRow> rows, std::vector<std::vector<uint8_t>>& outputs) {
  steps_->finish(rows, outputs);
}

void register_family(ModelRegistry& registry) {
  registry.add_causal_lm("Qwen3TTSForConditionalGeneration",
                         [](const std::filesystem::path& dir, const Json& /*config*/,
                            const CausalLmLoadOptions& options) -> std::unique_ptr<CausalLm> {
                           if (options.tensor_parallel) {
                             throw_error(ErrorCode::kUnsupported,
                                         "the Qwen3-TTS talker cannot be split over tensor-parallel ranks");
                           }
                           return std::make_unique<TalkerStageModel>(dir, options.engine_args, options.device);
                         });
}

}  // namespace omni::model::qwen3_tts
