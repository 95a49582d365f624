#include "cli/bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

namespace omni::cli::bench {
namespace {

std::string percentile_name(double pct) {
  // 99 -> "p99", 99.9 -> "p99.9"
  return fmt::format("p{}", pct);
}

// mean_/median_/std_/pNN_{metric}{suffix} of `values` times `scale`.
void add_stats(Json& report, const std::string& metric, const std::vector<double>& values,
               const std::vector<double>& percentiles, double scale, const std::string& suffix) {
  std::vector<double> ms;
  for (double v : values) ms.push_back(v * scale);
  double mean = 0;
  for (double v : ms) mean += v;
  mean = ms.empty() ? 0 : mean / ms.size();
  double var = 0;
  for (double v : ms) var += (v - mean) * (v - mean);
  double stddev = ms.empty() ? 0 : std::sqrt(var / ms.size());
  report["mean_" + metric + suffix] = mean;
  report["median_" + metric + suffix] = percentile(ms, 50);
  report["std_" + metric + suffix] = stddev;
  for (double pct : percentiles) report[percentile_name(pct) + "_" + metric + suffix] = percentile(ms, pct);
}

void add_stats(Json& report, const std::string& metric, const std::vector<double>& seconds,
               const std::vector<double>& percentiles) {
  add_stats(report, metric, seconds, percentiles, 1000.0, "_ms");
}

// The audio side of a speech run (see make_report).
void add_speech_metrics(Json& report, const LoadResult& result, const std::vector<double>& percentiles) {
  std::vector<double> ttfps, rtfs;
  Json durations = Json::array(), ttfp_list = Json::array(), rtf_list = Json::array();
  double total_audio = 0;
  for (const RequestOutcome& outcome : result.outcomes) {
    const bool ok = outcome.success && outcome.audio_s > 0;
    durations.push_back(outcome.success ? outcome.audio_s : 0.0);
    ttfp_list.push_back(ok ? outcome.ttfp_s : 0.0);
    rtf_list.push_back(ok ? outcome.latency_s / outcome.audio_s : 0.0);
    if (!ok) continue;
    total_audio += outcome.audio_s;
    ttfps.push_back(outcome.ttfp_s);
    rtfs.push_back(outcome.latency_s / outcome.audio_s);
  }
  report["total_audio_duration_s"] = total_audio;
  report["audio_throughput"] = total_audio / (result.duration_s > 0 ? result.duration_s : 1e-9);
  add_stats(report, "ttfp", ttfps, percentiles);
  add_stats(report, "rtf", rtfs, percentiles, 1.0, "");
  report["audio_durations"] = std::move(durations);
  report["ttfps"] = std::move(ttfp_list);
  report["rtfs"] = std::move(rtf_list);
}

}  // namespace

double percentile(std::vector<double> values, double pct) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  double rank = pct / 100.0 * (values.size() - 1);
  size_t low = static_cast<size_t>(std::floor(rank));
  size_t high = std::min(values.size() - 1, low + 1);
  return values[low] + (values[high] - values[low]) * (rank - low);
}

Json make_report(const ReportContext& context, const LoadResult& result) {
  std::vector<double> ttfts, tpots, itls, latencies;
  Json input_lens = Json::array(), output_lens = Json::array(), ttft_list = Json::array(), itl_lists = Json::array(),
       texts = Json::array(), errors = Json::array();
  int completed = 0;
  int64_t total_input = 0, total_output = 0;
  for (const RequestOutcome& outcome : result.outcomes) {
    input_lens.push_back(outcome.prompt_len);
    output_lens.push_back(outcome.success ? outcome.output_tokens : 0);
    ttft_list.push_back(outcome.success ? outcome.ttft_s : 0.0);
    itl_lists.push_back(outcome.itl_s);
    texts.push_back(outcome.generated_text);
    errors.push_back(outcome.error);
    if (!outcome.success) continue;
    ++completed;
    total_input += outcome.prompt_len;
    total_output += outcome.output_tokens;
    ttfts.push_back(outcome.ttft_s);
    latencies.push_back(outcome.latency_s);
    // With audio after it, the text's own end (see make_report).
    const double text_end = outcome.audio_chunks > 0 && outcome.text_end_s > 0 ? outcome.text_end_s : outcome.latency_s;
    if (outcome.output_tokens > 1) tpots.push_back((text_end - outcome.ttft_s) / (outcome.output_tokens - 1));
    itls.insert(itls.end(), outcome.itl_s.begin(), outcome.itl_s.end());
  }
  double duration = result.duration_s > 0 ? result.duration_s : 1e-9;
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", std::localtime(&now));
  bool infinite_rate = !(context.request_rate > 0) || std::isinf(context.request_rate);

  Json report = {{"date", date},
                 {"backend", "openai"},
                 {"base_url", context.base_url},
                 {"endpoint", context.endpoint},
                 {"model_id", context.model},
                 {"num_prompts", context.num_prompts},
                 {"request_rate", infinite_rate ? Json("inf") : Json(context.request_rate)},
                 {"max_concurrency", context.max_concurrency ? Json(*context.max_concurrency) : Json(nullptr)},
                 {"max_concurrent_requests", result.max_concurrent},
                 {"duration", result.duration_s},
                 {"completed", completed},
                 {"failed", static_cast<int>(result.outcomes.size()) - completed},
                 {"total_input_tokens", total_input},
                 {"total_output_tokens", total_output},
                 {"request_throughput", completed / duration},
                 {"output_throughput", total_output / duration},
                 {"total_token_throughput", (total_input + total_output) / duration}};
  if (context.text_metrics) {
    add_stats(report, "ttft", ttfts, context.percentiles);
    add_stats(report, "tpot", tpots, context.percentiles);
    add_stats(report, "itl", itls, context.percentiles);
  }
  if (context.audio_metrics) add_speech_metrics(report, result, context.percentiles);
  add_stats(report, "e2el", latencies, context.percentiles);
  report["input_lens"] = std::move(input_lens);
  report["output_lens"] = std::move(output_lens);
  report["ttfts"] = std::move(ttft_list);
  report["itls"] = std::move(itl_lists);
  report["generated_texts"] = std::move(texts);
  report["errors"] = std::move(errors);
  return report;
}

