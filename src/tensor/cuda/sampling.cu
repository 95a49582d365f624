// sample() on the GPU (ops.h): a penalty kernel over the distinct penalised tokens, then one block
// of 1024 threads per row. Temperature is monotone, so the top-k, top-p and min-p cut-offs are
// thresholds on the raw logits. Usually the tokens that decide them are few: one pass counts the
// tokens (and their probability mass) above a few probability floors, and when one floor holds
// the top-k set and the top-p nucleus in at most kCandidates tokens, those are gathered into shared
// memory and sorted, and both cut-offs are read off the sorted list. Otherwise (flat distributions)
// the cut-offs are found by bisection on the order-preserving integer image of the floats, one
// pass over the row per bit. The draw is an inverse-CDF walk in vocabulary order:
// each thread sums the kept weights of a contiguous chunk, a block scan places the Philox uniform
// (tensor/philox.h) in one chunk, and that thread walks it. Every reduction has a fixed shape, so a
// row's id depends only on its logits and its (seed, step), never on the batch around it.
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/cuda/common.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/packed_sampling_params.h"
#include "tensor/philox.h"

namespace omni::tensor::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kCandidates = 2048;  // shared-memory capacity of the sorted candidate list
// Probability floors tried for the candidate list, as ln(p_max / p): 1e-4, 1e-8, 1e-16, 1e-32.
constexpr int kFloors = 4;
__constant__ float kFloorLogRatios[kFloors] = {9.2103404f, 18.420681f, 36.841362f, 73.682724f};

// The packed layout (tensor/packed_sampling_params.h) is what both entries upload or read.
using RowParams = PackedSamplingParams;

template <typename T>
__global__ void penalty_kernel(T* logits, int64_t n, const PenalisedToken* tokens, int count, const RowParams* params) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const PenalisedToken t = tokens[i];
  const RowParams p = params[t.row];
  T* at = logits + t.row * n + t.token;
  float v = to_float(*at);
  if (p.repetition_penalty != 1.0f) v = v > 0.0f ? v / p.repetition_penalty : v * p.repetition_penalty;
  v -= p.frequency_penalty * static_cast<float>(t.output_count) + (t.output_count > 0 ? p.presence_penalty : 0.0f);
  *at = from_float<T>(v);
}

// Monotone: a < b as floats (NaN aside) iff order_key(a) < order_key(b).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Exclusive prefix sum of v over the block in thread order; `total` gets the sum of all.
__device__ float block_exclusive_scan(float v, float* scratch, float& total) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  float inclusive = v;
  for (int o = 1; o < 32; o <<= 1) {
    const float t = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += t;
  }
  float exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
  if (lane == 0) exclusive = 0.0f;
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? scratch[lane] : 0.0f;
    for (int o = 1; o < 32; o <<= 1) {
      const float t = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += t;
    }
    scratch[lane] = w;
  }
  __syncthreads();
  const float before = warp > 0 ? scratch[warp - 1] : 0.0f;
  total = scratch[warps - 1];
  __syncthreads();
  return before + exclusive;
}

struct Candidates {
  float value[kCandidates];
  int32_t index[kCandidates];
  int count;
  uint32_t threshold;
  uint32_t histogram[256];  // of one radix digit, for kth_largest_key
  uint32_t digit, rank;
};

// The order key of the k-th largest of the first `count` candidates (1 <= k <= count): a radix
// select, most significant byte first, each pass counting the keys that share the digits chosen
// so far into 256 bins; warp 0 then finds the bin that holds rank k from the top.
__device__ uint32_t kth_largest_key(Candidates& c, int count, int k) {
  uint32_t prefix = 0, mask = 0, rank = static_cast<uint32_t>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) c.histogram[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
      const uint32_t key = order_key(c.value[i]);
      if ((key & mask) == prefix) atomicAdd(&c.histogram[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l owns bins 255 - 8l down to 248 - 8l; a scan over the lanes counts from the top.
      const int lane = threadIdx.x;
      uint32_t bins[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += bins[j] = c.histogram[255 - 8 * lane - j];
      uint32_t inclusive = sum;
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t t = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += t;
      }
      const unsigned reached = __ballot_sync(0xffffffffu, inclusive >= rank);
      if (lane == __ffs(reached) - 1) {
        uint32_t above = inclusive - sum;
        for (int j = 0; j < 8; ++j) {
          if (above + bins[j] >= rank) {
            c.digit = static_cast<uint32_t>(255 - 8 * lane - j);
            c.rank = rank - above;
            break;
          }
          above += bins[j];
        }
      }
    }
    __syncthreads();
    prefix |= c.digit << shift;
    mask |= 255u << shift;
    rank = c.rank;
  }
  return prefix;
}

