#include "cli/generate.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "base/log.h"
#include "cli/chat_messages.h"
#include "cli/generate_image.h"
#include "cli/model_source.h"
#include "engine/ar_engine.h"
#include "engine/tokenizer_detokenizer.h"
#include "model/causal_lm.h"
#include "model/hf_config.h"
#include "model/model_dtype.h"
#include "runtime/tensor_parallel_model.h"
#include "tensor/backend.h"
#include "tensor/device.h"
#include "tensor/npy.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::cli {
namespace {

namespace fs = std::filesystem;

struct GenerateOptions {
  std::string model;
  std::string tokenizer;
  std::string revision = "main";
  std::string tokenizer_revision = "main";
  std::string download_dir;
  std::string prompt_token_ids;
  std::string prompt;
  std::string messages;
  std::string mm_processor_kwargs;  // JSON object, as a chat request's field
  std::string prompts_file;
  int max_tokens = 16;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  std::string dump_logits;
  std::string output = "text";
  std::string device = "auto";
  std::string dtype = "auto";
  int tensor_parallel_size = 1;
  // Engine (vLLM's names and defaults).
  int max_num_seqs = 256;
  std::optional<int> max_num_batched_tokens;
  std::optional<int> num_gpu_blocks_override;
  std::optional<size_t> kv_cache_memory_bytes;
  double gpu_memory_utilization = 0.9;
  std::optional<int> max_model_len;
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  bool enforce_eager = false;
  bool async_scheduling = false;
  // Image models (diffusers checkpoints; cli/generate_image.h).
  ImageGenerateOptions image;
};

// One prompt to generate from, with where it came from for error messages.
struct PromptJob {
  std::vector<int32_t> token_ids;
  engine::SamplingParams sampling;
  std::string source;  // "--prompt-token-ids" or "FILE:LINE"
  // The media of --messages (model/causal_lm.h's kMultiModalData), under that key; else empty.
  Json additional_information = Json::object();
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

// The tokenizer named by --tokenizer, else the model folder's when it has one, else none.
std::unique_ptr<text::Tokenizer> load_tokenizer(const GenerateOptions& options) {
  if (!options.tokenizer.empty()) return text::Tokenizer::load(options.tokenizer);
  return load_model_tokenizer(options.model);
}

// --messages as one prompt job (cli/chat_messages.h).
PromptJob render_messages(const GenerateOptions& options, const text::Tokenizer* tokenizer,
                          const engine::SamplingParams& base) {
  const fs::path dir = options.tokenizer.empty() ? fs::path(options.model) : fs::path(options.tokenizer);
  ChatPrompt chat = render_chat_messages(options.messages, options.mm_processor_kwargs, options.model, dir, tokenizer);
  PromptJob job{std::move(chat.token_ids), base, "--messages"};
  job.additional_information = std::move(chat.additional_information);
  return job;
}

// Flags win; otherwise the checkpoint's generation_config.json, as vLLM applies it; otherwise
// vLLM's defaults. Ranges are checked by the engine, which names the parameter.
engine::SamplingParams base_sampling(const GenerateOptions& options, const model::GenerationDefaults& defaults) {
  engine::SamplingParams p;
  p.temperature = options.temperature.value_or(defaults.temperature.value_or(p.temperature));
  p.top_p = options.top_p.value_or(defaults.top_p.value_or(p.top_p));
  p.top_k = options.top_k.value_or(defaults.top_k.value_or(p.top_k));
  p.min_p = options.min_p.value_or(p.min_p);
  p.repetition_penalty = options.repetition_penalty.value_or(p.repetition_penalty);
  p.presence_penalty = options.presence_penalty.value_or(p.presence_penalty);
  p.frequency_penalty = options.frequency_penalty.value_or(p.frequency_penalty);
  p.max_tokens = options.max_tokens;
  p.ignore_eos = options.ignore_eos;
  return p;
}

// The flag that sets each sampling parameter, so that errors about a command-line value name it.
std::string flag_of(std::string_view parameter) {
  std::string flag = "--";
  for (char c : parameter) flag += c == '_' ? '-' : c;
  return flag;
}

// Reads F.jsonl: one object per non-empty line with "prompt_token_ids" (a list of ids) or "prompt"
// (text, needs a tokenizer), and optionally "sampling_params" over the command line's.
std::vector<PromptJob> read_prompts_file(const std::string& path, const engine::SamplingParams& base,
                                         const text::Tokenizer* tokenizer) {
  std::ifstream in(path);
  if (!in) throw_error(ErrorCode::kNotFound, "--prompts-file: cannot open {}", path);
  std::vector<PromptJob> jobs;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string source = fmt::format("{}:{}", path, number);
    const Json entry = parse_json(line, source);
    if (!entry.is_object()) throw_error(ErrorCode::kInvalidArgument, "{}: expected a JSON object", source);
    PromptJob job;
    job.source = source;
    job.sampling = base;
    if (entry.contains("prompt_token_ids") == entry.contains("prompt")) {
      throw_error(ErrorCode::kInvalidArgument, "{}: give exactly one of \"prompt_token_ids\" and \"prompt\"", source);
    }
    for (const auto& [key, value] : entry.items()) {
      if (key == "prompt_token_ids") {
        if (!value.is_array()) throw_error(ErrorCode::kInvalidArgument, "{}: prompt_token_ids must be a list", source);
        for (const Json& id : value) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
            throw_error(ErrorCode::kInvalidArgument, "{}: prompt_token_ids has {}, not a token id", source, id.dump());
          }
          job.token_ids.push_back(id.get<int32_t>());
        }
      } else if (key == "prompt") {
        if (!value.is_string()) throw_error(ErrorCode::kInvalidArgument, "{}: prompt must be a string", source);
        if (!tokenizer) {
          throw_error(ErrorCode::kInvalidArgument,
                      "{}: a text \"prompt\" needs a tokenizer, and {} has none (give --tokenizer, or use "
                      "\"prompt_token_ids\")",
                      source, path);
        }
        job.token_ids = tokenizer->encode(value.get<std::string>());
      } else if (key == "sampling_params") {
        job.sampling = engine::sampling_params_from_json(value, base, source);
      } else {
        throw_error(ErrorCode::kInvalidArgument,
                    "{}: unknown field '{}' (allowed: prompt_token_ids, prompt, sampling_params)", source, key);
      }
    }
    jobs.push_back(std::move(job));
  }
  if (jobs.empty()) throw_error(ErrorCode::kInvalidArgument, "--prompts-file: {} has no prompts", path);
  return jobs;
}

