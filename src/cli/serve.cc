#include "cli/serve.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>

#include "base/error.h"
#include "base/log.h"
#include "base/metrics.h"
#include "cli/api_frontends.h"
#include "cli/chat_media_options.h"
#include "cli/distributed_serve.h"
#include "cli/model_source.h"
#include "cli/serve_flags.h"
#include "cli/version.h"
#include "model/stage_model_registry.h"
#include "runtime/orchestrator.h"
#include "runtime/pipeline_from_config.h"
#include "runtime/termination_signals.h"
#include "server/api_server.h"
#include "server/frontend_metrics.h"
#include "server/speaker_embedder.h"
#include "server/tokenizer_renderer.h"
#include "server/voice_store.h"
#include "tensor/backend.h"
#include "text/chat_template/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::cli {

namespace {

// Voice-clone references worked on at once when the encoders run on a GPU: their decoding on the
// CPU and their kernels overlap (on the CPU the encoders themselves spread over the cores).
constexpr int kVoiceEncoderThreadsOnGpu = 4;

// The flags the user gave whose feature does not exist yet, each with the reason.
std::vector<std::string> unsupported_flags(const ServeFlags& flags) {
  std::vector<std::string> out;
  for (const FlagSpec& spec : serve_flag_specs()) {
    if (spec.unsupported.empty() || !flags.was_given(spec.dest)) continue;
    if (spec.name == "--diffusion-attention-config-entry") continue;  // reported as --diffusion-attention-config
    out.push_back(fmt::format("{} ({})", flags.flag_of.at(spec.dest), spec.unsupported));
  }
  if (flags.values["worker_backend"] == "ray") {
    out.push_back("--worker-backend ray (the Ray worker backend does not exist)");
  }
  return out;
}

// The tokenizer of --tokenizer (a folder, or a Hub id's snapshot folder) or of the model folder.
// --chat-template is a file when one exists at that path, else the template text itself (as in vLLM).
// --chat-template-content-format: "auto" leaves the format to the template (TokenizerRenderer).
std::unique_ptr<server::TokenizerRenderer> load_renderer(const std::filesystem::path& model_dir,
                                                         const ServeFlags& flags) {
  const std::filesystem::path tokenizer_dir = flags.values["tokenizer"].is_string()
                                                  ? std::filesystem::path(flags.values["tokenizer"].get<std::string>())
                                                  : model_dir;
  const std::string format_name = flags.values["chat_template_content_format"].get<std::string>();
  const std::optional<text::ContentFormat> content_format =
      format_name == "auto" ? std::nullopt : std::optional(text::content_format_from_name(format_name));
  std::unique_ptr<server::TokenizerRenderer> renderer;
  if (!flags.was_given("chat_template")) {
    renderer = server::TokenizerRenderer::load(tokenizer_dir, content_format);
  } else {
    const std::string value = flags.values["chat_template"].get<std::string>();
    std::string source = value;
    std::string name = "--chat-template";
    if (std::error_code ec; std::filesystem::is_regular_file(value, ec)) {
      std::ifstream in(value);
      source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof()) throw_error(ErrorCode::kLoadFailed, "--chat-template: cannot read {}", value);
      name = value;
    }
    renderer = std::make_unique<server::TokenizerRenderer>(text::Tokenizer::load(tokenizer_dir),
                                                           text::ChatTemplate(source, name), content_format);
  }
  spdlog::info("serve: chat message content is rendered in the {} format{}",
               text::content_format_name(renderer->content_format()),
               format_name == "auto" ? " (detected from the chat template)" : "");
  return renderer;
}

// --api-key, else OMNISTAGE_API_KEY, else VLLM_API_KEY (as vLLM reads its variable); empty: no keys.
std::vector<std::string> api_keys(const ServeFlags& flags) {
  if (flags.was_given("api_key")) return flags.values["api_key"].get<std::vector<std::string>>();
  for (const char* variable : {"OMNISTAGE_API_KEY", "VLLM_API_KEY"}) {
    if (const char* key = std::getenv(variable); key && *key) return {key};
  }
  return {};
}

std::chrono::milliseconds seconds_flag(const ServeFlags& flags, const std::string& dest) {
  return std::chrono::milliseconds(std::llround(flags.values[dest].get<double>() * 1000.0));
}

