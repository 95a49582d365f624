#include "runtime/qwen3_tts_talker_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/block_pool.h"
#include "engine/decode_batch_sizes.h"
#include "engine/engine_config.h"
#include "engine/kv_cache_sizing.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/sampling_rng.h"
#include "model/qwen3_tts/codec_frames.h"
#include "model/qwen3_tts/config.h"
#include "model/qwen3_tts/prompt.h"
#include "model/qwen3_tts/talker.h"
#include "model/tokenizer/tokenizer.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace omni::runtime {

namespace {

namespace fs = std::filesystem;
namespace tts = model::qwen3_tts;
using tensor::DType;
using tensor::Tensor;

// Sampling keys the pipeline's sampling_constraints set that are not sampling parameters: the
// talker never detokenizes, and it stops on the checkpoint's own codec EOS id.
constexpr std::string_view kPipelineOnlySamplingKeys[] = {"detokenize", "stop_token_ids"};

template <typename T>
std::optional<T> optional_arg(const Json& args, const char* key, int stage_id) {
  auto it = args.find(key);
  if (it == args.end() || it->is_null()) return std::nullopt;
  try {
    return it->get<T>();
  } catch (const std::exception&) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: engine argument {} has the wrong type ({})", stage_id, key,
                it->dump());
  }
}

template <typename T>
std::optional<T> request_field(const Json& info, const char* key, const std::string& request_id) {
  auto it = info.find(key);
  if (it == info.end() || it->is_null()) return std::nullopt;
  try {
    return it->get<T>();
  } catch (const std::exception&) {
    throw_error(ErrorCode::kInvalidArgument, "request {}: additional_information.{} has the wrong type ({})",
                request_id, key, it->dump());
  }
}

// The talker's defaults: generation_config.json, and the rule (docs/models/qwen3_tts.md) that an
// utterance has at least two code0s (so never an empty reply).
engine::SamplingParams talker_base(const tts::TalkerGenerationDefaults& d) {
  engine::SamplingParams p;
  p.temperature = d.do_sample.value_or(true) ? d.temperature.value_or(1.0f) : 0.0f;
  p.top_k = d.top_k.value_or(0);
  p.top_p = d.top_p.value_or(1.0f);
  p.repetition_penalty = d.repetition_penalty.value_or(1.0f);
  p.min_tokens = 2;
  return p;
}

// The sub-talker's parameters: generation_config.json's subtalker_*, then the deploy's
// subtalker_sampling_params (do_sample false = greedy, as in the official code).
engine::SamplingParams subtalker_params(const tts::TalkerGenerationDefaults& d, const Json& overrides, int stage_id) {
  bool do_sample = d.subtalker_do_sample.value_or(true);
  engine::SamplingParams p;
  p.temperature = d.subtalker_temperature.value_or(1.0f);
  p.top_k = d.subtalker_top_k.value_or(0);
  p.top_p = d.subtalker_top_p.value_or(1.0f);
  if (!overrides.is_null()) {
    if (!overrides.is_object()) {
      throw_error(ErrorCode::kInvalidConfig, "stage {}: subtalker_sampling_params must be a mapping", stage_id);
    }
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
                      "stage {}: subtalker_sampling_params.{} is not supported (do_sample, temperature, top_k, top_p)",
                      stage_id, key);
        }
      } catch (const Json::exception&) {
        throw_error(ErrorCode::kInvalidConfig, "stage {}: subtalker_sampling_params.{} has the wrong type ({})",
                    stage_id, key, value.dump());
      }
    }
  }
  if (!do_sample) p.temperature = 0.0f;
  try {
    return engine::validated(p);
  } catch (const Error& e) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: subtalker_sampling_params: {}", stage_id, e.what());
  }
}

