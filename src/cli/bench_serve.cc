#include "cli/bench_serve.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "base/error.h"
#include "base/json.h"
#include "cli/bench/dataset.h"
#include "cli/bench/latency.h"
#include "cli/bench/load_runner.h"
#include "cli/bench/report.h"
#include "cli/bench/server_metrics.h"
#include "cli/bench/throughput.h"
#include "text/tokenizer/tokenizer.h"

namespace omni::cli {
namespace {

struct BenchServeFlags {
  std::string base_url;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string endpoint = "/v1/completions";
  std::string model;
  std::string api_key;
  std::string dataset_name;
  std::string dataset_path;
  int num_prompts = 1000;
  std::optional<int> max_concurrency;
  double request_rate = std::numeric_limits<double>::infinity();
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::optional<int> random_input_len;
  int random_output_len = 128;
  double random_range_ratio = 0.0;
  int random_vocab_size = 32000;
  std::string prompt_format;
  int custom_output_len = 256;
  std::string result_file;
  std::string metric_percentiles = "99";
  std::string extra_request_body;
  double request_timeout = 600;
  std::string voice;
  std::vector<std::string> ref_audio;
  std::vector<std::string> ref_text;
  std::string speech_stream_format = "audio";
  std::vector<std::string> modalities;
  std::string audio_format;
  int pcm_sample_rate = 24000;
};

// Words of a random speech input when --random-input-len is not given: a sentence, not a page.
constexpr int kDefaultSpeechInputWords = 16;
constexpr int kDefaultInputLen = 1024;

// http://host[:port][/prefix] -> target.
bench::Target parse_base_url(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) {
    throw_error(ErrorCode::kInvalidArgument, "--base-url {}: only http:// URLs are supported", url);
  }
  std::string rest = url.substr(kScheme.size());
  bench::Target target;
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) target.path_prefix = rest.substr(slash);
  while (!target.path_prefix.empty() && target.path_prefix.back() == '/') target.path_prefix.pop_back();
  size_t colon = authority.rfind(':');
  target.host = authority.substr(0, colon);
  target.port = 80;
  if (colon != std::string::npos) {
    std::string port = authority.substr(colon + 1);
    char* end = nullptr;
    long value = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end || value < 1 || value > 65535) {
      throw_error(ErrorCode::kInvalidArgument, "--base-url {}: '{}' is not a port", url, port);
    }
    target.port = static_cast<uint16_t>(value);
  }
  if (target.host.empty()) throw_error(ErrorCode::kInvalidArgument, "--base-url {}: no host", url);
  return target;
}

// What a chat request asks of its audio output, after --extra-body: its modalities (empty: the
// server's default, which for an omni pipeline includes audio) and its audio format.
struct ChatOutput {
  std::vector<std::string> modalities;
  std::string audio_format = "wav";
};

ChatOutput chat_output(const BenchServeFlags& flags, const Json& extra_body) {
  ChatOutput out;
  out.modalities = flags.modalities;
  if (auto it = extra_body.find("modalities"); it != extra_body.end()) {
    if (!it->is_array()) throw_error(ErrorCode::kInvalidArgument, "--extra-body: 'modalities' must be a list");
    out.modalities.clear();
    for (const Json& m : *it) {
      if (!m.is_string())
        throw_error(ErrorCode::kInvalidArgument, "--extra-body: 'modalities' entries must be strings");
      out.modalities.push_back(m.get<std::string>());
    }
  }
  if (!flags.audio_format.empty()) out.audio_format = flags.audio_format;
  if (auto it = extra_body.find("audio"); it != extra_body.end() && it->is_object() && it->contains("format")) {
    out.audio_format = (*it)["format"].is_string() ? (*it)["format"].get<std::string>() : "";
  }
  if (out.audio_format == "pcm16") out.audio_format = "pcm";
  if (out.audio_format != "wav" && out.audio_format != "pcm") {
    throw_error(ErrorCode::kInvalidArgument,
                "audio format '{}': bench serve counts the seconds of chat audio in wav or pcm only (--audio-format)",
                out.audio_format);
  }
  return out;
}