server::HttpLimits http_limits(const ServeFlags& flags) {
  server::HttpLimits limits;
  limits.max_body_bytes = flags.values["max_request_body_bytes"].get<size_t>();
  limits.max_header_bytes = flags.values["h11_max_incomplete_event_size"].get<size_t>();
  limits.max_header_fields = flags.values["h11_max_header_count"].get<size_t>();
  limits.keep_alive_timeout = seconds_flag(flags, "timeout_keep_alive");
  // vLLM sets its keep-alive timeout with this variable; the flag wins over it.
  if (const char* text = std::getenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE");
      text && *text && !flags.was_given("timeout_keep_alive")) {
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    if (*end != '\0' || !(seconds > 0)) {
      throw_error(ErrorCode::kInvalidArgument, "VLLM_HTTP_TIMEOUT_KEEP_ALIVE: '{}' is not a number of seconds > 0",
                  text);
    }
    limits.keep_alive_timeout = std::chrono::milliseconds(std::llround(seconds * 1000.0));
  }
  limits.header_timeout = seconds_flag(flags, "header_read_timeout");
  limits.body_timeout = seconds_flag(flags, "body_read_timeout");
  limits.max_connections = flags.values["max_connections"].get<size_t>();
  return limits;
}

// Each connection is a file descriptor, as are the stages' sockets and shared-memory segments: the
// soft limit is raised towards the hard one (as vLLM does) so that --max-connections, not EMFILE,
// is what refuses clients.
void raise_open_file_limit(size_t max_connections) {
  constexpr rlim_t kReserve = 256;  // the stages' channels, segments, log files
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(max_connections) + kReserve;
  if (limit.rlim_cur >= wanted) return;
  limit.rlim_cur = std::min(limit.rlim_max, std::max<rlim_t>(wanted, 65536));
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur < wanted) {
    spdlog::warn(
        "serve: the open-file limit ({}) is below --max-connections {} plus {} for the stages; clients past "
        "it are refused by the kernel rather than answered 503",
        limit.rlim_cur, max_connections, kReserve);
  }
}

server::ApiServerOptions api_server_options(const ServeFlags& flags, const runtime::ServableStages& servable,
                                            const model::ModelFacts& facts) {
  const config::EffectiveConfig& config = servable.config;
  server::ApiServerOptions options;
  options.host = flags.values["host"].is_null() ? "0.0.0.0" : flags.values["host"].get<std::string>();
  options.port = static_cast<uint16_t>(flags.values["port"].get<int64_t>());
  options.api_keys = api_keys(flags);
  options.cors.allowed_origins = flags.values["allowed_origins"].get<std::vector<std::string>>();
  options.cors.allowed_methods = flags.values["allowed_methods"].get<std::vector<std::string>>();
  options.cors.allowed_headers = flags.values["allowed_headers"].get<std::vector<std::string>>();
  options.cors.allow_credentials = flags.was_given("allow_credentials");
  options.http_limits = http_limits(flags);
  options.max_inflight_requests = flags.values["max_inflight_requests"].get<size_t>();
  if (flags.values["served_model_name"].is_array()) {
    for (const auto& name : flags.values["served_model_name"]) options.served_model_names.push_back(name);
  }
  options.model_path = config.model;
  options.pipeline = config.pipeline->model_type;
  options.output_modalities.clear();
  for (const config::EffectiveStage& stage : config.stages) {
    if (!stage.topology->final_output) continue;
    const std::string& modality = stage.topology->final_output_type;
    if (std::find(options.output_modalities.begin(), options.output_modalities.end(), modality) ==
        options.output_modalities.end()) {
      options.output_modalities.push_back(modality);
    }
    if (auto it = stage.engine_args.find("max_model_len"); it != stage.engine_args.end() && it->is_number_integer()) {
      options.max_model_len = it->get<int>();
    }
  }
  options.enable_sleep_mode = flags.was_given("enable_sleep_mode");
  options.media = chat_media_options(facts);
  if (const char* timeout = std::getenv("VLLM_AUDIO_FETCH_TIMEOUT"); timeout != nullptr && *timeout != '\0') {
    char* end = nullptr;
    const double seconds = std::strtod(timeout, &end);
    if (*end != '\0' || !(seconds > 0)) {
      throw_error(ErrorCode::kInvalidConfig, "VLLM_AUDIO_FETCH_TIMEOUT must be a positive number of seconds, got '{}'",
                  timeout);
    }
    options.media.fetch_timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }
  if (flags.values["limit_mm_per_prompt"].is_string()) {
    options.media.limit_per_prompt = server::parse_limit_mm_per_prompt(flags.values["limit_mm_per_prompt"]);
  }
  if (flags.values["allowed_local_media_path"].is_string()) {
    options.media.allowed_local_media_path = flags.values["allowed_local_media_path"].get<std::string>();
  }
  for (const config::StagePipelineConfig* stage : servable.left_out) {
    if (stage->final_output) options.unserved_modalities.push_back(stage->final_output_type);
  }
  const std::string version = version_text();
  options.version = version.substr(0, version.find('\n'));
  options.playground = !flags.was_given("enable_playground");
  options.speech.voices = facts.voices;
  // A checkpoint that serves one speech task answers requests without task_type with it.
  if (facts.task_types.size() == 1) options.speech.task_type = facts.task_types.front();
  for (const config::EffectiveStage& stage : config.stages) {
    auto it = stage.engine_args.find("tts_max_instructions_length");
    if (it != stage.engine_args.end() && it->is_number_integer())
      options.speech.max_instructions_length = it->get<int>();
  }
  return options;
}