// Keeps only the candidates whose key is >= `floor` (their order is lost; the caller sorts).
__device__ int compact_candidates(Candidates& c, int count, uint32_t floor) {
  constexpr int kPerThread = kCandidates / kThreads;
  float values[kPerThread];
  int32_t indices[kPerThread];
  int mine = 0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i < count && order_key(c.value[i]) >= floor) {
      values[mine] = c.value[i];
      indices[mine] = c.index[i];
      ++mine;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) c.count = 0;
  __syncthreads();
  for (int j = 0; j < mine; ++j) {
    const int at = atomicAdd(&c.count, 1);
    c.value[at] = values[j];
    c.index[at] = indices[j];
  }
  __syncthreads();
  return c.count;
}

// Gathers the logits whose key is >= floor (at most kCandidates, checked by the caller), sorts them
// most likely first (bitonic, ties by lower id) and returns the cut-off key of top-k, min-p
// (`threshold` on entry) and top-p over them. kept_mass: the mass min_p keeps, the top-p total when
// there is no top-k. When top-k keeps few of many candidates (flat logits: the code predictor's
// 2048 codes under top-k 50), the k-th largest key is selected first and only the candidates at or
// above it are sorted; they are the sorted list's prefix that every later step reads, so the
// result is the same.
template <typename T>
__device__ uint32_t select_from_candidates(const T* row, int64_t n, const RowParams& p, float xmax, uint32_t threshold,
                                           uint32_t floor, float kept_mass, Candidates& c) {
  if (threadIdx.x == 0) c.count = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = to_float(row[i]);
    if (order_key(v) >= floor) {
      const int at = atomicAdd(&c.count, 1);
      c.value[at] = v;
      c.index[at] = static_cast<int32_t>(i);
    }
  }
  __syncthreads();
  int count = c.count;
  if (p.top_k > 0 && p.top_k < n && count > 2 * p.top_k) {
    count = compact_candidates(c, count, kth_largest_key(c, count, p.top_k));
  }
  int size = 1;
  while (size < count) size <<= 1;
  for (int i = count + threadIdx.x; i < size; i += blockDim.x) {
    c.value[i] = -INFINITY;
    c.index[i] = INT32_MAX;
  }
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += blockDim.x) {
        const int other = i ^ j;
        if (other <= i) continue;
        const bool other_first = before({c.value[other], c.index[other]}, {c.value[i], c.index[i]});
        const bool this_first = before({c.value[i], c.index[i]}, {c.value[other], c.index[other]});
        if ((i & k) == 0 ? other_first : this_first) {
          const float v = c.value[i];
          const int32_t x = c.index[i];
          c.value[i] = c.value[other];
          c.index[i] = c.index[other];
          c.value[other] = v;
          c.index[other] = x;
        }
      }
      __syncthreads();
    }
  }
  if (p.top_k > 0 && p.top_k < n) threshold = max(threshold, order_key(c.value[p.top_k - 1]));
  if (p.top_p < 1.0f && threadIdx.x < 32) {
    // One warp walks the sorted list 32 at a time: the first candidate at which the mass from the
    // top reaches top_p of the kept total is the last one kept.
    const float inv_t = 1.0f / p.temperature;
    const int lane = threadIdx.x;
    float total = kept_mass;
    if (p.top_k > 0 && p.top_k < n) {
      total = 0.0f;
      for (int i = lane; i < count; i += 32) {
        if (order_key(c.value[i]) >= threshold) total += expf((c.value[i] - xmax) * inv_t);
      }
      total = warp_sum(total);
    }
    const float target = p.top_p * total;
    float carried = 0.0f;
    uint32_t cut = threshold;
    for (int base = 0; base < count; base += 32) {
      const int i = base + lane;
      const bool kept = i < count && order_key(c.value[i]) >= threshold;
      float mass = kept ? expf((c.value[i] - xmax) * inv_t) : 0.0f;
      for (int o = 1; o < 32; o <<= 1) {
        const float t = __shfl_up_sync(0xffffffffu, mass, o);
        if (lane >= o) mass += t;
      }
      const unsigned reached = __ballot_sync(0xffffffffu, kept && carried + mass >= target);
      if (reached != 0) {
        cut = max(threshold, order_key(c.value[base + __ffs(reached) - 1]));
        break;
      }
      carried += __shfl_sync(0xffffffffu, mass, 31);
    }
    if (lane == 0) c.threshold = cut;
  } else if (threadIdx.x == 0) {
    c.threshold = threshold;
  }
  __syncthreads();
  const uint32_t result = c.threshold;
  __syncthreads();
  return result;
}

