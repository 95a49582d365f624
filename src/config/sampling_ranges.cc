#include "config/sampling_ranges.h"

#include <cmath>

namespace omni::config {

bool SamplingRange::contains(double value) const {
  if (!std::isfinite(value)) return false;
  return (min_inclusive ? value >= min : value > min) && value <= max;
}

}  // namespace omni::config
