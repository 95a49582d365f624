#include "cli/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "base/log.h"
#include "model/causal_lm.h"
#include "model/hf_config.h"
#include "model/model_registry.h"
#include "tensor/device.h"
#include "tensor/npy.h"
#include "tensor/ops.h"

namespace omni::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt_token_ids;
  int max_tokens = 16;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  std::string dump_logits;
  std::string output = "text";
  std::string device = "cpu";
};

// The sampling this command needs for one sequence; the engine's sampler is the full one.
struct SamplingParams {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;  // 0 or -1: no top-k cut
  uint64_t seed = 0;
};

std::vector<int32_t> parse_token_ids_flag(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, end - start);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || value < 0 || value > INT32_MAX) {
      throw_error(ErrorCode::kInvalidArgument, "--prompt-token-ids: '{}' is not a token id (expected e.g. 1,2,3)",
                  item);
    }
    ids.push_back(static_cast<int32_t>(value));
    start = end + 1;
  }
  return ids;
}

// The prompt as token ids. Text prompts (--prompt, --messages) join here once a tokenizer
// is wired in.
std::vector<int32_t> resolve_prompt(const GenerateOptions& options) {
  return parse_token_ids_flag(options.prompt_token_ids);
}

// Flags win; otherwise the checkpoint's generation_config.json, as vLLM applies it.
SamplingParams resolve_sampling(const GenerateOptions& options, const model::GenerationDefaults& defaults) {
  SamplingParams p;
  p.temperature = options.temperature.value_or(defaults.temperature.value_or(1.0f));
  p.top_p = options.top_p.value_or(defaults.top_p.value_or(1.0f));
  p.top_k = options.top_k.value_or(defaults.top_k.value_or(0));
  p.seed = options.seed.value_or(std::random_device{}());
  if (!(p.temperature >= 0.0f))
    throw_error(ErrorCode::kInvalidArgument, "--temperature must be >= 0, got {}", p.temperature);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    throw_error(ErrorCode::kInvalidArgument, "--top-p must be in (0, 1], got {}", p.top_p);
  if (p.top_k < -1)
    throw_error(ErrorCode::kInvalidArgument, "--top-k must be -1, 0 (both: off) or positive, got {}", p.top_k);
  return p;
}

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

  int32_t sample(const float* logits, int vocab) {
    tensor::Tensor row = tensor::Tensor::borrow(const_cast<float*>(logits), {1, vocab}, tensor::DType::kF32);
    if (params_.temperature < 1e-5f) {
      tensor::Tensor best = tensor::Tensor::empty({1}, tensor::DType::kI32);
      tensor::ops::argmax(row, best);
      return best.data<int32_t>()[0];
    }
    // Candidates in descending order: the top k, or the whole vocabulary.
    const int k = params_.top_k > 0 ? std::min(params_.top_k, vocab) : vocab;
    tensor::Tensor values = tensor::Tensor::empty({1, k}, tensor::DType::kF32);
    tensor::Tensor indices = tensor::Tensor::empty({1, k}, tensor::DType::kI32);
    tensor::ops::top_k(row, k, values, indices);
    float* v = values.data<float>();
    for (int i = 0; i < k; ++i) v[i] /= params_.temperature;
    tensor::ops::softmax(values, values);
    // Nucleus: the shortest prefix whose probability reaches top_p.
    int keep = k;
    float total = 0.0f;
    for (int i = 0; i < k; ++i) {
      total += v[i];
      if (total >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
    const float mass = std::accumulate(v, v + keep, 0.0f);
    float u = std::uniform_real_distribution<float>(0.0f, mass)(rng_);
    for (int i = 0; i < keep; ++i) {
      u -= v[i];
      if (u <= 0.0f) return indices.data<int32_t>()[i];
    }
    return indices.data<int32_t>()[keep - 1];
  }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int run_generate(const GenerateOptions& options) {
  const tensor::Device device = tensor::parse_device(options.device, "--device");
  if (device.type != tensor::DeviceType::kCpu) {
    throw_error(ErrorCode::kUnsupported, "--device {}: only the cpu backend can run models in this build",
                options.device);
  }
  if (options.max_tokens < 1) {
    throw_error(ErrorCode::kInvalidArgument, "--max-tokens must be >= 1, got {}", options.max_tokens);
  }
  const std::vector<int32_t> prompt = resolve_prompt(options);
  const model::GenerationDefaults defaults = model::read_generation_defaults(options.model);
  const SamplingParams sampling = resolve_sampling(options, defaults);

  auto load_start = std::chrono::steady_clock::now();
  std::unique_ptr<model::CausalLm> lm = model::builtin_model_registry().create_causal_lm(options.model);
  const model::CausalLmInfo& info = lm->info();
  spdlog::info("loaded {} in {:.2f} s", options.model, seconds_since(load_start));

  const int prompt_len = static_cast<int>(prompt.size());
  const int total = prompt_len + options.max_tokens;
  if (info.max_position_embeddings > 0 && total > info.max_position_embeddings) {
    throw_error(ErrorCode::kInvalidArgument,
                "--max-tokens: {} prompt tokens + {} new tokens exceed the model's max_position_embeddings {}",
                prompt_len, options.max_tokens, info.max_position_embeddings);
  }
  const int blocks = (total + model::kKvBlockSize - 1) / model::kKvBlockSize;
  lm->init_kv_cache(blocks);
  std::vector<int32_t> block_table(blocks);
  std::iota(block_table.begin(), block_table.end(), 0);

  model::ForwardBatch prefill;
  prefill.token_ids = prompt;
  prefill.positions.resize(prompt_len);
  std::iota(prefill.positions.begin(), prefill.positions.end(), 0);
  prefill.seqs = {model::SequenceSlice{0, prompt_len, 0, block_table, true}};
  prefill.all_logits = !options.dump_logits.empty();
  std::vector<float> logits;
  auto prefill_start = std::chrono::steady_clock::now();
  lm->forward(prefill, logits);
  const double prefill_s = seconds_since(prefill_start);
  if (!options.dump_logits.empty()) {
    tensor::save_npy(options.dump_logits,
                     tensor::Tensor::borrow(logits.data(), {prompt_len, info.vocab_size}, tensor::DType::kF32));
  }

  Sampler sampler(sampling);
  std::vector<int32_t> generated;
  std::string finish_reason = "length";
  const float* last = logits.data() + (logits.size() - info.vocab_size);
  auto decode_start = std::chrono::steady_clock::now();
  for (;;) {
    const int32_t next = sampler.sample(last, info.vocab_size);
    generated.push_back(next);
    if (!options.ignore_eos &&
        std::find(info.eos_token_ids.begin(), info.eos_token_ids.end(), next) != info.eos_token_ids.end()) {
      finish_reason = "stop";
      break;
    }
    if (static_cast<int>(generated.size()) == options.max_tokens) break;
    const int32_t pos = prompt_len + static_cast<int32_t>(generated.size()) - 1;
    model::ForwardBatch step{{next}, {pos}, {model::SequenceSlice{0, 1, pos, block_table, true}}, false};
    lm->forward(step, logits);
    last = logits.data();
  }
  const double decode_s = seconds_since(decode_start);
  // The first new token comes from the prefill; the rest each cost one decode step.
  const size_t steps = generated.size() - 1;
  spdlog::info("prefill: {} tokens in {:.3f} s; decode: {} steps in {:.3f} s ({:.2f} tokens/s)", prompt_len, prefill_s,
               steps, decode_s, steps > 0 ? static_cast<double>(steps) / decode_s : 0.0);

  // Without a tokenizer there is no text; the fields stay, empty, so the output shape is fixed.
  const std::string text;
  if (options.output == "json") {
    OrderedJson out = {{"token_ids", generated}, {"text", text}, {"finish_reason", finish_reason}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::string ids;
    for (int32_t id : generated) ids += (ids.empty() ? "" : " ") + std::to_string(id);
    std::printf("%s\n", text.empty() ? ids.c_str() : text.c_str());
  }
  return 0;
}

}  // namespace

Command generate_command() {
  return {
      "generate", "Generate a completion for one prompt with a text model checkpoint (offline inference)",
      [](CLI::App& sub) {
        auto options = std::make_shared<GenerateOptions>();
        sub.add_option("--model", options->model, "Hugging Face model folder (config.json, *.safetensors)")->required();
        sub.add_option("--prompt-token-ids", options->prompt_token_ids, "The prompt as token ids, e.g. 1,2,3")
            ->required();
        sub.add_option("--max-tokens", options->max_tokens, "Most tokens to generate")->default_val(16);
        sub.add_option("--temperature", options->temperature,
                       "Sampling temperature; 0 is greedy (default: generation_config.json, else 1)");
        sub.add_option("--top-p", options->top_p, "Nucleus sampling mass (default: generation_config.json, else 1)");
        sub.add_option("--top-k", options->top_k,
                       "Sample among the k most likely tokens; 0 or -1: all "
                       "(default: generation_config.json, else all)");
        sub.add_option("--seed", options->seed, "Random seed for sampling (default: random)");
        sub.add_flag("--ignore-eos", options->ignore_eos, "Keep generating after an end-of-sequence token");
        sub.add_option("--dump-logits", options->dump_logits,
                       "Write the float32 logits of every prompt position, [prompt_len, vocab], to this .npy file");
        sub.add_option("--output", options->output,
                       "text: the generated text (token ids while no tokenizer is loaded); json: "
                       "{\"token_ids\", \"text\", \"finish_reason\"}")
            ->check(CLI::IsMember({"text", "json"}))
            ->default_val("text");
        sub.add_option("--device", options->device, "Device to run on")->default_val("cpu");
        return [options] { return run_generate(*options); };
      }};
}

}  // namespace omni::cli
