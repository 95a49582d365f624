// libFuzzer target for the WAV reader of `bench serve`'s speech meter (cli/bench/wav_stream_meter):
// the input is a response body, fed in pieces whose sizes the first byte picks. What must hold:
// a header that is not PCM WAV sets error() and nothing crashes; the samples counted never exceed
// the bytes fed, and the seconds are finite and not negative.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "cli/bench/wav_stream_meter.h"
#include "fuzz_guard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  omni::fuzz::expect_only_omni_errors("wav_stream_fuzzer", [&] {
    if (size == 0) return;
    const size_t piece = 1 + data[0] % 64;
    omni::cli::bench::WavStreamMeter meter;
    size_t counted = 0;
    for (size_t at = 1; at < size; at += piece) {
      counted += meter.feed(std::string_view(reinterpret_cast<const char*>(data + at), std::min(piece, size - at)));
    }
    omni::fuzz::require(counted <= size, "wav_stream_fuzzer", "more sample bytes counted than fed");
    omni::fuzz::require(static_cast<int64_t>(counted) == meter.sample_bytes(), "wav_stream_fuzzer",
                        "feed()'s counts do not add up to sample_bytes()");
    const double seconds = meter.seconds();
    omni::fuzz::require(std::isfinite(seconds) && seconds >= 0, "wav_stream_fuzzer", "seconds not finite");
  });
  return 0;
}
