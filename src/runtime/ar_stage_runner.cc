#include "runtime/ar_stage_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/ar_engine.h"
#include "engine/tokenizer_detokenizer.h"
#include "model/embedding_input_lm.h"
#include "model/hf_config.h"
#include "model/model_registry.h"
#include "model/stage_model_registry.h"
#include "runtime/engine_args.h"
#include "runtime/tensor_parallel_model.h"
#include "tensor/backend.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::runtime {

namespace {

namespace fs = std::filesystem;

// The sampling defaults below the request's: an embedding-input model's own, else
// generation_config.json's temperature/top_p/top_k (as vLLM).
engine::SamplingParams base_sampling(const model::EmbeddingInputLm* lm, const fs::path& dir) {
  engine::SamplingParams base;
  if (lm) {
    const model::ArSamplingDefaults d = lm->sampling_defaults();
    base.temperature = d.temperature.value_or(base.temperature);
    base.top_k = d.top_k.value_or(base.top_k);
    base.top_p = d.top_p.value_or(base.top_p);
    base.repetition_penalty = d.repetition_penalty.value_or(base.repetition_penalty);
    base.min_tokens = d.min_tokens.value_or(base.min_tokens);
    return base;
  }
  const model::GenerationDefaults defaults = model::read_generation_defaults(dir);
  base.temperature = defaults.temperature.value_or(base.temperature);
  base.top_p = defaults.top_p.value_or(base.top_p);
  base.top_k = defaults.top_k.value_or(base.top_k);
  return base;
}

// The stage's model: the stage model the pipeline names (model/stage_model_registry.h), or, split
// over tensor-parallel ranks or with none named, the model of the checkpoint's architecture.
std::unique_ptr<model::CausalLm> load_model(const EngineArgs& args, const tensor::Device& device) {
  const std::optional<std::string> name = args.optional<std::string>("stage_model");
  const int ranks = args.tensor_parallel_size();
  // Random weights (load_format dummy) on one rank go through the plain causal LM's stage model too.
  if (ranks == 1 && (name || args.random_weights())) {
    return model::builtin_stage_models().create_ar(name.value_or("causal_lm"), args.stage_model_args());
  }
  if (args.random_weights()) {
    throw_error(ErrorCode::kUnsupported,
                "stage {}: load_format dummy (random weights) with tensor_parallel_size {} is not implemented",
                args.stage_id(), ranks);
  }
  return load_tensor_parallel_lm(args.model_dir(),
                                 {.size = ranks, .device = device, .dtype = args.dtype(), .engine_args = args.json()});
}

// A choice's tokens when the model has per-step outputs: only those whose step produced one (a stop
// token produces none), their outputs concatenated into the payload.
void keep_tokens_with_step_outputs(engine::CompletionOutput& completion, StageOutput& choice) {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> payload;
  for (size_t i = 0; i < completion.step_outputs.size() && i < choice.token_ids.size(); ++i) {
    if (completion.step_outputs[i].empty()) continue;
    tokens.push_back(choice.token_ids[i]);
    payload.insert(payload.end(), completion.step_outputs[i].begin(), completion.step_outputs[i].end());
  }
  choice.token_ids = std::move(tokens);
  if (!payload.empty()) choice.payload = std::move(payload);
}

class ArStageRunner final : public StageRunner {
 public:
  ArStageRunner(const Json& engine_args, const StageRunnerContext& context) : stage_id_(context.stage_id) {
    const EngineArgs args(engine_args, context.stage_id);
    const fs::path dir = args.model_dir();
    const tensor::Device device = args.device();
    engine::EngineConfig config = args.engine_config();
    // Read before anything is loaded: a stage's share of a GPU is measured against it.
    std::optional<tensor::DeviceMemory> memory_at_start;
    if (device.type == tensor::DeviceType::kCuda) memory_at_start = tensor::cuda_memory_info(device.index);
    {
      // The weights can leave the GPU for sleep mode's level 1 and come back at the same addresses.
      tensor::OffloadableMemoryScope offloadable(device);
      model_ = load_model(args, device);
    }
    embedding_lm_ = dynamic_cast<model::EmbeddingInputLm*>(model_.get());
    if (embedding_lm_) {
      config.memory_at_start = memory_at_start;
      for (std::string& key : embedding_lm_->ignored_sampling_keys()) ignored_sampling_keys_.push_back(std::move(key));
    }
    if (model_->info().text_tokens && (fs::exists(dir / "tokenizer.json") || fs::exists(dir / "vocab.json"))) {
      tokenizer_ = text::Tokenizer::load(dir);
      detokenizer_ = std::make_unique<engine::TokenizerDetokenizer>(*tokenizer_);
    }
    base_ = base_sampling(embedding_lm_, dir);
    engine_ = std::make_unique<engine::ArEngine>(*model_, config, detokenizer_.get());
  }

  ~ArStageRunner() override {
    // The engine borrows the model and the detokenizer, so it goes first.
    engine_.reset();
  }