// The same cut-offs by bisection on the keys: one pass over the row per step.
template <typename T>
__device__ uint32_t select_by_bisection(const T* row, int64_t n, const RowParams& p, float xmax, uint32_t threshold,
                                        float* scratch) {
  const float inv_t = 1.0f / p.temperature;
  auto weight = [&](float v) { return expf((v - xmax) * inv_t); };
  if (p.top_k > 0 && p.top_k < n) {
    uint32_t lo = 0, hi = 0xFFFFFFFFu;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2 + 1;
      float count = 0.0f;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) count += order_key(to_float(row[i])) >= mid ? 1.0f : 0.0f;
      count = block_sum(count, scratch);
      if (count >= static_cast<float>(p.top_k)) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    threshold = max(threshold, lo);
  }
  if (p.top_p < 1.0f) {
    float total = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = to_float(row[i]);
      if (order_key(v) >= threshold) total += weight(v);
    }
    const float target = p.top_p * block_sum(total, scratch);
    uint32_t lo = threshold, hi = order_key(xmax);
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2 + 1;
      float mass = 0.0f;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = to_float(row[i]);
        if (order_key(v) >= mid) mass += weight(v);
      }
      if (block_sum(mass, scratch) >= target) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    threshold = lo;
  }
  return threshold;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const T* logits, int64_t n, const RowParams* params, uint64_t step_offset, int32_t* ids) {
  __shared__ float scratch[32];
  __shared__ Candidate best_scratch[32];
  __shared__ int pick, last_kept;
  __shared__ Candidates candidates;
  const RowParams p = params[blockIdx.x];
  const T* row = logits + blockIdx.x * n;

  if (p.temperature <= 0.0f || p.top_k == 1) {
    Candidate best{-INFINITY, INT32_MAX};
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const Candidate c{to_float(row[i]), static_cast<int32_t>(i)};
      if (before(c, best)) best = c;
    }
    best = block_best(best, best_scratch);
    if (threadIdx.x == 0) ids[blockIdx.x] = best.index == INT32_MAX ? 0 : best.index;
    return;
  }

  float xmax = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) xmax = fmaxf(xmax, to_float(row[i]));
  xmax = block_max(xmax, scratch);
  const float inv_t = 1.0f / p.temperature;
  auto weight = [&](float v) { return expf((v - xmax) * inv_t); };

  uint32_t threshold = 0;  // keep logits whose order_key is >= threshold
  if (p.min_p > 0.0f) threshold = order_key(xmax + p.temperature * logf(p.min_p));
  if ((p.top_k > 0 && p.top_k < n) || p.top_p < 1.0f) {
    // One pass: the tokens min_p keeps and their mass, and the same above each floor.
    uint32_t floors[kFloors];
    float counts[kFloors], masses[kFloors], kept_count = 0.0f, kept_mass = 0.0f;
#pragma unroll
    for (int f = 0; f < kFloors; ++f) {
      floors[f] = max(threshold, order_key(xmax - p.temperature * kFloorLogRatios[f]));
      counts[f] = masses[f] = 0.0f;
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = to_float(row[i]);
      const uint32_t key = order_key(v);
      if (key < threshold) continue;
      const float w = weight(v);
      kept_count += 1.0f;
      kept_mass += w;
#pragma unroll
      for (int f = 0; f < kFloors; ++f) {
        if (key >= floors[f]) {
          counts[f] += 1.0f;
          masses[f] += w;
        }
      }
    }
    kept_count = block_sum(kept_count, scratch);
    kept_mass = block_sum(kept_mass, scratch);
    // When min_p keeps at most k tokens, top-k cuts nothing more.
    RowParams cut = p;
    if (kept_count <= static_cast<float>(p.top_k)) cut.top_k = 0;
    const bool top_k_active = cut.top_k > 0 && cut.top_k < n;
    int chosen = -1;
#pragma unroll
    for (int f = 0; f < kFloors; ++f) {
      const float count = block_sum(counts[f], scratch), mass = block_sum(masses[f], scratch);
      const bool holds_top_k = !top_k_active || count >= static_cast<float>(cut.top_k);
      const bool holds_nucleus = cut.top_p >= 1.0f || top_k_active || mass >= cut.top_p * kept_mass;
      if (chosen < 0 && count <= kCandidates && holds_top_k && holds_nucleus) chosen = f;
    }
    if (chosen >= 0) {
      threshold = select_from_candidates(row, n, cut, xmax, threshold, floors[chosen], kept_mass, candidates);
    } else {
      threshold = select_by_bisection(row, n, cut, xmax, threshold, scratch);
    }
  }

  const int64_t chunk = (n + blockDim.x - 1) / blockDim.x;
  const int64_t begin = min(n, threadIdx.x * chunk), end = min(n, begin + chunk);
  float local = 0.0f;
  int local_last = -1;
  for (int64_t i = begin; i < end; ++i) {
    const float v = to_float(row[i]);
    if (order_key(v) >= threshold) {
      local += weight(v);
      local_last = static_cast<int>(i);
    }
  }
  if (threadIdx.x == 0) {
    pick = INT32_MAX;
    last_kept = 0;
  }
  float total;
  const float prefix = block_exclusive_scan(local, scratch, total);
  const float u = philox_uniform((static_cast<uint64_t>(p.seed_hi) << 32) | p.seed_lo,
                                 ((static_cast<uint64_t>(p.step_hi) << 32) | p.step_lo) + step_offset);
  const float target = u * total;
  if (local_last >= 0) atomicMax(&last_kept, local_last);
  if (local > 0.0f && prefix <= target && target < prefix + local) {
    float acc = prefix;
    int found = local_last;
    for (int64_t i = begin; i < end; ++i) {
      const float v = to_float(row[i]);
      if (order_key(v) < threshold) continue;
      acc += weight(v);
      if (acc > target) {
        found = static_cast<int>(i);
        break;
      }
    }
    atomicMin(&pick, found);
  }
  __syncthreads();
  // Rounding can leave the target in no chunk (past the summed mass): the last candidate then.
  if (threadIdx.x == 0) ids[blockIdx.x] = pick != INT32_MAX ? pick : last_kept;
}

}  // namespace