engine::EngineConfig engine_config(const GenerateOptions& options) {
  engine::EngineConfig config;
  config.max_num_seqs = options.max_num_seqs;
  config.max_num_batched_tokens = options.max_num_batched_tokens.value_or(0);
  config.num_gpu_blocks_override = options.num_gpu_blocks_override.value_or(0);
  config.kv_cache_memory_bytes = options.kv_cache_memory_bytes;
  config.gpu_memory_utilization = options.gpu_memory_utilization;
  config.max_model_len = options.max_model_len.value_or(0);
  config.enable_prefix_caching = options.enable_prefix_caching;
  config.enable_chunked_prefill = options.enable_chunked_prefill;
  config.seed = options.seed.value_or(std::random_device{}());
  config.enforce_eager = options.enforce_eager;
  config.async_scheduling = options.async_scheduling;
  return config;
}

// Writes the float32 logits of every prompt position, straight from the model (before the engine
// takes over its KV cache).
void dump_prompt_logits(model::CausalLm& lm, const PromptJob& job, const std::string& path) {
  // A prompt with media is expanded, and its media rows replace the placeholders' embeddings.
  const std::optional<model::MultimodalPrompt> media =
      lm.prepare_multimodal_prompt(job.token_ids, job.additional_information);
  const std::vector<int32_t>& prompt = media ? media->token_ids : job.token_ids;
  const int prompt_len = static_cast<int>(prompt.size());
  const int blocks = (prompt_len + model::kKvBlockSize - 1) / model::kKvBlockSize;
  lm.init_kv_cache(blocks);
  model::ForwardBatch batch;
  batch.token_ids = prompt;
  batch.positions.resize(prompt_len);
  std::iota(batch.positions.begin(), batch.positions.end(), 0);
  model::SequenceSlice slice{0, prompt_len, 0, std::vector<int32_t>(blocks), true};
  std::iota(slice.block_table.begin(), slice.block_table.end(), 0);
  batch.seqs = {slice};
  batch.all_logits = true;
  if (media) {
    batch.input_rows = media->rows;
    batch.input_row_values = media->values;
    batch.input_row_deepstack = media->deepstack;
    batch.mrope_positions = media->mrope_positions;
  }
  std::vector<float> logits;
  lm.forward(batch, logits);
  tensor::save_npy(path,
                   tensor::Tensor::borrow(logits.data(), {prompt_len, lm.info().vocab_size}, tensor::DType::kF32));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A completion as printed: accumulated from the engine's deltas.
struct Completion {
  std::vector<int32_t> token_ids;
  std::string text;
  std::string finish_reason;
};

OrderedJson completion_json(const Completion& c) {
  return {{"token_ids", c.token_ids}, {"text", c.text}, {"finish_reason", c.finish_reason}};
}

int run_generate(GenerateOptions options) {
  if (is_diffusion_checkpoint(options.model)) {
    ImageGenerateOptions image = options.image;
    image.model = options.model;
    image.prompt = options.prompt;
    image.seed = options.seed;
    image.output = options.output;
    image.device = options.device == "auto" ? "cpu" : options.device;
    image.dtype = options.dtype;
    image.enforce_eager = options.enforce_eager;
    return run_generate_image(image);
  }
  const tensor::Device device = tensor::resolve_device(options.device, "--device");
  const std::optional<tensor::DType> dtype = model::parse_model_dtype(options.dtype, "--dtype");
  if (options.tensor_parallel_size < 1) {
    throw_error(ErrorCode::kInvalidArgument, "--tensor-parallel-size must be >= 1, got {}",
                options.tensor_parallel_size);
  }
  if (options.max_tokens < 1) {
    throw_error(ErrorCode::kInvalidArgument, "--max-tokens must be >= 1, got {}", options.max_tokens);
  }
  const int prompt_sources = !options.prompt_token_ids.empty() + !options.prompt.empty() + !options.messages.empty() +
                             !options.prompts_file.empty();
  if (prompt_sources != 1) {
    throw_error(ErrorCode::kInvalidArgument,
                "give exactly one of --prompt-token-ids, --prompt, --messages and --prompts-file");
  }
  if (!options.mm_processor_kwargs.empty() && options.messages.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "--mm-processor-kwargs goes with --messages (the media it applies to)");
  }
  if (!options.dump_logits.empty() && !options.prompts_file.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "--dump-logits works with one prompt, not with --prompts-file");
  }
  options.model = local_model_dir(options.model, {options.revision, options.download_dir});
  if (!options.tokenizer.empty()) {
    options.tokenizer = local_model_dir(options.tokenizer,
                                        {options.tokenizer_revision, options.download_dir, hub::FileSet::kTokenizer});
  }
  if (!fs::is_directory(options.model)) {
    throw_error(ErrorCode::kNotFound, "--model: model folder {} does not exist", options.model);
  }

  const model::GenerationDefaults defaults = model::read_generation_defaults(options.model);
  std::unique_ptr<text::Tokenizer> tokenizer = load_tokenizer(options);
  const engine::SamplingParams base = base_sampling(options, defaults);
  std::vector<PromptJob> jobs;
  if (!options.prompts_file.empty()) {
    jobs = read_prompts_file(options.prompts_file, base, tokenizer.get());
  } else if (!options.prompt.empty()) {
    if (!tokenizer) {
      throw_error(ErrorCode::kInvalidArgument,
                  "--prompt needs a tokenizer, and {} has none (give --tokenizer, or use --prompt-token-ids)",
                  options.model);
    }
    jobs.push_back({tokenizer->encode(options.prompt), base, "--prompt"});
  } else if (!options.messages.empty()) {
    jobs.push_back(render_messages(options, tokenizer.get(), base));
  } else {
    jobs.push_back({parse_token_ids_flag(options.prompt_token_ids), base, "--prompt-token-ids"});
  }

  auto load_start = std::chrono::steady_clock::now();
  std::unique_ptr<model::CausalLm> lm = runtime::load_tensor_parallel_lm(
      options.model, {.size = options.tensor_parallel_size, .device = device, .dtype = dtype});
  spdlog::info(
      "loaded {} on {} in {:.2f} s{}", options.model, tensor::device_name(device), seconds_since(load_start),
      options.tensor_parallel_size > 1 ? fmt::format(" ({} tensor-parallel ranks)", options.tensor_parallel_size) : "");
  const model::CausalLmInfo& info = lm->info();
  for (const PromptJob& job : jobs) {
    for (size_t i = 0; i < job.token_ids.size(); ++i) {
      if (job.token_ids[i] >= info.vocab_size) {
        throw_error(ErrorCode::kInvalidArgument, "{}: token id {} at index {} is outside the vocabulary [0, {})",
                    job.source, job.token_ids[i], i, info.vocab_size);
      }
    }
  }
  if (!options.dump_logits.empty()) dump_prompt_logits(*lm, jobs.front(), options.dump_logits);

  std::unique_ptr<engine::TokenizerDetokenizer> detokenizer =
      tokenizer ? std::make_unique<engine::TokenizerDetokenizer>(*tokenizer) : nullptr;
  engine::ArEngine engine(*lm, engine_config(options), detokenizer.get());
  const int max_model_len = engine.config().max_model_len;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const PromptJob& job = jobs[i];
    const int prompt_len = static_cast<int>(job.token_ids.size());
    if (job.sampling.max_tokens && prompt_len + *job.sampling.max_tokens > max_model_len) {
      throw_error(ErrorCode::kInvalidArgument, "{}: {} prompt tokens + {} new tokens exceed max_model_len {}{}",
                  options.prompts_file.empty() ? "--max-tokens" : job.source, prompt_len, *job.sampling.max_tokens,
                  max_model_len,
                  max_model_len == info.max_position_embeddings ? " (the model's max_position_embeddings)" : "");
    }
    try {
      engine.add_request({std::to_string(i), job.token_ids, job.sampling, job.additional_information});
    } catch (const Error& e) {
      // A sampling value from the command line is named by its flag, one from a file by its line.
      std::string message = e.what();
      if (options.prompts_file.empty()) {
        auto quote = message.find('\'');
        auto end = quote == std::string::npos ? quote : message.find('\'', quote + 1);
        if (end != std::string::npos) message = flag_of(message.substr(quote + 1, end - quote - 1)) + ": " + message;
      } else {
        message = job.source + ": " + message;
      }
      throw Error(e.code(), message);
    }
  }

  // Steps until every request finished, printing results in prompt order as soon as they are known.
  std::vector<std::vector<Completion>> results(jobs.size());
  std::vector<int> unfinished(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    results[i].resize(jobs[i].sampling.n);
    unfinished[i] = jobs[i].sampling.n;
  }
  size_t next_to_print = 0;
  auto print_ready = [&] {
    for (; next_to_print < jobs.size() && unfinished[next_to_print] == 0; ++next_to_print) {
      const std::vector<Completion>& completions = results[next_to_print];
      for (size_t j = 0; j < completions.size(); ++j) {
        const Completion& c = completions[j];
        if (!options.prompts_file.empty()) {
          OrderedJson line = {{"index", next_to_print}};
          if (completions.size() > 1) line["completion"] = j;
          line.update(completion_json(c));
          std::printf("%s\n", line.dump().c_str());
        } else if (options.output == "json") {
          std::printf("%s\n", completion_json(c).dump().c_str());
        } else if (tokenizer) {
          std::printf("%s\n", c.text.c_str());
        } else {
          std::string ids;
          for (int32_t id : c.token_ids) ids += (ids.empty() ? "" : " ") + std::to_string(id);
          std::printf("%s\n", ids.c_str());
        }
      }
      std::fflush(stdout);
    }
  };

  double prefill_s = 0, decode_s = 0;
  int prefill_steps = 0, decode_steps = 0;
  size_t prompt_tokens = 0, generated = 0, decode_tokens = 0;
  for (const PromptJob& job : jobs) prompt_tokens += job.token_ids.size();
  auto run_start = std::chrono::steady_clock::now();
  while (engine.has_unfinished_requests()) {
    auto step_start = std::chrono::steady_clock::now();
    std::vector<engine::RequestOutput> outputs = engine.step();
    const double step_s = seconds_since(step_start);
    const engine::EngineStats stats = engine.stats();
    // A step whose batch is one token per sequence is a pure decode step; the others carry prompts.
    if (stats.last_step_num_tokens == stats.last_step_num_seqs) {
      decode_s += step_s;
      ++decode_steps;
      decode_tokens += stats.last_step_num_seqs;
    } else {
      prefill_s += step_s;
      ++prefill_steps;
    }
    for (const engine::RequestOutput& out : outputs) {
      const size_t index = std::stoul(out.request_id);
      for (const engine::CompletionOutput& delta : out.completions) {
        Completion& c = results[index][delta.index];
        c.token_ids.insert(c.token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
        c.text += delta.text;
        generated += delta.token_ids.size();
        if (delta.finish_reason) {
          c.finish_reason = engine::finish_reason_name(*delta.finish_reason);
          --unfinished[index];
        }
      }
    }
    print_ready();
  }
  const engine::EngineStats stats = engine.stats();
  spdlog::info(
      "prefill: {} tokens in {} steps, {:.3f} s; decode: {} steps in {:.3f} s ({:.1f} ms/step, {:.2f} tokens/s)",
      prompt_tokens, prefill_steps, prefill_s, decode_steps, decode_s,
      decode_steps > 0 ? 1000.0 * decode_s / decode_steps : 0.0,
      decode_s > 0 ? static_cast<double>(decode_tokens) / decode_s : 0.0);
  spdlog::info("{} requests, {} tokens generated in {:.3f} s; {} preemptions; prefix cache: {} of {} blocks hit",
               jobs.size(), generated, seconds_since(run_start), stats.num_preemptions, stats.prefix_cache.hit_blocks,
               stats.prefix_cache.queried_blocks);
  return 0;
}

}  // namespace