class Qwen3TtsTalkerRunner final : public StageRunner {
 public:
  Qwen3TtsTalkerRunner(const Json& engine_args, const StageRunnerContext& context) : stage_id_(context.stage_id) {
    const std::optional<std::string> model_dir = optional_arg<std::string>(engine_args, "model", stage_id_);
    if (!model_dir || model_dir->empty()) {
      throw_error(ErrorCode::kInvalidConfig, "stage {}: engine_args.model must name the checkpoint directory",
                  stage_id_);
    }
    const fs::path dir(*model_dir);
    // The stage process sees only its own devices (CUDA_VISIBLE_DEVICES), so "cuda" is its first.
    const std::string device_arg = optional_arg<std::string>(engine_args, "device", stage_id_).value_or("auto");
    const tensor::Device device =
        tensor::resolve_device(device_arg, fmt::format("stage {} engine argument device", stage_id_));
    // Read before anything is loaded: the stage's share of a GPU is measured against it.
    std::optional<tensor::DeviceMemory> memory_at_start;
    if (device.type != tensor::DeviceType::kCpu) memory_at_start = tensor::cuda_memory_info(device.index);
    talker_ = std::make_unique<tts::Talker>(dir, tts::read_talker_config(dir), device);
    tokenizer_ = model::Tokenizer::load(dir);
    const tts::TalkerGenerationDefaults defaults = tts::read_talker_generation_defaults(dir);
    base_ = talker_base(defaults);
    default_max_new_tokens_ = defaults.max_new_tokens.value_or(std::numeric_limits<int>::max());
    auto sub = engine_args.find("subtalker_sampling_params");
    subtalker_ = subtalker_params(defaults, sub == engine_args.end() ? Json() : *sub, stage_id_);
    max_instructions_length_ = optional_arg<int>(engine_args, "tts_max_instructions_length", stage_id_)
                                   .value_or(tts::kDefaultMaxInstructionsLength);
    if (max_instructions_length_ < 0) {
      throw_error(ErrorCode::kInvalidConfig, "stage {}: tts_max_instructions_length must be >= 0, got {}", stage_id_,
                  max_instructions_length_);
    }

    engine::EngineConfig config;
    config.max_num_seqs = optional_arg<int>(engine_args, "max_num_seqs", stage_id_).value_or(64);
    if (config.max_num_seqs < 1) {
      throw_error(ErrorCode::kInvalidConfig, "stage {}: max_num_seqs must be at least 1", stage_id_);
    }
    config.num_gpu_blocks_override = optional_arg<int>(engine_args, "num_gpu_blocks_override", stage_id_).value_or(0);
    if (auto bytes = optional_arg<uint64_t>(engine_args, "kv_cache_memory_bytes", stage_id_)) {
      config.kv_cache_memory_bytes = static_cast<size_t>(*bytes);
    }
    config.max_model_len = optional_arg<int>(engine_args, "max_model_len", stage_id_).value_or(0);
    config.max_num_batched_tokens =
        optional_arg<int>(engine_args, "max_num_batched_tokens", stage_id_).value_or(config.max_num_batched_tokens);
    config.gpu_memory_utilization =
        optional_arg<double>(engine_args, "gpu_memory_utilization", stage_id_).value_or(config.gpu_memory_utilization);
    engine::ResolvedEngineConfig resolved;
    engine::size_kv_cache(config, talker_->kv_bytes_per_block(), talker_->config().talker.max_position_embeddings,
                          kv_budget(config, memory_at_start), resolved);
    max_num_seqs_ = config.max_num_seqs;
    max_model_len_ = resolved.max_model_len;
    talker_->init_kv_cache(resolved.num_blocks);
    blocks_ = std::make_unique<engine::BlockPool>(resolved.num_blocks);
    talker_->init_predictor_cache(max_num_seqs_);
    // enforce_eager keeps the fixed-size frame steps but records no graphs; off the GPU the
    // ordinary path runs either way.
    const bool graphs = !optional_arg<bool>(engine_args, "enforce_eager", stage_id_).value_or(false);
    if (optional_arg<bool>(engine_args, "code_predictor_frame_steps", stage_id_).value_or(true) &&
        device.type == tensor::DeviceType::kCuda) {
      const bool prepared = talker_->prepare_frame_steps(engine::decode_batch_sizes(max_num_seqs_), graphs);
      spdlog::info("stage {}: code predictor frame steps {}", stage_id_,
                   !prepared ? "unavailable on this device"
                   : graphs  ? "with CUDA graphs"
                             : "eager (enforce_eager)");
    }
    if (optional_arg<bool>(engine_args, "talker_decode_steps", stage_id_).value_or(true) &&
        device.type == tensor::DeviceType::kCuda) {
      const int blocks_per_seq = (max_model_len_ + model::kKvBlockSize - 1) / model::kKvBlockSize;
      const bool prepared =
          talker_->prepare_decode_steps(engine::decode_batch_sizes(max_num_seqs_), blocks_per_seq, graphs);
      spdlog::info("stage {}: talker decode steps {}", stage_id_,
                   !prepared ? "unavailable on this device"
                   : graphs  ? "with CUDA graphs"
                             : "eager (enforce_eager)");
    }
    for (int slot = max_num_seqs_ - 1; slot >= 0; --slot) free_slots_.push_back(slot);
    seed_source_ = engine::SamplingRng(optional_arg<uint64_t>(engine_args, "seed", stage_id_).value_or(0));
    spdlog::info("stage {}: Qwen3-TTS talker on {}, {} KV blocks, max_num_seqs {}, max_model_len {}", stage_id_,
                 tensor::device_name(device), resolved.num_blocks, max_num_seqs_, max_model_len_);
  }

