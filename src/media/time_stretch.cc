#include "media/time_stretch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "base/error.h"

namespace omni::media {

namespace {

// Segment length, hop between output segments, and how far a segment may move to match.
constexpr double kWindowSeconds = 0.040;
constexpr double kToleranceSeconds = 0.010;

}  // namespace

std::vector<float> time_stretch(std::span<const float> samples, double speed, int sample_rate) {
  if (!std::isfinite(speed) || speed < kMinSpeed || speed > kMaxSpeed) {
    throw_error(ErrorCode::kInvalidArgument, "speed must be in [{}, {}], got {}", kMinSpeed, kMaxSpeed, speed);
  }
  if (sample_rate <= 0) throw_error(ErrorCode::kInvalidArgument, "sample rate must be positive, got {}", sample_rate);
  if (speed == 1.0 || samples.empty()) return {samples.begin(), samples.end()};

  const int64_t hop = std::max<int64_t>(1, std::lround(sample_rate * kWindowSeconds / 2));
  const int64_t window = 2 * hop;
  const int64_t tolerance = std::lround(sample_rate * kToleranceSeconds);
  const auto input_size = static_cast<int64_t>(samples.size());
  const auto output_size = static_cast<int64_t>(std::llround(static_cast<double>(input_size) / speed));

  // Output and input both start half a window late, so the first segment is centred on sample 0
  // and every kept output sample lies under two segments, whose periodic Hann windows sum to 1.
  const int64_t frames = (hop + output_size) / hop + 2;
  const int64_t last_start = std::llround(static_cast<double>((frames - 1) * hop) * speed) + tolerance;
  std::vector<float> input(std::max(hop + input_size, last_start + window) + 1, 0.0f);
  std::copy(samples.begin(), samples.end(), input.begin() + hop);
  // Prefix sums of squares give each candidate's energy in O(1).
  std::vector<double> energy(input.size() + 1, 0.0);
  for (size_t i = 0; i < input.size(); ++i) energy[i + 1] = energy[i] + double(input[i]) * input[i];

  std::vector<float> hann(window);
  for (int64_t n = 0; n < window; ++n) {
    hann[n] = static_cast<float>(
        0.5 - 0.5 * std::cos(2 * std::numbers::pi * static_cast<double>(n) / static_cast<double>(window)));
  }
  std::vector<double> output(frames * hop + window, 0.0), weight(frames * hop + window, 0.0);
  const auto max_start = static_cast<int64_t>(input.size()) - window;
  int64_t previous = 0;
  for (int64_t k = 0; k < frames; ++k) {
    const int64_t nominal = std::llround(static_cast<double>(k * hop) * speed);
    int64_t start = 0;
    if (k > 0) {
      // The candidate whose first half best continues the previous segment's input; nearer offsets
      // win ties, so a periodic signal keeps the tempo's own position.
      const float* natural = input.data() + previous + hop;
      double best = -std::numeric_limits<double>::infinity();
      start = std::clamp<int64_t>(nominal, 0, max_start);
      for (int64_t step = 0; step <= 2 * tolerance; ++step) {
        const int64_t delta = step % 2 == 0 ? step / 2 : -(step + 1) / 2;
        const int64_t candidate = nominal + delta;
        if (candidate < 0 || candidate > max_start) continue;
        const float* segment = input.data() + candidate;
        double dot = 0.0;
        for (int64_t n = 0; n < hop; ++n) dot += double(natural[n]) * segment[n];
        const double score = dot / std::sqrt(energy[candidate + hop] - energy[candidate] + 1e-12);
        if (score > best) {
          best = score;
          start = candidate;
        }
      }
    }
    const float* segment = input.data() + start;
    for (int64_t n = 0; n < window; ++n) {
      output[k * hop + n] += double(hann[n]) * segment[n];
      weight[k * hop + n] += hann[n];
    }
    previous = start;
  }

  std::vector<float> stretched(output_size);
  for (int64_t i = 0; i < output_size; ++i) {
    const double w = weight[hop + i];
    stretched[i] = w > 1e-6 ? static_cast<float>(output[hop + i] / w) : 0.0f;
  }
  return stretched;
}

}  // namespace omni::media
