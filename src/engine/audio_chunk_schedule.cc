#include "engine/audio_chunk_schedule.h"

#include <algorithm>

namespace omni::engine {

namespace {

AudioClock::duration seconds(double s) {
  return std::chrono::duration_cast<AudioClock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

size_t bucket_batch_size(size_t ready, const std::vector<int>& batch_sizes) {
  size_t best = 0;
  for (int size : batch_sizes) {
    if (static_cast<size_t>(size) <= ready) best = std::max(best, static_cast<size_t>(size));
  }
  return best == 0 ? ready : best;
}

ChunkCall schedule_chunk_call(const std::vector<ChunkCandidate>& candidates, AudioClock::time_point now,
                              const ChunkScheduleLimits& limits, const ChunkCallEstimates& estimates) {
  std::vector<size_t> firsts, laters;
  for (size_t i = 0; i < candidates.size(); ++i) (candidates[i].first ? firsts : laters).push_back(i);
  std::stable_sort(firsts.begin(), firsts.end(),
                   [&](size_t a, size_t b) { return candidates[a].arrival < candidates[b].arrival; });
  std::stable_sort(laters.begin(), laters.end(), [&](size_t a, size_t b) {
    const ChunkCandidate &x = candidates[a], &y = candidates[b];
    return x.deadline != y.deadline ? x.deadline < y.deadline : x.arrival < y.arrival;
  });
  const size_t stream_limit = static_cast<size_t>(std::max(1, std::min(limits.max_batch, limits.decoder_max_batch)));

  bool later_goes_first = firsts.empty();
  if (!later_goes_first) {
    const AudioClock::time_point now_done = now + seconds(estimates.later_call_seconds);
    const AudioClock::time_point after_firsts = now_done + seconds(estimates.first_call_seconds);
    for (size_t i : laters) {
      const ChunkCandidate& c = candidates[i];
      const bool at_risk = c.deadline >= now_done && c.deadline < after_firsts;
      if (at_risk || c.overtaken >= kMaxOvertakes) {
        later_goes_first = true;
        break;
      }
    }
  }

  ChunkCall call;
  if (later_goes_first) {
    // Streams the later chunks leave room for take first chunks along: one frame more each costs
    // the call little, and saves them the wait for the next call.
    std::vector<size_t> order = laters;
    order.insert(order.end(), firsts.begin(), firsts.end());
    const size_t n = bucket_batch_size(std::min(order.size(), stream_limit), limits.batch_sizes);
    call.chosen.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n));
    return call;
  }
  // First chunks: as many streams as the frames of one full call of later chunks hold (at least
  // one), within the decoder's own limit.
  const int64_t frame_budget = static_cast<int64_t>(std::max(1, limits.max_batch)) * limits.chunk_frames;
  const size_t decoder_limit = static_cast<size_t>(std::max(1, limits.decoder_max_batch));
  int64_t frames = 0;
  size_t n = 0;
  while (n < firsts.size() && n < decoder_limit) {
    const int64_t next = candidates[firsts[n]].frames;
    if (n > 0 && frames + next > frame_budget) break;
    frames += next;
    ++n;
  }
  n = bucket_batch_size(n, limits.batch_sizes);
  call.first_chunks = true;
  call.chosen.assign(firsts.begin(), firsts.begin() + static_cast<std::ptrdiff_t>(n));
  return call;
}

}  // namespace omni::engine