  void add_request(StageRequest request) override {
    const std::string& id = request.request_id;
    if (requests_.count(id)) {
      throw_error(ErrorCode::kInvalidArgument, "stage {}: request {} is already running", stage_id_, id);
    }
    const Json& info = request.additional_information;
    if (!info.is_object()) {
      throw_error(ErrorCode::kInvalidArgument, "request {}: additional_information must be an object with the text",
                  id);
    }
    tts::SpeechRequest speech;
    speech.text = request_field<std::string>(info, "text", id).value_or("");
    speech.task_type = request_field<std::string>(info, "task_type", id).value_or("");
    speech.voice = request_field<std::string>(info, "voice", id).value_or("");
    speech.language = request_field<std::string>(info, "language", id).value_or("");
    speech.instructions = request_field<std::string>(info, "instructions", id).value_or("");
    speech.speaker_embedding =
        request_field<std::vector<float>>(info, "speaker_embedding", id).value_or(std::vector<float>{});
    speech.non_streaming_mode = request_field<bool>(info, "non_streaming_mode", id);

    Json params = request.sampling_params.is_null() ? Json::object() : request.sampling_params;
    for (std::string_view key : kPipelineOnlySamplingKeys) params.erase(std::string(key));
    const std::string source = fmt::format("stage {} request {} sampling_params", stage_id_, id);
    auto running = std::make_unique<Running>();
    running->params = engine::validated(engine::sampling_params_from_json(params, base_, source));
    if (running->params.n != 1) {
      throw_error(ErrorCode::kUnsupported, "{}: n = {} (one utterance per request)", source, running->params.n);
    }
    for (const auto& [token, bias] : running->params.logit_bias) {
      if (token < 0 || token >= talker_->codec_vocab_size()) {
        throw_error(ErrorCode::kInvalidArgument, "{}: logit_bias token {} is outside the codec vocabulary of {}",
                    source, token, talker_->codec_vocab_size());
      }
    }
    int max_new = running->params.max_tokens.value_or(default_max_new_tokens_);
    if (auto v = request_field<int>(info, "max_new_tokens", id)) max_new = *v;
    if (max_new < 1) {
      throw_error(ErrorCode::kInvalidArgument, "request {}: max_new_tokens must be at least 1, got {}", id, max_new);
    }
    std::optional<int64_t> seed = running->params.seed;
    if (auto v = request_field<int64_t>(info, "seed", id)) seed = *v;

    // The prompt itself is built on admission, together with the others admitted then (admit()).
    running->plan = tts::plan_talker_prompt(speech, *talker_, *tokenizer_, max_instructions_length_);
    const int prompt_len = static_cast<int>(running->plan.num_rows());
    if (prompt_len >= max_model_len_) {
      throw_error(ErrorCode::kInvalidArgument, "request {}: the prompt has {} rows, max_model_len is {}", id,
                  prompt_len, max_model_len_);
    }
    // Every frame after the first feeds one row back, so prompt + frames - 1 positions at most.
    running->max_new_tokens = std::min(max_new, max_model_len_ - prompt_len + 1);
    running->seed = seed ? static_cast<uint64_t>(*seed) : seed_source_.next_u64();
    running->rng = engine::SamplingRng(running->seed);
    running->id = id;
    waiting_.push_back(running.get());
    requests_[id] = std::move(running);
  }