std::string format_report(const Json& r, const std::vector<double>& percentiles) {
  std::string out = fmt::format("{:=^50}\n", " Serving Benchmark Result ");
  auto line = [&](const std::string& label, const std::string& value) {
    out += fmt::format("{:<40}{:>10}\n", label, value);
  };
  auto num = [](double v) { return fmt::format("{:.2f}", v); };
  line("Successful requests:", std::to_string(r["completed"].get<int>()));
  line("Failed requests:", std::to_string(r["failed"].get<int>()));
  if (!r["max_concurrency"].is_null())
    line("Maximum request concurrency:", std::to_string(r["max_concurrency"].get<int>()));
  line("Benchmark duration (s):", num(r["duration"]));
  const bool audio = r.contains("audio_throughput");
  const bool text = r.contains("mean_ttft_ms");
  line("Total input tokens:", std::to_string(r["total_input_tokens"].get<int64_t>()));
  if (text) line("Total generated tokens:", std::to_string(r["total_output_tokens"].get<int64_t>()));
  if (audio) line("Total audio duration (s):", num(r["total_audio_duration_s"]));
  line("Request throughput (req/s):", num(r["request_throughput"]));
  if (text) {
    line("Output token throughput (tok/s):", num(r["output_throughput"]));
    line("Total token throughput (tok/s):", num(r["total_token_throughput"]));
  }
  if (audio) line("Audio throughput (audio-s/s):", num(r["audio_throughput"]));
  struct Section {
    const char* key;
    const char* title;
    const char* label;
    const char* unit;  // the key's suffix and the label's unit
  };
  std::vector<Section> sections;
  if (text) {
    sections = {Section{"ttft", "Time to First Token", "TTFT", "ms"},
                Section{"tpot", "Time per Output Token (excl. 1st token)", "TPOT", "ms"},
                Section{"itl", "Inter-token Latency", "ITL", "ms"}};
  }
  if (audio) {
    sections.push_back(Section{"ttfp", "Time to First Audio Packet", "TTFP", "ms"});
    sections.push_back(Section{"rtf", "Real-time Factor (E2E / audio duration)", "RTF", ""});
  }
  sections.push_back(Section{"e2el", "End-to-end Latency", "E2EL", "ms"});
  for (const Section& s : sections) {
    const std::string unit = *s.unit ? fmt::format(" ({})", s.unit) : "";
    const std::string suffix = *s.unit ? fmt::format("_{}", s.unit) : "";
    // A real-time factor is a small ratio: three decimals.
    auto value = [&](const std::string& stat) {
      const double v = r[fmt::format("{}_{}{}", stat, s.key, suffix)];
      return *s.unit ? num(v) : fmt::format("{:.3f}", v);
    };
    out += fmt::format("{:-^50}\n", std::string(" ") + s.title + " ");
    line(fmt::format("Mean {}{}:", s.label, unit), value("mean"));
    line(fmt::format("Median {}{}:", s.label, unit), value("median"));
    for (double pct : percentiles) line(fmt::format("P{} {}{}:", pct, s.label, unit), value(fmt::format("p{}", pct)));
  }
  if (r.contains("server_time") && !r["server_time"].empty()) {
    out += fmt::format("{:-^50}\n", " Server time per request (/metrics) ");
    for (const auto& [series, stats] : r["server_time"].items()) {
      out += fmt::format("{}\n", series);
      line(fmt::format("  mean (ms) over {}:", stats["count"].get<double>()),
           fmt::format("{:.3f}", stats["mean_ms"].get<double>()));
    }
  }
  out += std::string(50, '=') + "\n";
  return out;
}

}  // namespace omni::cli::bench