// The device of `stage` as this process sees it: its engine argument `device` ("auto" when unset),
// and for a CUDA device the first of the stage's `devices`, which index this process's visible
// devices as they index the CUDA_VISIBLE_DEVICES the stage's process is started with.
tensor::Device stage_device_here(const config::EffectiveStage& stage) {
  const int id = stage.topology->stage_id;
  std::string text = "auto";
  if (auto it = stage.engine_args.find("device"); it != stage.engine_args.end() && it->is_string()) {
    text = it->get<std::string>();
  }
  const std::string source = fmt::format("stage {} engine argument device", id);
  const tensor::Device device = tensor::resolve_device(text, source);
  if (device.type != tensor::DeviceType::kCuda || !stage.devices) return device;
  const std::string first = stage.devices->substr(0, stage.devices->find(','));
  if (first.empty() || !std::all_of(first.begin(), first.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return device;
  }
  return tensor::resolve_device("cuda:" + first, fmt::format("stage {} devices", id));
}

// Voice cloning, when a stage model of the pipeline has a speaker encoder for this checkpoint: the
// encoder runs in this process (server/speaker_embedder.h) on the device of that stage, uploaded
// voices live in --voices-dir.
void add_voice_cloning(const ServeFlags& flags, const config::EffectiveConfig& config, MetricsRegistry& metrics,
                       server::SpeechOptions& speech) {
  const model::StageModels& models = model::builtin_stage_models();
  const std::filesystem::path model_dir(config.model);
  for (const config::EffectiveStage& stage : config.stages) {
    auto it = models.speaker_encoders.find(stage.topology->stage_model);
    if (it == models.speaker_encoders.end()) continue;
    const tensor::Device device = stage_device_here(stage);
    std::optional<model::SpeakerEncoderModel> encoder = it->second(model_dir, device);
    if (!encoder) continue;
    server::MediaFetchOptions fetch;
    if (flags.values["allowed_local_media_path"].is_string()) {
      fetch.allowed_local_media_path = flags.values["allowed_local_media_path"].get<std::string>();
    }
    const auto cache = flags.values["speaker_embedding_cache_size"].get<int64_t>();
    if (cache < 0) throw_error(ErrorCode::kInvalidArgument, "--speaker-embedding-cache-size {} is negative", cache);
    server::VoiceEncoder voice{encoder->sample_rate,
                               encoder->embedding_size,
                               std::move(encoder->embed),
                               static_cast<size_t>(encoder->codes_per_frame),
                               std::move(encoder->reference_codes),
                               device.type == tensor::DeviceType::kCuda ? kVoiceEncoderThreadsOnGpu : 1};
    const bool in_context = static_cast<bool>(voice.reference_codes);
    speech.embedder = std::make_shared<server::SpeakerEmbedder>(std::move(voice), fetch, server::ReferenceAudioLimits{},
                                                                static_cast<size_t>(cache), metrics);
    const std::filesystem::path voices_dir = flags.values["voices_dir"].is_string()
                                                 ? std::filesystem::path(flags.values["voices_dir"].get<std::string>())
                                                 : model_dir / "uploaded_voices";
    speech.uploaded_voices = std::make_shared<server::VoiceStore>(voices_dir);
    server::restore_uploaded_voices(*speech.uploaded_voices, *speech.embedder);
    spdlog::info(
        "serve: voice cloning on ({} Hz references, encoders on {}, in-context cloning {}, {} uploaded "
        "voice(s) in {})",
        encoder->sample_rate, tensor::device_name(device), in_context ? "on" : "off (no speech-tokenizer encoder)",
        speech.uploaded_voices->list().size(), voices_dir.string());
    return;
  }
}

int run_serve(ServeFlags flags) {
  if (flags.was_given("log_file")) {
    init_logging(spdlog::level::to_string_view(spdlog::get_level()).data(), flags.values["log_file"]);
  }
  auto check_supported = [&flags] {
    if (std::vector<std::string> unsupported = unsupported_flags(flags); !unsupported.empty()) {
      throw_error(ErrorCode::kUnsupported, "not supported yet: {}", fmt::join(unsupported, "; "));
    }
  };
  if (hub_model(flags.model)) {
    // A Hugging Face id: the configuration is checked on the configuration files alone (or the
    // bundled table of known ids) before any weights download, so that a deploy YAML or a
    // pipeline that cannot run yet fails in seconds. What describes the checkpoint may need more
    // files than that; only a pipeline that cannot be served stops here.
    ServeFlags probe = flags;
    use_hub_model(probe, hub::FileSet::kConfig);
    const runtime::ServableStages probe_servable = runtime::servable_stages(build_config(probe));
    check_supported();
    try {
      runtime::pipeline_spec_from_config(probe_servable.config);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kUnsupported) throw;
    }
  }
  use_hub_model(flags, hub::FileSet::kPipeline);
  const runtime::ServableStages servable = runtime::servable_stages(build_config(flags));
  const config::EffectiveConfig& config = servable.config;
  spdlog::info("serve: model {} -> pipeline {} ({}), platform {}, {} stage(s), async_chunk {}", config.model,
               config.pipeline->model_type, config.pipeline_reason, config.platform, config.stages.size(),
               config.async_chunk);
  if (!servable.left_out.empty()) {
    std::vector<std::string> names, produced;
    for (const config::StagePipelineConfig* stage : servable.left_out) {
      names.push_back(
          fmt::format("{} ('{}', stage model '{}')", stage->stage_id, stage->model_stage, stage->stage_model));
    }
    for (const config::EffectiveStage& stage : config.stages) {
      if (stage.topology->final_output) produced.push_back(stage.topology->final_output_type);
    }
    spdlog::warn(
        "serve: stage(s) {} of pipeline {} have no stage model in omnistage yet; serving its first {} "
        "stage(s) alone, which produce {} (requests for other modalities are refused)",
        fmt::join(names, ", "), config.pipeline->model_type, config.stages.size(), fmt::join(produced, ", "));
  }

  check_supported();
  runtime::PipelineSpec pipeline = runtime::pipeline_spec_from_config(config);
  runtime::OrchestratorOptions orchestrator_options;
  orchestrator_options.stage_init_timeout = std::chrono::seconds(flags.values["stage_init_timeout"].get<int64_t>());
  orchestrator_options.init_timeout = std::chrono::seconds(flags.values["init_timeout"].get<int64_t>());
  orchestrator_options.shm_threshold_bytes = flags.values["shm_threshold_bytes"].get<uint64_t>();
  orchestrator_options.heartbeat_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(flags.values["omni_heartbeat_timeout"].get<double>() * 1000.0));

  apply_pool_flags(flags, orchestrator_options);
  // --stage-id: one stage of a distributed launch, the head or (--headless) a worker (cli/distributed_serve.h).
  if (const std::optional<DistributedRole> role = distributed_role(flags)) {
    Json fingerprint;
    pipeline = stage_local_pipeline(flags, pipeline, *role, fingerprint);
    if (role->headless) return run_headless_worker(flags, pipeline, fingerprint, *role, orchestrator_options);
    configure_distributed_head(flags, *role, std::move(fingerprint), orchestrator_options);
  }

  // --api-server-count N > 1: this process launches the stages and N frontends (cli/api_frontends.h),
  // and each frontend runs the rest of this function attached to them.
  const int api_server_count = static_cast<int>(flags.values["api_server_count"].get<int64_t>());
  const std::optional<ApiFrontendRole> frontend = api_frontend_role();
  if (api_server_count > 1) check_api_frontends_config(config);
  if (api_server_count > 1 && !frontend) {
    return run_api_frontend_launcher(flags, pipeline, orchestrator_options, api_server_count);
  }

  const std::filesystem::path model_dir(config.model);
  // A pipeline of diffusion stages takes its prompt as text, tokenized by the stage: the server has
  // no tokenizer or chat template of its own then (chat and completion routes answer that).
  const bool tokenizes = flags.was_given("tokenizer") ||
                         std::any_of(config.pipeline->stages.begin(), config.pipeline->stages.end(), [](const auto& s) {
                           return s.execution_type != config::ExecutionType::kDiffusion;
                         });
  std::unique_ptr<server::TokenizerRenderer> renderer = tokenizes ? load_renderer(model_dir, flags) : nullptr;

  raise_open_file_limit(flags.values["max_connections"].get<size_t>());
  // Before any thread starts, so that SIGINT/SIGTERM reach only this thread's wait below.
  runtime::TerminationSignals signals;
  MetricsRegistry metrics;
  orchestrator_options.metrics = &metrics;
  if (frontend) orchestrator_options.attach = frontend->attach;
  runtime::Orchestrator orchestrator(pipeline, orchestrator_options);

  server::ApiServerOptions options = api_server_options(flags, servable, pipeline.model_facts);
  add_voice_cloning(flags, config, metrics, options.speech);
  std::unique_ptr<server::FrontendMetrics> frontend_metrics;
  if (frontend) {
    options.port = frontend->port;
    options.reuse_port = true;
    options.api_server_count = frontend->attach.count;
    options.frontend_index = frontend->attach.index;
    frontend_metrics = std::make_unique<server::FrontendMetrics>(metrics, frontend->attach.session,
                                                                 frontend->attach.index, frontend->attach.count);
    options.render_metrics = [m = frontend_metrics.get()] { return m->render(); };
  }
  if (renderer) renderer->set_readable_media(server::readable_media(options.media));
  server::ApiServer api(std::move(options), orchestrator, renderer.get(), metrics);
  try {
    api.start();
    if (frontend_metrics) frontend_metrics->start();
  } catch (...) {
    orchestrator.shutdown();
    throw;
  }
  if (frontend) {
    spdlog::info("serve: API frontend {} of {} serving (pid {})", frontend->attach.index, frontend->attach.count,
                 getpid());
  } else {
    spdlog::info("serve: session {}, shared-memory segments /dev/shm/omnistage_{}_*", orchestrator.session(),
                 orchestrator.session());
    spdlog::info("serve: {} ready on http://{}:{} (Ctrl-C stops it)", config.model,
                 flags.values["host"].is_null() ? std::string("0.0.0.0") : flags.values["host"].get<std::string>(),
                 api.port());
    if (!flags.was_given("enable_playground")) spdlog::info("serve: the playground page is at /");
  }
  const int signal = signals.wait();
  spdlog::info("serve: {} received, shutting down", strsignal(signal));
  api.stop();
  orchestrator.shutdown();
  return 0;
}

}  // namespace

Command serve_command() {
  return {"serve", "Serve a model behind the OpenAI-compatible API (same flags as vLLM-Omni's serve)",
          [](CLI::App& sub) -> std::function<int()> {
            auto parser = std::make_shared<ServeFlagParser>(sub);
            return [parser] { return run_serve(parser->collect()); };
          },
          rewrite_serve_args};
}

}  // namespace omni::cli
