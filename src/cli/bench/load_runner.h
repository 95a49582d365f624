// The load generator of `omnistage bench serve`: sends prepared OpenAI requests to a server with
// streaming on, on one thread with many keep-alive connections (Asio), at a Poisson request
// rate and under a concurrency limit, and times every streamed chunk: text chunks of completions,
// packets of audio of /v1/audio/speech, and both of a chat with audio output (vLLM-Omni's chunks
// with modality "text" or "audio").
//
// Threads: run_load() blocks the calling thread, which it uses as the only I/O thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace omni::cli::bench {

struct BenchRequest {
  std::string body;    // the JSON request body, with "stream": true
  int prompt_len = 0;  // tokens when known; the server's usage.prompt_tokens wins
  int expected_output_len = 0;
};

// What an endpoint streams back, and so how a response is read and timed.
enum class StreamKind {
  kCompletions,  // SSE, choices[0].text
  kChat,         // SSE, choices[0].delta.content; chunks with modality "audio": base64 audio files
  kSpeechAudio,  // /v1/audio/speech stream_format "audio": a chunked WAV body
  kSpeechSse,    // /v1/audio/speech stream_format "sse": speech.audio.delta events of base64 WAV
};

struct RequestOutcome {
  bool success = false;
  std::string error;          // why it failed: HTTP status and body, connection error, error event
  double start_s = 0;         // send time, seconds after the benchmark started
  double ttft_s = 0;          // first chunk with output text (speech: with audio samples, the TTFP)
  double latency_s = 0;       // until the stream ended
  std::vector<double> itl_s;  // gaps between successive chunks with output text (speech: of audio)
  double text_end_s = 0;      // the last chunk with output text (0: none)
  double ttfp_s = 0;          // the first chunk with audio samples (speech, chat with audio; 0: none)
  double audio_s = 0;         // seconds of audio received (speech, chat with audio)
  int audio_chunks = 0;       // chunks with audio samples
  int prompt_len = 0;
  int output_tokens = 0;  // usage.completion_tokens, else the number of chunks with text
  std::string generated_text;
};

struct Target {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  std::string path_prefix;  // from --base-url, e.g. "" or "/proxy"
  std::string api_key;      // sent as Authorization: Bearer when not empty
};

struct LoadOptions {
  Target target;
  std::string endpoint = "/v1/completions";
  StreamKind stream = StreamKind::kCompletions;
  double request_rate = 0;  // requests per second; <= 0 or infinity: all at once
  std::optional<int> max_concurrency;
  uint64_t seed = 0;
  double request_timeout_s = 600;  // per read or write
  // kChat: the format of the audio pieces (the request's audio.format): "wav" (each piece a WAV
  // file with its header) or "pcm" (16-bit mono samples at pcm_sample_rate).
  std::string chat_audio_format = "wav";
  int pcm_sample_rate = 24000;
};

struct LoadResult {
  std::vector<RequestOutcome> outcomes;  // in request order
  double duration_s = 0;
  int max_concurrent = 0;  // requests in flight at the same time, at most
};

LoadResult run_load(const LoadOptions& options, const std::vector<BenchRequest>& requests);

// GET `path` on the target; the status and body. Throws omni::Error(kUnavailable) naming the
// address when the server cannot be reached.
std::pair<int, std::string> http_get(const Target& target, const std::string& path, double timeout_s = 30);

}  // namespace omni::cli::bench