  void add_request(StageRequest request) override {
    Json params = request.sampling_params.is_null() ? Json::object() : request.sampling_params;
    for (const std::string& key : ignored_sampling_keys_) params.erase(key);
    const std::string source = fmt::format("stage {} request {} sampling_params", stage_id_, request.request_id);
    engine::EngineRequest engine_request;
    engine_request.request_id = request.request_id;
    engine_request.prompt_token_ids = std::move(request.prompt_token_ids);
    engine_request.sampling_params = engine::sampling_params_from_json(params, base_, source);
    engine_request.additional_information = std::move(request.additional_information);
    engine_request.input_open = request.input_open;
    engine_request.feeds_downstream = request.feeds_downstream;
    if (!request.inputs.empty() || request.input_open) {
      if (!embedding_lm_) {
        throw_error(ErrorCode::kInvalidArgument, "stage {}: request {}: this stage's model reads no upstream payloads",
                    stage_id_, request.request_id);
      }
      for (const PayloadView& input : request.inputs) engine_request.inputs.push_back(input.bytes());
    }
    engine_->add_request(std::move(engine_request));
  }

  void add_input(const std::string& request_id, StageInputChunk chunk) override {
    if (!embedding_lm_) return StageRunner::add_input(request_id, std::move(chunk));
    std::vector<std::span<const uint8_t>> payloads;
    for (const PayloadView& payload : chunk.payloads) payloads.push_back(payload.bytes());
    engine_->add_input(request_id, payloads, chunk.last);
  }

  void abort(const std::string& request_id) override { engine_->abort(request_id); }

  size_t running_requests() const override { return engine_->num_unfinished_requests(); }

  bool can_step() const override { return engine_->can_step(); }

  void sleep() override {
    engine_->sleep();
    const size_t offloaded = tensor::offload_memory(model_->device());
    tensor::release_freed_memory(model_->device());
    if (offloaded > 0) {
      spdlog::info("stage {}: {:.1f} MiB of weights moved to host memory", stage_id_,
                   static_cast<double>(offloaded) / (1 << 20));
    }
  }
  void wake_up() override {
    tensor::restore_memory(model_->device());
    engine_->wake_up();
  }
  tensor::Device device() const override { return model_->device(); }

  std::vector<StepTiming> take_step_timings() override {
    std::vector<StepTiming> timings;
    if (!embedding_lm_) return timings;
    for (model::StepPartTime& part : embedding_lm_->take_step_times()) timings.push_back({part.part, part.seconds});
    return timings;
  }

  std::vector<StageOutput> step() override {
    std::vector<StageOutput> outputs;
    for (engine::RequestOutput& out : engine_->step()) {
      if (out.error) {
        StageOutput failed;
        failed.request_id = std::move(out.request_id);
        failed.error = Error(out.error->code(), fmt::format("stage {}: {}", stage_id_, out.error->what()));
        outputs.push_back(std::move(failed));
        continue;
      }
      const size_t first = outputs.size();
      for (engine::CompletionOutput& completion : out.completions) {
        StageOutput& choice = outputs.emplace_back();
        choice.request_id = out.request_id;
        choice.index = completion.index;
        // A text LM's prompt may have grown by its media placeholders; an embedding-input model's rows
        // are not the client's prompt tokens.
        if (!embedding_lm_) choice.prompt_tokens = out.num_prompt_tokens;
        choice.token_ids = std::move(completion.token_ids);
        choice.text = std::move(completion.text);
        for (const engine::SampledToken& sampled : completion.logprobs) {
          GeneratedTokenLogprobs& entry = choice.logprobs.emplace_back();
          entry.token = {sampled.token_id, sampled.logprob};
          entry.rank = sampled.rank;
          for (const engine::TokenLogprob& alternative : sampled.top_logprobs) {
            entry.top.push_back({alternative.token_id, alternative.logprob});
          }
        }
        if (!completion.step_outputs.empty()) keep_tokens_with_step_outputs(completion, choice);
        if (completion.finish_reason) {
          choice.finish_reason = std::string(engine::finish_reason_name(*completion.finish_reason));
          choice.more_choices = true;
        }
      }
      // The request's last output is the last finishing choice of its last step.
      if (out.finished) {
        auto last = std::find_if(outputs.rbegin(), outputs.rend() - static_cast<std::ptrdiff_t>(first),
                                 [](const StageOutput& o) { return o.finish_reason.has_value(); });
        if (last == outputs.rend() - static_cast<std::ptrdiff_t>(first)) {
          StageOutput& end = outputs.emplace_back();
          end.request_id = out.request_id;
          end.finish_reason = "stop";
        } else {
          last->more_choices = false;
        }
      }
    }
    return outputs;
  }

 private:
  int stage_id_;
  std::unique_ptr<model::CausalLm> model_;
  model::EmbeddingInputLm* embedding_lm_ = nullptr;  // model_ when it builds its own inputs
  // Sampling keys a pipeline's sampling_constraints may set that are not engine parameters: every
  // stage detokenizes when its model has a tokenizer, so the flag carries no information here.
  std::vector<std::string> ignored_sampling_keys_ = {"detokenize"};
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<engine::TokenizerDetokenizer> detokenizer_;
  engine::SamplingParams base_;
  std::unique_ptr<engine::ArEngine> engine_;
};

}  // namespace

std::unique_ptr<StageRunner> make_ar_stage_runner(const Json& engine_args, const StageRunnerContext& context) {
  return std::make_unique<ArStageRunner>(engine_args, context);
}

}  // namespace omni::runtime
