// splitmix64 (Steele, Lea and Flood, 2014): a 64-bit mixer and the generator built on it. The mixer
// is a bijection with full avalanche (every input bit flips about half the output bits), which
// makes it a good hash finaliser for nearby inputs; the generator is fast and gives the same
// stream on every platform for a given seed. Neither is cryptographic. Pure and thread-safe.
#pragma once

#include <cstdint>

namespace omni {

// The generator's increment: 2^64 divided by the golden ratio, an odd constant whose multiples
// are spread evenly over the 64-bit range.
inline constexpr uint64_t kSplitmix64Increment = 0x9e3779b97f4a7c15ull;

// splitmix64's output function, applied to any 64-bit value.
constexpr uint64_t splitmix64_mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The generator: each next() advances the state by kSplitmix64Increment and mixes it.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t seed) : state_(seed) {}
  constexpr uint64_t next() { return splitmix64_mix(state_ += kSplitmix64Increment); }

 private:
  uint64_t state_;
};

}  // namespace omni