bool has(const std::vector<std::string>& list, const char* value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

std::vector<double> parse_percentiles(const std::string& text) {
  std::vector<double> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    double value = std::strtod(item.c_str(), &end);
    if (item.empty() || *end || value <= 0 || value >= 100) {
      throw_error(ErrorCode::kInvalidArgument, "--metric-percentiles {}: '{}' is not a percentile in (0, 100)", text,
                  item);
    }
    out.push_back(value);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// The server's omnistage:* histograms (its own time per request), or nullopt when it has no
// /metrics: the benchmark does not depend on them.
std::optional<std::map<std::string, bench::HistogramTotals>> server_histograms(const bench::Target& target) {
  try {
    auto [status, body] = bench::http_get(target, "/metrics");
    if (status != 200) return std::nullopt;
    return bench::histogram_totals(body, "omnistage:");
  } catch (const Error&) {
    return std::nullopt;
  }
}

int run_bench_serve(const BenchServeFlags& flags) {
  bench::LoadOptions load;
  load.target = flags.base_url.empty() ? bench::Target{flags.host, static_cast<uint16_t>(flags.port), "", ""}
                                       : parse_base_url(flags.base_url);
  load.target.api_key = flags.api_key;
  if (load.target.api_key.empty()) {
    if (const char* key = std::getenv("OPENAI_API_KEY")) load.target.api_key = key;
  }
  const bool speech = flags.endpoint == "/v1/audio/speech";
  if (flags.endpoint != "/v1/completions" && flags.endpoint != "/v1/chat/completions" && !speech) {
    throw_error(ErrorCode::kInvalidArgument,
                "--endpoint {}: allowed values are /v1/completions, /v1/chat/completions, /v1/audio/speech",
                flags.endpoint);
  }
  if (speech && flags.prompt_format == "token-ids") {
    throw_error(ErrorCode::kInvalidArgument, "--prompt-format token-ids: /v1/audio/speech speaks text prompts");
  }
  const bool chat = flags.endpoint == "/v1/chat/completions";
  if (!speech && !chat && !flags.voice.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "--voice is for --endpoint /v1/audio/speech or /v1/chat/completions");
  }
  if (!chat && !flags.modalities.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "--modalities is for --endpoint /v1/chat/completions");
  }
  if (!chat && !flags.audio_format.empty()) {
    throw_error(ErrorCode::kInvalidArgument,
                "--audio-format is for --endpoint /v1/chat/completions (speech asks for wav)");
  }
  if (flags.pcm_sample_rate < 1) throw_error(ErrorCode::kInvalidArgument, "--pcm-sample-rate must be at least 1");
  if (!speech && !flags.ref_audio.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "--ref-audio is for --endpoint /v1/audio/speech");
  }
  if (flags.ref_audio.empty() && !flags.ref_text.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "--ref-text is the transcript of a --ref-audio; give --ref-audio too");
  }
  if (flags.ref_text.size() > 1 && flags.ref_text.size() != flags.ref_audio.size()) {
    throw_error(ErrorCode::kInvalidArgument,
                "{} --ref-text for {} --ref-audio: give one transcript for all, or one per --ref-audio",
                flags.ref_text.size(), flags.ref_audio.size());
  }
  if (!flags.ref_audio.empty() && !flags.voice.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "give either --voice or --ref-audio, not both");
  }
  if (flags.num_prompts < 1) throw_error(ErrorCode::kInvalidArgument, "--num-prompts must be at least 1");
  if (flags.max_concurrency && *flags.max_concurrency < 1) {
    throw_error(ErrorCode::kInvalidArgument, "--max-concurrency must be at least 1");
  }
  if (!(flags.request_rate > 0)) {
    throw_error(ErrorCode::kInvalidArgument, "--request-rate must be positive (or inf), got {}", flags.request_rate);
  }
  load.endpoint = flags.endpoint;
  if (speech) {
    load.stream = flags.speech_stream_format == "sse" ? bench::StreamKind::kSpeechSse : bench::StreamKind::kSpeechAudio;
  } else {
    load.stream = flags.endpoint == "/v1/chat/completions" ? bench::StreamKind::kChat : bench::StreamKind::kCompletions;
  }
  load.request_rate = flags.request_rate;
  load.max_concurrency = flags.max_concurrency;
  load.seed = flags.seed;
  load.request_timeout_s = flags.request_timeout;
  std::vector<double> percentiles = parse_percentiles(flags.metric_percentiles);
  std::string base_url = flags.base_url.empty() ? fmt::format("http://{}:{}", flags.host, flags.port) : flags.base_url;

  std::string model = flags.model;
  if (model.empty()) {
    auto [status, body] = bench::http_get(load.target, "/v1/models");
    Json models = Json::parse(body, nullptr, false);
    if (status != 200 || models.is_discarded() || !models.contains("data") || models["data"].empty()) {
      throw_error(ErrorCode::kUnavailable, "{}/v1/models answered {} {}; pass --model", base_url, status,
                  body.substr(0, 200));
    }
    model = models["data"][0].value("id", "");
  }

  std::string dataset =
      flags.dataset_name.empty() ? (flags.dataset_path.empty() ? "random" : "custom") : flags.dataset_name;
  std::vector<bench::DatasetEntry> entries;
  if (dataset == "random") {
    bench::RandomDatasetOptions random;
    random.input_len = flags.random_input_len.value_or(speech ? kDefaultSpeechInputWords : kDefaultInputLen);
    random.output_len = flags.random_output_len;
    random.range_ratio = flags.random_range_ratio;
    random.vocab_size = flags.random_vocab_size;
    const bool text_endpoint = load.stream != bench::StreamKind::kCompletions;
    std::string format = flags.prompt_format.empty() ? (text_endpoint ? "text" : "token-ids") : flags.prompt_format;
    random.format = format == "text" ? bench::PromptFormat::kText : bench::PromptFormat::kTokenIds;
    entries = bench::random_dataset(random, flags.num_prompts, flags.seed);
  } else if (dataset == "custom") {
    if (flags.dataset_path.empty())
      throw_error(ErrorCode::kInvalidArgument, "--dataset-name custom needs --dataset-path");
    entries = bench::jsonl_dataset(flags.dataset_path, flags.num_prompts, flags.custom_output_len);
  } else {
    throw_error(ErrorCode::kInvalidArgument, "--dataset-name {}: allowed values are random, custom", dataset);
  }

  bench::RequestShape shape;
  shape.model = model;
  shape.stream = load.stream;
  shape.ignore_eos = flags.ignore_eos;
  if (!chat) shape.voice = flags.voice;
  for (size_t i = 0; i < flags.ref_audio.size(); ++i) {
    const std::string text =
        flags.ref_text.empty() ? std::string() : flags.ref_text[flags.ref_text.size() == 1 ? 0 : i];
    shape.clones.push_back(bench::voice_clone_fields(flags.ref_audio[i], text));
  }
  if (!flags.extra_request_body.empty()) {
    shape.extra_body = parse_json(flags.extra_request_body, "--extra-request-body");
    if (!shape.extra_body.is_object()) {
      throw_error(ErrorCode::kInvalidArgument, "--extra-request-body must be a JSON object");
    }
  }
  ChatOutput chat_out;
  if (chat) {
    chat_out = chat_output(flags, shape.extra_body);
    shape.modalities = flags.modalities;
    if (!flags.voice.empty()) shape.chat_audio["voice"] = flags.voice;
    if (!flags.audio_format.empty()) shape.chat_audio["format"] = flags.audio_format;
    load.chat_audio_format = chat_out.audio_format;
    load.pcm_sample_rate = flags.pcm_sample_rate;
  }
  std::vector<bench::BenchRequest> requests;
  for (size_t i = 0; i < entries.size(); ++i) requests.push_back(bench::make_request(entries[i], shape, i));

  // One request first, as vllm bench serve does: a misconfigured run fails in a second with the
  // server's own error rather than after num_prompts failures.
  std::printf("Starting initial single prompt test run...\n");
  std::fflush(stdout);
  bench::LoadOptions probe = load;
  probe.request_rate = 0;
  bench::LoadResult initial = bench::run_load(probe, {requests.front()});
  if (!initial.outcomes.front().success) {
    throw_error(ErrorCode::kUnavailable, "the initial test request to {}{} failed: {}", base_url, flags.endpoint,
                initial.outcomes.front().error);
  }
  std::printf("Initial test run completed. Starting main benchmark run...\n");
  std::printf("Traffic request rate: %s\nMaximum request concurrency: %s\n",
              std::isinf(flags.request_rate) ? "inf" : fmt::format("{}", flags.request_rate).c_str(),
              flags.max_concurrency ? std::to_string(*flags.max_concurrency).c_str() : "None");
  std::fflush(stdout);

  auto before = server_histograms(load.target);
  bench::LoadResult result = bench::run_load(load, requests);
  auto after = server_histograms(load.target);
  // Audio metrics for speech and for chats that ask for audio or get it (an omni pipeline's
  // default); text metrics unless nothing but audio was asked for.
  const bool chat_audio = chat && (has(chat_out.modalities, "audio") ||
                                   std::any_of(result.outcomes.begin(), result.outcomes.end(),
                                               [](const bench::RequestOutcome& o) { return o.audio_chunks > 0; }));
  const bool audio_only = chat && !chat_out.modalities.empty() && !has(chat_out.modalities, "text");
  bench::ReportContext context{base_url,          flags.endpoint,         model,
                               flags.num_prompts, flags.request_rate,     flags.max_concurrency,
                               percentiles,       !speech && !audio_only, speech || chat_audio};
  Json report = bench::make_report(context, result);
  if (before && after) report["server_time"] = bench::histogram_deltas(*before, *after);
  std::fputs(bench::format_report(report, percentiles).c_str(), stdout);
  for (const bench::RequestOutcome& outcome : result.outcomes) {
    if (!outcome.success) {
      std::fprintf(stderr, "first failed request: %s\n", outcome.error.c_str());
      break;
    }
  }
  if (!flags.result_file.empty()) {
    std::ofstream out(flags.result_file);
    if (!out) throw_error(ErrorCode::kInvalidArgument, "--result-file {}: cannot write the file", flags.result_file);
    out << report.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  return 0;
}

}  // namespace