void sample(Tensor& logits, std::span<const ops::SamplingParams> params, std::span<const PenalisedToken> penalties,
            Tensor& ids) {
  const int rows = static_cast<int>(logits.dim(0));
  if (rows == 0) return;
  const int device = logits.device().index;
  std::vector<RowParams> rows_params(params.size());
  for (size_t r = 0; r < params.size(); ++r) rows_params[r] = pack(params[r]);
  static_assert(sizeof(RowParams) % 4 == 0 && sizeof(PenalisedToken) % 4 == 0);
  const size_t params_bytes = rows_params.size() * sizeof(RowParams);
  const size_t penalty_bytes = penalties.size() * sizeof(PenalisedToken);
  std::vector<char> packed(params_bytes + penalty_bytes);
  std::memcpy(packed.data(), rows_params.data(), params_bytes);
  if (penalty_bytes > 0) std::memcpy(packed.data() + params_bytes, penalties.data(), penalty_bytes);
  Tensor meta = Tensor::empty({static_cast<int64_t>(packed.size() / 4)}, DType::kI32, logits.device());
  upload_async(meta.raw(), packed.data(), packed.size(), device);
  const auto* row_params = reinterpret_cast<const RowParams*>(meta.raw());
  const auto* tokens = reinterpret_cast<const PenalisedToken*>(static_cast<const char*>(meta.raw()) + params_bytes);

  cudaStream_t stream = stream_for(device);
  with_float_type(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (!penalties.empty()) {
      const int count = static_cast<int>(penalties.size());
      penalty_kernel<T>
          <<<(count + 255) / 256, 256, 0, stream>>>(ptr<T>(logits), logits.dim(1), tokens, count, row_params);
      check_launch("penalty_kernel", logits);
    }
    sample_kernel<T><<<rows, kThreads, 0, stream>>>(ptr<T>(logits), logits.dim(1), row_params, 0, ptr<int32_t>(ids));
    check_launch("sample_kernel", logits);
  });
}

void sample_packed(const Tensor& logits, const Tensor& packed, uint64_t step_offset, Tensor& ids) {
  const int rows = static_cast<int>(logits.dim(0));
  if (rows == 0) return;
  const auto* row_params = reinterpret_cast<const RowParams*>(packed.raw());
  cudaStream_t stream = stream_for(logits.device().index);
  with_float_type(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    sample_kernel<T>
        <<<rows, kThreads, 0, stream>>>(ptr<T>(logits), logits.dim(1), row_params, step_offset, ptr<int32_t>(ids));
    check_launch("sample_kernel", logits);
  });
}

}  // namespace omni::tensor::cuda
