#include "runtime/ar_stage_runner.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/ar_engine.h"
#include "engine/tokenizer_detokenizer.h"
#include "model/hf_config.h"
#include "model/model_dtype.h"
#include "model/tokenizer/tokenizer.h"
#include "runtime/tensor_parallel_model.h"
#include "tensor/backend.h"

namespace omni::runtime {

namespace {

namespace fs = std::filesystem;

// Sampling keys a pipeline's sampling_constraints may set that are not engine parameters: every
// "ar" stage detokenizes when its model has a tokenizer, so the flag carries no information here.
constexpr std::string_view kPipelineOnlySamplingKeys[] = {"detokenize"};

template <typename T>
std::optional<T> optional_arg(const Json& args, const char* key, const StageRunnerContext& context) {
  auto it = args.find(key);
  if (it == args.end() || it->is_null()) return std::nullopt;
  try {
    return it->get<T>();
  } catch (const std::exception&) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: engine argument {} has the wrong type ({})", context.stage_id,
                key, it->dump());
  }
}

engine::EngineConfig engine_config_from_args(const Json& args, const StageRunnerContext& context) {
  engine::EngineConfig config;
  config.max_num_seqs = optional_arg<int>(args, "max_num_seqs", context).value_or(config.max_num_seqs);
  config.max_num_batched_tokens =
      optional_arg<int>(args, "max_num_batched_tokens", context).value_or(config.max_num_batched_tokens);
  config.enable_prefix_caching =
      optional_arg<bool>(args, "enable_prefix_caching", context).value_or(config.enable_prefix_caching);
  config.enable_chunked_prefill =
      optional_arg<bool>(args, "enable_chunked_prefill", context).value_or(config.enable_chunked_prefill);
  config.num_gpu_blocks_override =
      optional_arg<int>(args, "num_gpu_blocks_override", context).value_or(config.num_gpu_blocks_override);
  if (auto bytes = optional_arg<uint64_t>(args, "kv_cache_memory_bytes", context)) {
    config.kv_cache_memory_bytes = static_cast<size_t>(*bytes);
  }
  config.max_model_len = optional_arg<int>(args, "max_model_len", context).value_or(config.max_model_len);
  config.seed = optional_arg<uint64_t>(args, "seed", context).value_or(config.seed);
  config.enforce_eager = optional_arg<bool>(args, "enforce_eager", context).value_or(config.enforce_eager);
  config.async_scheduling = optional_arg<bool>(args, "async_scheduling", context).value_or(config.async_scheduling);
  config.gpu_memory_utilization =
      optional_arg<double>(args, "gpu_memory_utilization", context).value_or(config.gpu_memory_utilization);
  return config;
}

class ArStageRunner final : public StageRunner {
 public:
  ArStageRunner(const Json& engine_args, const StageRunnerContext& context) : stage_id_(context.stage_id) {
    std::optional<std::string> model_dir = optional_arg<std::string>(engine_args, "model", context);
    if (!model_dir || model_dir->empty()) {
      throw_error(ErrorCode::kInvalidConfig, "stage {}: engine_args.model must name the checkpoint directory",
                  context.stage_id);
    }
    const fs::path dir(*model_dir);
    const int tensor_parallel_size = optional_arg<int>(engine_args, "tensor_parallel_size", context).value_or(1);
    if (tensor_parallel_size < 1) {
      throw_error(ErrorCode::kInvalidConfig, "stage {}: tensor_parallel_size must be >= 1, got {}", context.stage_id,
                  tensor_parallel_size);
    }
    // The stage process sees only its own devices (CUDA_VISIBLE_DEVICES), so "cuda" is its first.
    const std::string device_arg = optional_arg<std::string>(engine_args, "device", context).value_or("auto");
    const tensor::Device device =
        tensor::resolve_device(device_arg, fmt::format("stage {} engine argument device", context.stage_id));
    const std::optional<tensor::DType> dtype =
        model::parse_model_dtype(optional_arg<std::string>(engine_args, "dtype", context).value_or("auto"),
                                 fmt::format("stage {} engine argument dtype", context.stage_id));
    model_ = load_tensor_parallel_lm(dir, {.size = tensor_parallel_size, .device = device, .dtype = dtype});
    if (fs::exists(dir / "tokenizer.json") || fs::exists(dir / "vocab.json")) {
      tokenizer_ = model::Tokenizer::load(dir);
      detokenizer_ = std::make_unique<engine::TokenizerDetokenizer>(*tokenizer_);
    }
    const model::GenerationDefaults defaults = model::read_generation_defaults(dir);
    base_.temperature = defaults.temperature.value_or(base_.temperature);
    base_.top_p = defaults.top_p.value_or(base_.top_p);
    base_.top_k = defaults.top_k.value_or(base_.top_k);
    engine_ =
        std::make_unique<engine::ArEngine>(*model_, engine_config_from_args(engine_args, context), detokenizer_.get());
  }

  ~ArStageRunner() override {
    // The engine borrows the model and the detokenizer, so it goes first.
    engine_.reset();
  }

  void add_request(StageRequest request) override {
    Json params = request.sampling_params;
    for (std::string_view key : kPipelineOnlySamplingKeys) params.erase(std::string(key));
    const std::string source = fmt::format("stage {} request {} sampling_params", stage_id_, request.request_id);
    engine::EngineRequest engine_request;
    engine_request.request_id = request.request_id;
    engine_request.prompt_token_ids = std::move(request.prompt_token_ids);
    engine_request.sampling_params = engine::sampling_params_from_json(params, base_, source);
    engine_->add_request(std::move(engine_request));
  }

  void abort(const std::string& request_id) override { engine_->abort(request_id); }

  size_t running_requests() const override {
    const engine::EngineStats stats = engine_->stats();
    return static_cast<size_t>(stats.num_running) + static_cast<size_t>(stats.num_waiting);
  }

  bool can_step() const override { return engine_->has_unfinished_requests(); }

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
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<engine::TokenizerDetokenizer> detokenizer_;
  engine::SamplingParams base_;
  std::unique_ptr<engine::ArEngine> engine_;
};

}  // namespace

std::unique_ptr<StageRunner> make_ar_stage_runner(const Json& engine_args, const StageRunnerContext& context) {
  return std::make_unique<ArStageRunner>(engine_args, context);
}

}  // namespace omni::runtime
