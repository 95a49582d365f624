// Reading a JSON value as a C++ type without nlohmann's silent conversions: a config field that
// is a fraction, or a number outside the type's range, is a wrong type rather than a truncated
// (or, from a float, undefined) integer.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "base/json.h"

namespace omni {

// j.get<T>(); for an integral T (not bool), a number T cannot hold exactly throws the
// Json::type_error a value of the wrong type throws.
template <typename T, typename J>
T get_exact(const J& j) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using Limits = std::numeric_limits<T>;
    bool fits = true;
    if (j.is_number_float()) {
      const double d = j.template get<double>();
      fits = std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(Limits::min()) &&
             d <= static_cast<double>(Limits::max());
    } else if (j.is_number_unsigned()) {
      fits = j.template get<uint64_t>() <= static_cast<uint64_t>(Limits::max());
    } else if (j.is_number_integer()) {
      const int64_t v = j.template get<int64_t>();
      fits = (std::is_signed_v<T> || v >= 0) && v >= static_cast<int64_t>(Limits::min()) &&
             static_cast<uint64_t>(std::max<int64_t>(v, 0)) <= static_cast<uint64_t>(Limits::max());
    }
    if (!fits) throw J::type_error::create(302, "number does not fit the integer type", &j);
  }
  return j.template get<T>();
}

}  // namespace omni