  void abort(const std::string& request_id) override {
    auto it = requests_.find(request_id);
    if (it == requests_.end()) return;
    release(*it->second);
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), it->second.get()), waiting_.end());
    running_.erase(std::remove(running_.begin(), running_.end(), it->second.get()), running_.end());
    requests_.erase(it);
  }

  size_t running_requests() const override { return requests_.size(); }

  std::vector<StepTiming> take_step_timings() override { return std::exchange(timings_, {}); }

  std::vector<StageOutput> step() override {
    admit();
    std::vector<StageOutput> outputs;
    if (running_.empty()) return outputs;
    const auto started = Clock::now();
    talker_step();
    const auto talked = Clock::now();
    predict_codes();
    const auto predicted = Clock::now();
    step_times_.add(running_.size(), talked - started, predicted - talked);
    timings_.push_back({"talker", std::chrono::duration<double>(talked - started).count()});
    timings_.push_back({"code_predictor", std::chrono::duration<double>(predicted - talked).count()});

    std::vector<Running*> finished;
    for (Running* r : running_) {
      StageOutput out;
      out.request_id = r->id;
      if (r->code0 == talker_->config().codec_eos_id) {
        out.finish_reason = "stop";
      } else {
        out.token_ids = {r->code0};
        out.payload = tts::encode_codec_frames(r->frame, talker_->num_code_groups());
        ++r->frames;
        if (r->frames >= r->max_new_tokens) out.finish_reason = "length";
      }
      if (out.finish_reason) finished.push_back(r);
      outputs.push_back(std::move(out));
    }
    for (Running* r : finished) abort(r->id);
    return outputs;
  }

 private:
  using Clock = std::chrono::steady_clock;

  struct Running {
    std::string id;
    tts::TalkerPromptPlan plan;  // until admitted
    tts::TalkerPrompt prompt;    // from admission on
    engine::SamplingParams params;
    int max_new_tokens = 0;
    uint64_t seed = 0;           // of the code predictor's draws (tensor::ops::sample)
    engine::SamplingRng rng{0};  // of the code0 draws
    std::vector<int32_t> block_table;
    int slot = -1;
    int context_len = 0;          // talker positions in the KV cache
    std::vector<int32_t> code0s;  // every sampled code0 (the repetition-penalty history)
    int32_t code0 = -1;           // this step's
    std::vector<int32_t> frame;   // the last complete frame's codes
    int frames = 0;
  };

  // The talker and code predictor time of the steps, logged every kTimingLogInterval (the stage
  // process has no metrics endpoint of its own): where a step's time goes, at what batch size.
  class StepTimes {
   public:
    explicit StepTimes(int stage_id) : stage_id_(stage_id) {}
    void add(size_t batch, Clock::duration talker, Clock::duration predictor) {
      ++steps_;
      rows_ += batch;
      talker_ += talker;
      predictor_ += predictor;
      if (Clock::now() - since_ < kTimingLogInterval) return;
      const double steps = static_cast<double>(steps_);
      spdlog::info("stage {}: {} steps, mean batch {:.1f}; per step: talker {:.2f} ms, code predictor {:.2f} ms",
                   stage_id_, steps_, static_cast<double>(rows_) / steps,
                   std::chrono::duration<double, std::milli>(talker_).count() / steps,
                   std::chrono::duration<double, std::milli>(predictor_).count() / steps);
      *this = StepTimes(stage_id_);
    }

   private:
    static constexpr std::chrono::seconds kTimingLogInterval{5};
    int stage_id_;
    Clock::time_point since_ = Clock::now();
    int64_t steps_ = 0;
    size_t rows_ = 0;
    Clock::duration talker_{};
    Clock::duration predictor_{};
  };

  // The KV budget: kv_cache_memory_bytes when set, else on a GPU this stage's
  // gpu_memory_utilization share of it (engine::gpu_share_kv_cache_bytes: other stages on the same
  // device keep theirs) and on the CPU the default share of free RAM.
  size_t kv_budget(const engine::EngineConfig& config,
                   const std::optional<tensor::DeviceMemory>& memory_at_start) const {
    if (!memory_at_start || config.kv_cache_memory_bytes) {
      return config.kv_cache_memory_bytes.value_or(engine::default_cpu_kv_cache_bytes());
    }
    const tensor::DeviceMemory now = tensor::cuda_memory_info(talker_->device().index);
    const size_t activations =
        talker_->talker_stack().activation_bytes(config.max_num_batched_tokens, config.max_num_seqs);
    try {
      const size_t budget =
          engine::gpu_share_kv_cache_bytes(*memory_at_start, now, config.gpu_memory_utilization, activations);
      spdlog::info("stage {}: {} MiB of {}'s {} MiB in use; this stage's share {} leaves {} MiB of KV cache", stage_id_,
                   (now.total_bytes - now.free_bytes) >> 20, tensor::device_name(talker_->device()),
                   now.total_bytes >> 20, config.gpu_memory_utilization, budget >> 20);
      return budget;
    } catch (const Error& e) {
      throw_error(ErrorCode::kInvalidConfig, "stage {}: {}", stage_id_, e.what());
    }
  }

  // Starts waiting requests in arrival order while a predictor slot and their KV blocks are free,
  // and builds their prompts together: one text projection for all of them reads its weights once,
  // where a prompt each (in add_request) made every request wait for the prompts queued ahead.
  void admit() {
    std::vector<Running*> admitted;
    while (!waiting_.empty() && !free_slots_.empty()) {
      Running* r = waiting_.front();
      const int tokens = static_cast<int>(r->plan.num_rows()) + r->max_new_tokens - 1;
      const int needed = (tokens + model::kKvBlockSize - 1) / model::kKvBlockSize;
      if (needed > blocks_->num_available()) break;
      for (int b = 0; b < needed; ++b) r->block_table.push_back(*blocks_->allocate());
      r->slot = free_slots_.back();
      free_slots_.pop_back();
      waiting_.pop_front();
      running_.push_back(r);
      admitted.push_back(r);
    }
    if (admitted.empty()) return;
    std::vector<tts::TalkerPromptPlan> plans;
    plans.reserve(admitted.size());
    for (Running* r : admitted) plans.push_back(std::move(r->plan));
    std::vector<tts::TalkerPrompt> prompts = tts::build_talker_prompts(plans, *talker_);
    for (size_t i = 0; i < admitted.size(); ++i) admitted[i]->prompt = std::move(prompts[i]);
  }

  void release(Running& r) {
    for (int32_t block : r.block_table) blocks_->unref(block);
    r.block_table.clear();
    if (r.slot >= 0) free_slots_.push_back(r.slot);
    r.slot = -1;
  }

  // The text-track vector decode step k of `r` adds: the prompt's trailing rows, then tts_pad.
  static const float* text_track(const Running& r, int64_t k) {
    const Tensor& trailing = r.prompt.trailing;
    return k < trailing.shape()[0] ? trailing.data<float>() + k * trailing.shape()[1] : r.prompt.tts_pad.data<float>();
  }

  // One talker forward over every running request (the prompt for new ones, the last frame's row
  // for the others), then code0 for each.
  void talker_step() {
    const bool decode_only =
        std::all_of(running_.begin(), running_.end(), [](const Running* r) { return r->context_len > 0; });
    if (decode_only) {
      feed_frames();
    } else {
      forward_rows();
    }
    sample_code0s();
  }

  // A step of decode rows alone: the talker builds them from the last frames (on the device where it
  // has decode steps).
  void feed_frames() {
    model::ForwardBatch batch;
    std::vector<int32_t> slots, frames;
    std::vector<const float*> text;
    for (Running* r : running_) {
      model::SequenceSlice seq;
      seq.query_start = static_cast<int32_t>(batch.seqs.size());
      seq.query_len = 1;
      seq.context_len = r->context_len;
      seq.block_table = r->block_table;
      batch.positions.push_back(r->context_len);
      batch.seqs.push_back(std::move(seq));
      slots.push_back(r->slot);
      frames.insert(frames.end(), r->frame.begin(), r->frame.end());
      // Decode step k feeds frame k.
      text.push_back(text_track(*r, r->frames - 1));
      ++r->context_len;
    }
    talker_->forward_frames(batch, slots, frames, text, logits_, hidden_);
  }

  // A step with prompts in it: every row built on the host.
  void forward_rows() {
    const int64_t h = talker_->hidden_size();
    model::ForwardBatch batch;
    int64_t rows = 0;
    for (Running* r : running_) rows += r->context_len == 0 ? r->prompt.rows.shape()[0] : 1;
    Tensor inputs = Tensor::zeros({rows, h}, DType::kF32);
    int64_t row = 0;
    for (Running* r : running_) {
      model::SequenceSlice seq;
      seq.query_start = static_cast<int32_t>(row);
      seq.context_len = r->context_len;
      seq.block_table = r->block_table;
      float* out = inputs.data<float>() + row * h;
      if (r->context_len == 0) {
        seq.query_len = static_cast<int32_t>(r->prompt.rows.shape()[0]);
        std::copy_n(r->prompt.rows.data<float>(), seq.query_len * h, out);
      } else {
        seq.query_len = 1;
        std::copy_n(text_track(*r, r->frames - 1), h, out);
        talker_->add_frame_embedding(r->frame, out);
      }
      for (int32_t p = 0; p < seq.query_len; ++p) batch.positions.push_back(r->context_len + p);
      r->context_len += seq.query_len;
      row += seq.query_len;
      batch.seqs.push_back(std::move(seq));
    }
    talker_->forward(batch, inputs, logits_, hidden_);
  }

  // code0 of every running request from the step's logits, on the host.
  void sample_code0s() {
    const int vocab = talker_->codec_vocab_size();
    const tts::TalkerConfig& config = talker_->config();
    const int32_t eos = config.codec_eos_id;
    for (size_t i = 0; i < running_.size(); ++i) {
      Running* r = running_[i];
      std::span<float> logits(logits_.data() + i * vocab, vocab);
      // The control ids (the top 1024 of the codec vocabulary: specials, languages, speakers) are
      // never sampled, except the end of speech.
      const float eos_logit = logits[eos];
      std::fill(logits.begin() + std::max(0, vocab - 1024), logits.end(), -std::numeric_limits<float>::infinity());
      // ignore_eos: exactly max_new_tokens frames (benchmarks).
      logits[eos] = r->params.ignore_eos ? -std::numeric_limits<float>::infinity() : eos_logit;
      const engine::SamplingState state{r->params, {}, r->code0s, std::span<const int32_t>(&eos, 1), r->rng};
      r->code0 = sampler_.sample(logits, state).token_id;
      r->code0s.push_back(r->code0);
    }
  }

  // The code predictor for the requests whose code0 is not the end of speech: one batch per
  // codebook on the talker's device, the draws there too (one copy back per step).
  void predict_codes() {
    std::vector<Running*> framed;
    std::vector<int32_t> rows, slots, code0s;
    std::vector<tensor::ops::SamplingParams> params;
    const int groups = talker_->num_code_groups() - 1;
    for (size_t i = 0; i < running_.size(); ++i) {
      Running* r = running_[i];
      if (r->code0 == talker_->config().codec_eos_id) continue;
      framed.push_back(r);
      rows.push_back(static_cast<int32_t>(i));
      slots.push_back(r->slot);
      code0s.push_back(r->code0);
      tensor::ops::SamplingParams p;
      p.temperature = subtalker_.temperature;
      p.top_k = subtalker_.top_k;
      p.top_p = subtalker_.top_p;
      p.seed = r->seed;
      p.step = static_cast<uint64_t>(r->frames) * groups;
      params.push_back(p);
    }
    if (framed.empty()) return;
    Tensor hidden = hidden_;
    if (framed.size() != running_.size()) {
      Tensor row_ids = Tensor::empty({static_cast<int64_t>(rows.size())}, DType::kI32);
      std::copy(rows.begin(), rows.end(), row_ids.data<int32_t>());
      hidden = Tensor::empty({row_ids.dim(0), hidden_.dim(1)}, hidden_.dtype(), hidden_.device());
      tensor::ops::embedding(hidden_, row_ids, hidden);
    }
    std::vector<int32_t> codes;
    talker_->predict_frames(slots, hidden, code0s, params, codes);
    for (size_t i = 0; i < framed.size(); ++i) {
      framed[i]->frame.assign(1, framed[i]->code0);
      framed[i]->frame.insert(framed[i]->frame.end(), codes.begin() + i * groups, codes.begin() + (i + 1) * groups);
    }
  }

  int stage_id_;
  std::unique_ptr<tts::Talker> talker_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  engine::SamplingParams base_;
  engine::SamplingParams subtalker_;
  int default_max_new_tokens_ = 0;
  int max_instructions_length_ = tts::kDefaultMaxInstructionsLength;
  int max_num_seqs_ = 0;
  int max_model_len_ = 0;
  std::unique_ptr<engine::BlockPool> blocks_;
  std::vector<int> free_slots_;
  engine::SamplingRng seed_source_{0};
  std::map<std::string, std::unique_ptr<Running>> requests_;
  std::deque<Running*> waiting_;
  std::vector<Running*> running_;
  engine::Sampler sampler_;
  std::vector<float> logits_;
  Tensor hidden_;  // the talker's post-norm hidden states of the last step, on its device
  StepTimes step_times_{stage_id_};
  std::vector<StepTiming> timings_;  // since take_step_timings()
};

}  // namespace

std::unique_ptr<StageRunner> make_qwen3_tts_talker_runner(const Json& engine_args, const StageRunnerContext& context) {
  return std::make_unique<Qwen3TtsTalkerRunner>(engine_args, context);
}

}  // namespace omni::runtime
