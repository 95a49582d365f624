// The results of `omnistage bench serve`, under the names `vllm bench serve` uses in its result
// JSON (completed, request_throughput, mean_ttft_ms, p99_itl_ms…), so that tooling reads both.
#pragma once

#include <string>
#include <vector>

#include "base/json.h"
#include "cli/bench/load_runner.h"

namespace omni::cli::bench {

// Linear interpolation between closest ranks, as numpy.percentile; 0 for no values.
double percentile(std::vector<double> values, double pct);

struct ReportContext {
  std::string base_url;
  std::string endpoint;
  std::string model;
  int num_prompts = 0;
  double request_rate = 0;  // <= 0 or infinity: "inf"
  std::optional<int> max_concurrency;
  std::vector<double> percentiles = {99};  // --metric-percentiles
  bool text_metrics = true;                // TTFT, TPOT, ITL (not for /v1/audio/speech or audio-only chats)
  bool audio_metrics = false;              // TTFP, RTF, audio seconds (speech, chats with audio output)
};

// Summary numbers plus the per-request arrays (input_lens, output_lens, ttfts, itls, errors…).
// TPOT per request is (latency - ttft) / (output_tokens - 1), over requests with more than one
// output token; ITL pools every gap of every request. Times are in milliseconds.
// Audio (context.audio_metrics: /v1/audio/speech, where they replace TTFT/TPOT/ITL, and chats with
// audio output, where they come beside them): the time to first audio packet (ttfp), the
// real-time factor per request (rtf = E2E latency / seconds of audio received, over requests with
// audio), total_audio_duration_s, audio_throughput (audio seconds per wall-clock second of the
// run) and the per-request arrays audio_durations, ttfps and rtfs. In a chat with audio the text
// ends before the audio does, so TPOT there runs from the first to the last text chunk
// (RequestOutcome::text_end_s) rather than to the end of the stream; the per-request
// "ttfts" are the first text chunk's.
Json make_report(const ReportContext& context, const LoadResult& result);

// The human-readable table printed after a run; with the server's own times when the report has
// "server_time" (bench serve adds it from the server's /metrics).
std::string format_report(const Json& report, const std::vector<double>& percentiles);

}  // namespace omni::cli::bench
