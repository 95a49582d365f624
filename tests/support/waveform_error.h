// How far a decoded waveform is from its reference: the largest absolute difference, where it
// is, and the reference's peak, for tests that bound the error relative to the peak.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

namespace omni::testing {

struct WaveformError {
  double worst = 0.0;  // max |got - want|
  int64_t at = 0;      // its sample
  double peak = 0.0;   // max |want|
};

inline WaveformError waveform_error(std::span<const float> got, std::span<const float> want) {
  WaveformError e;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    e.peak = std::max(e.peak, std::abs(double{want[i]}));
    const double error = std::abs(double{got[i]} - want[i]);
    if (error > e.worst) e.worst = error, e.at = static_cast<int64_t>(i);
  }
  return e;
}

}  // namespace omni::testing