Command generate_command() {
  return {
      "generate", "Generate completions with a text model checkpoint (offline inference through the engine)",
      [](CLI::App& sub) {
        auto options = std::make_shared<GenerateOptions>();
        sub.add_option("--model", options->model,
                       "Hugging Face model folder (config.json, *.safetensors) or Hub id (org/name)")
            ->required();
        sub.add_option("--tokenizer", options->tokenizer,
                       "Tokenizer folder, tokenizer.json or Hub id (default: the model folder's, when it has one)");
        sub.add_option("--revision", options->revision, "Branch, tag or commit of --model when it is a Hub id")
            ->default_str("main");
        sub.add_option("--tokenizer-revision", options->tokenizer_revision,
                       "Branch, tag or commit of --tokenizer when it is a Hub id")
            ->default_str("main");
        sub.add_option("--download-dir", options->download_dir,
                       "Hub cache root for Hub ids (default: $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub)");
        sub.add_option("--prompt-token-ids", options->prompt_token_ids, "The prompt as token ids, e.g. 1,2,3");
        sub.add_option("--prompt", options->prompt, "The prompt as text (needs a tokenizer)");
        sub.add_option("--messages", options->messages,
                       "The prompt as chat messages, a JSON list rendered with the model's chat template");
        sub.add_option("--mm-processor-kwargs", options->mm_processor_kwargs,
                       "With --messages: the multimodal processor kwargs, a JSON object as a chat request's "
                       "mm_processor_kwargs (min_pixels, max_pixels, fps, min_frames, max_frames, "
                       "use_audio_in_video)");
        sub.add_option("--prompts-file", options->prompts_file,
                       "A JSONL file of prompts, run together through one engine: each line "
                       "{\"prompt_token_ids\": [...]} or {\"prompt\": \"...\"}, with optional \"sampling_params\" "
                       "(vLLM's names) over the sampling flags; prints one JSON line per prompt, in file order: "
                       "{\"index\", \"token_ids\", \"text\", \"finish_reason\"} (plus \"completion\" when n > 1)");
        sub.add_option("--max-tokens", options->max_tokens, "Most tokens to generate")->default_val(16);
        sub.add_option("--temperature", options->temperature,
                       "Sampling temperature; 0 is greedy (default: generation_config.json, else 1)");
        sub.add_option("--top-p", options->top_p, "Nucleus sampling mass (default: generation_config.json, else 1)");
        sub.add_option("--top-k", options->top_k,
                       "Sample among the k most likely tokens; 0 or -1: all "
                       "(default: generation_config.json, else all)");
        sub.add_option("--min-p", options->min_p,
                       "Drop tokens below this fraction of the most likely one's probability");
        sub.add_option("--repetition-penalty", options->repetition_penalty,
                       "Penalise tokens of the prompt and the output (> 1 discourages repeats)");
        sub.add_option("--presence-penalty", options->presence_penalty, "Penalise tokens the output already has");
        sub.add_option("--frequency-penalty", options->frequency_penalty,
                       "Penalise tokens by how often the output has them");
        sub.add_option("--seed", options->seed, "Random seed for sampling (default: random)");
        sub.add_flag("--ignore-eos", options->ignore_eos, "Keep generating after an end-of-sequence token");
        sub.add_option("--dump-logits", options->dump_logits,
                       "Write the float32 logits of every prompt position, [prompt_len, vocab], to this .npy file");
        const std::string image_group = "Image models (a diffusers checkpoint with model_index.json)";
        ImageGenerateOptions& image = options->image;
        sub.add_option("--negative-prompt", image.negative_prompt, "What the image should not show (with CFG)")
            ->group(image_group);
        sub.add_option("--height", image.height, "Image height in pixels (default: the pipeline's)")
            ->group(image_group);
        sub.add_option("--width", image.width, "Image width in pixels (default: the pipeline's)")->group(image_group);
        sub.add_option("--num-inference-steps", image.num_inference_steps, "Denoising steps (default: the pipeline's)")
            ->group(image_group);
        sub.add_option("--guidance-scale", image.guidance_scale,
                       "Classifier-free guidance scale; > 0 runs the negative prompt too (default: the pipeline's)")
            ->group(image_group);
        sub.add_option("--max-sequence-length", image.max_sequence_length, "Most prompt tokens (default 512)")
            ->group(image_group);
        sub.add_option("--latents", image.latents,
                       "Start from these float32 latents (.npy, [K, C, H/f, W/f] as diffusers' latents=) instead of "
                       "noise from --seed")
            ->group(image_group);
        sub.add_option("--num-images", image.num_images, "Images to generate (seeds S, S+1, ...)")
            ->default_val(1)
            ->group(image_group);
        sub.add_option("--output-image", image.output_image,
                       "Where to write the image: .png, .jpg/.jpeg or .webp (K > 1: FILE-0.png, FILE-1.png, ...)")
            ->group(image_group);
        sub.add_option("--dump-latents", image.dump_latents, "Write the latents before the VAE decoder to this .npy")
            ->group(image_group);
        sub.add_flag("--vae-use-tiling", image.vae_use_tiling,
                     "Decode latents larger than one VAE tile tile by tile (diffusers' vae.enable_tiling())")
            ->group(image_group);
        sub.add_option("--model-class-name", image.model_class_name,
                       "The diffusers pipeline class to run (default: model_index.json's _class_name)")
            ->group(image_group);
        sub.add_option("--output", options->output,
                       "text: the generated text (token ids while no tokenizer is loaded); json: "
                       "{\"token_ids\", \"text\", \"finish_reason\"}")
            ->check(CLI::IsMember({"text", "json"}))
            ->default_val("text");
        sub.add_option("--device", options->device,
                       "Device to run on: auto (cuda when a GPU is visible, else cpu), cpu, cuda or cuda:N")
            ->default_val("auto");
        sub.add_option("--dtype", options->dtype,
                       "Weights, activations and KV cache: auto (the checkpoint's; bfloat16 for float32 ones on "
                       "CUDA), bfloat16, float16 (half) or float32 (float); the CPU computes in float32")
            ->default_val("auto");
        sub.add_option("--tensor-parallel-size", options->tensor_parallel_size,
                       "Split the model over this many ranks, one process each (rank r on device r)")
            ->default_val(1);
        const std::string engine_group = "Engine";
        sub.add_option("--max-num-seqs", options->max_num_seqs, "Most sequences per engine step")
            ->default_val(256)
            ->group(engine_group);
        sub.add_option("--max-num-batched-tokens", options->max_num_batched_tokens,
                       "Most tokens per engine step (default: 2048 with chunked prefill, else max_model_len)")
            ->group(engine_group);
        sub.add_option("--num-gpu-blocks-override", options->num_gpu_blocks_override,
                       "Use exactly this many KV cache blocks of 16 tokens")
            ->group(engine_group);
        sub.add_option("--kv-cache-memory-bytes", options->kv_cache_memory_bytes,
                       "KV cache size in bytes (default on the CPU: a quarter of the free RAM, at most 4 GiB)")
            ->group(engine_group);
        sub.add_option("--gpu-memory-utilization", options->gpu_memory_utilization,
                       "Fraction of the GPU's memory for weights, activations and the KV cache, in (0, 1]")
            ->default_val(0.9)
            ->group(engine_group);
        sub.add_option("--max-model-len", options->max_model_len,
                       "Longest sequence, prompt plus output (default: the model's max_position_embeddings)")
            ->group(engine_group);
        sub.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", options->enable_prefix_caching,
                     "Reuse the KV blocks of prompt prefixes seen before (default: on)")
            ->group(engine_group);
        sub.add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill", options->enable_chunked_prefill,
                     "Split long prompts across steps, next to decodes (default: on)")
            ->group(engine_group);
        sub.add_flag("--enforce-eager", options->enforce_eager,
                     "No CUDA graphs: launch the ops of each decode (or denoising) step one by one")
            ->group(engine_group);
        sub.add_flag("--async-scheduling", options->async_scheduling,
                     "Schedule the next step while the current one runs on the device (same output)")
            ->group(engine_group);
        return [options] { return run_generate(*options); };
      }};
}

}  // namespace omni::cli
