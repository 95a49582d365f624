// Parsing a request body that carries base64 media (a voice-clone reference, a chat's inline
// audio): nlohmann's own parse against base/json_long_strings.h's, on the same text, in the same
// run. Google Benchmark; the body holds a string of the given size (650 KB: a 10 s WAV at 24 kHz).
//
//   build/bench/json_body_bench --benchmark_filter=Body
#include <benchmark/benchmark.h>

#include <string>

#include "base/json_long_strings.h"

namespace {

std::string body_with_media(int64_t bytes) {
  std::string b64(static_cast<size_t>(bytes), 'A');
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < b64.size(); ++i) b64[i] = kAlphabet[i * 7919 % 64];
  return R"({"input": "Hello there, how are you?", "task_type": "Base", "ref_audio": "data:audio/wav;base64,)" + b64 +
         R"(", "ref_text": "The transcript of the reference."})";
}

void BodyNlohmann(benchmark::State& state) {
  const std::string body = body_with_media(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(omni::Json::parse(body));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(body.size()));
}

void BodyWithLongStringsLifted(benchmark::State& state) {
  const std::string body = body_with_media(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(omni::parse_json_with_long_strings(body));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(body.size()));
}

BENCHMARK(BodyNlohmann)->Arg(200000)->Arg(650000)->Unit(benchmark::kMillisecond);
BENCHMARK(BodyWithLongStringsLifted)->Arg(200000)->Arg(650000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