Command bench_command() {
  return {"bench", "Benchmark a running server (bench serve) or the engine in-process (bench latency, throughput)",
          [](CLI::App& bench) -> std::function<int()> {
            bench.require_subcommand(1);
            auto flags = std::make_shared<BenchServeFlags>();
            CLI::App* serve = bench.add_subcommand(
                "serve",
                "Load an OpenAI-compatible server with streaming requests and report throughput and latency "
                "(the counterpart of `vllm bench serve`)");
            serve->add_option("--base-url", flags->base_url,
                              "Server URL, e.g. http://127.0.0.1:8000 (overrides --host/--port)");
            serve->add_option("--host", flags->host, "Server host")->capture_default_str();
            serve->add_option("--port", flags->port, "Server port")->capture_default_str();
            serve
                ->add_option("--endpoint", flags->endpoint,
                             "/v1/completions, /v1/chat/completions or /v1/audio/speech (text to speech: TTFP, "
                             "RTF, audio seconds per second)")
                ->capture_default_str();
            serve->add_option("--model", flags->model, "Model name to request (default: the server's first model)");
            serve->add_option("--api-key", flags->api_key, "API key (default: $OPENAI_API_KEY)");
            serve->add_option("--dataset-name", flags->dataset_name,
                              "random or custom (JSONL; default when --dataset-path is given)");
            serve->add_option("--dataset-path", flags->dataset_path,
                              "JSONL file: one {\"prompt\": text | [token ids]} or {\"messages\": [...]} per line, "
                              "optional \"output_len\"");
            serve->add_option("--num-prompts", flags->num_prompts, "Number of requests")->capture_default_str();
            serve->add_option("--max-concurrency", flags->max_concurrency,
                              "Most requests in flight at once (default: no limit)");
            serve->add_option("--request-rate", flags->request_rate,
                              "Requests per second, Poisson arrivals (default inf: all at once)");
            serve->add_option("--seed", flags->seed, "Seed for prompts and arrival times")->capture_default_str();
            serve->add_flag(
                "--ignore-eos", flags->ignore_eos,
                "Ask the server to ignore EOS (exact output lengths; speech: exactly max_new_tokens frames)");
            serve->add_option("--random-input-len", flags->random_input_len,
                              "Prompt length (tokens, or words for text; default 1024, speech 16 words)");
            serve
                ->add_option("--random-output-len", flags->random_output_len,
                             "max_tokens per request (speech: max_new_tokens, codec frames)")
                ->capture_default_str();
            serve
                ->add_option("--random-range-ratio", flags->random_range_ratio,
                             "Lengths vary uniformly within this ratio around the given lengths")
                ->capture_default_str();
            serve->add_option("--random-vocab-size", flags->random_vocab_size, "Token ids are drawn from [0, this)")
                ->capture_default_str();
            serve
                ->add_option("--prompt-format", flags->prompt_format,
                             "token-ids or text (default: token-ids for completions, text for chat)")
                ->check(CLI::IsMember({"token-ids", "text"}));
            serve
                ->add_option("--custom-output-len", flags->custom_output_len,
                             "max_tokens for JSONL lines without output_len")
                ->capture_default_str();
            serve->add_option("--result-file", flags->result_file, "Write the results as JSON to this file");
            serve
                ->add_option("--metric-percentiles", flags->metric_percentiles,
                             "Comma-separated percentiles to report, e.g. 50,90,99")
                ->capture_default_str();
            serve->add_option("--extra-body,--extra-request-body", flags->extra_request_body,
                              "JSON object merged into every request body (its top-level keys replace the "
                              "generated ones), e.g. a chat's per-stage '{\"sampling_params_list\": [{}, "
                              "{\"max_tokens\": 200}, {}]}'");
            serve->add_option("--request-timeout", flags->request_timeout, "Seconds a read or write may take")
                ->capture_default_str();
            serve->add_option("--voice", flags->voice,
                              "Speech, or chat with audio output (audio.voice): the voice of every request "
                              "(default: the server's)");
            serve
                ->add_option("--modalities", flags->modalities,
                             "Chat: the output modalities to ask for, comma-separated: text, audio or text,audio "
                             "(default: the field is not sent; an omni pipeline then answers with all it has)")
                ->delimiter(',')
                ->check(CLI::IsMember({"text", "audio"}));
            serve
                ->add_option("--audio-format", flags->audio_format,
                             "Chat with audio output: audio.format, wav or pcm (default: not sent, the server's wav)")
                ->check(CLI::IsMember({"wav", "pcm", "pcm16"}));
            serve
                ->add_option("--pcm-sample-rate", flags->pcm_sample_rate,
                             "Chat with --audio-format pcm: the rate its headerless samples are counted at")
                ->capture_default_str();
            serve
                ->add_option("--ref-audio", flags->ref_audio,
                             "Speech: clone the voice of this audio file (task_type Base, sent inline); repeat "
                             "for several voices, request i taking the i-th modulo their number")
                ->allow_extra_args(false);
            serve
                ->add_option("--ref-text", flags->ref_text,
                             "Speech: the transcript of --ref-audio, for in-context cloning (one for all, or one "
                             "per --ref-audio); without it the clones are x_vector_only_mode")
                ->allow_extra_args(false);
            serve
                ->add_option("--speech-stream-format", flags->speech_stream_format,
                             "Speech: audio (a chunked WAV body) or sse (speech.audio.delta events)")
                ->check(CLI::IsMember({"audio", "sse"}))
                ->capture_default_str();
            CLI::App* latency = nullptr;
            CLI::App* throughput = nullptr;
            std::function<int()> run_latency = bench::add_latency_command(
                bench, &latency, [](const std::string& model, const std::string& messages, const std::string& kwargs) {
                  const std::unique_ptr<text::Tokenizer> tokenizer = load_model_tokenizer(model);
                  return render_chat_messages(messages, kwargs, model, model, tokenizer.get());
                });
            std::function<int()> run_throughput = bench::add_throughput_command(bench, &throughput);
            return [flags, serve, latency, throughput, run_latency, run_throughput] {
              if (latency->parsed()) return run_latency();
              if (throughput->parsed()) return run_throughput();
              if (!serve->parsed()) {
                throw_error(ErrorCode::kInvalidArgument, "bench: choose a benchmark (serve, latency, throughput)");
              }
              return run_bench_serve(*flags);
            };
          },
          nullptr};
}

}  // namespace omni::cli
