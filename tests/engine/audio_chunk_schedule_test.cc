// The code2wav call schedule as a pure function: which ready chunks go into the next decoder call.
#include "engine/audio_chunk_schedule.h"

#include <gtest/gtest.h>

#include <vector>

namespace omni::engine {
namespace {

using std::chrono::milliseconds;

const AudioClock::time_point kNow = AudioClock::time_point(std::chrono::seconds(100));

ChunkCandidate first(uint64_t arrival, int64_t frames = 1) {
  return {.first = true, .frames = frames, .arrival = arrival};
}

ChunkCandidate later(uint64_t arrival, milliseconds due_in, int overtaken = 0) {
  return {.first = false, .frames = 25, .arrival = arrival, .deadline = kNow + due_in, .overtaken = overtaken};
}

ChunkScheduleLimits limits(int max_batch, std::vector<int> buckets = {}) {
  return {.max_batch = max_batch, .decoder_max_batch = 1000, .chunk_frames = 25, .batch_sizes = std::move(buckets)};
}

const ChunkCallEstimates kEstimates{.first_call_seconds = 0.020, .later_call_seconds = 0.100};

TEST(AudioChunkScheduleTest, FirstChunksGoTogetherAheadOfLaterChunksInArrivalOrder) {
  // Later chunks due in 2 s; first chunks arrived 7, 3, 5, 9, 4 (indices 2..6).
  std::vector<ChunkCandidate> ready = {
      later(0, milliseconds(2000)), later(1, milliseconds(1500)), first(7), first(3), first(5), first(9), first(4)};
  ChunkCall call = schedule_chunk_call(ready, kNow, limits(2), kEstimates);
  EXPECT_TRUE(call.first_chunks);
  EXPECT_EQ(call.chosen, (std::vector<size_t>{3, 6, 4, 2, 5}));  // 5 streams past max_batch 2: 5 of 50 frames
}

TEST(AudioChunkScheduleTest, AFirstChunkCallHoldsTheFramesOfOneFullLaterCall) {
  std::vector<ChunkCandidate> ready;
  for (uint64_t i = 0; i < 7; ++i) ready.push_back(first(i, 10));
  ChunkCall call = schedule_chunk_call(ready, kNow, limits(2), kEstimates);  // 2 × 25 frames: 5 chunks of 10
  EXPECT_EQ(call.chosen, (std::vector<size_t>{0, 1, 2, 3, 4}));
  // One first chunk larger than the budget still goes, alone.
  ready = {first(0, 60), first(1, 1)};
  EXPECT_EQ(schedule_chunk_call(ready, kNow, limits(2), kEstimates).chosen, (std::vector<size_t>{0}));
  // The decoder's own limit holds for first chunks too.
  ChunkScheduleLimits one = limits(4);
  one.decoder_max_batch = 1;
  ready = {first(0), first(1)};
  EXPECT_EQ(schedule_chunk_call(ready, kNow, one, kEstimates).chosen, (std::vector<size_t>{0}));
}

TEST(AudioChunkScheduleTest, LaterChunksGoEarliestDeadlineFirstAtMostMaxBatch) {
  std::vector<ChunkCandidate> ready = {later(0, milliseconds(900)), later(1, milliseconds(-50)),
                                       later(2, milliseconds(300)), later(3, milliseconds(300))};
  ChunkCall call = schedule_chunk_call(ready, kNow, limits(3), kEstimates);
  EXPECT_FALSE(call.first_chunks);
  EXPECT_EQ(call.chosen, (std::vector<size_t>{1, 2, 3}));
  EXPECT_TRUE(schedule_chunk_call({}, kNow, limits(3), kEstimates).chosen.empty());
}

// Due in [100 ms, 120 ms): met if decoded now (a later call takes 100 ms), missed after a first call
// (20 ms more).
TEST(AudioChunkScheduleTest, ALaterChunkAtRiskGoesBeforeFirstChunks) {
  for (int due : {100, 110, 119}) {
    std::vector<ChunkCandidate> ready = {first(0), later(1, milliseconds(5000)), later(2, milliseconds(due))};
    ChunkCall call = schedule_chunk_call(ready, kNow, limits(4), kEstimates);
    EXPECT_FALSE(call.first_chunks) << due;
    EXPECT_EQ(call.chosen, (std::vector<size_t>{2, 1, 0})) << due;  // the first chunk rides along
  }
  // Safe either way, or late either way: the first chunk goes.
  for (int due : {120, 500, 99, -300}) {
    std::vector<ChunkCandidate> ready = {first(0), later(1, milliseconds(due))};
    ChunkCall call = schedule_chunk_call(ready, kNow, limits(4), kEstimates);
    EXPECT_TRUE(call.first_chunks) << due;
    EXPECT_EQ(call.chosen, (std::vector<size_t>{0})) << due;
  }
}

TEST(AudioChunkScheduleTest, ALaterChunkOvertakenOnceGoesBeforeFirstChunks) {
  std::vector<ChunkCandidate> ready = {first(0), later(1, milliseconds(-300), kMaxOvertakes),
                                       later(2, milliseconds(-400))};
  ChunkCall call = schedule_chunk_call(ready, kNow, limits(2), kEstimates);
  EXPECT_FALSE(call.first_chunks);
  EXPECT_EQ(call.chosen, (std::vector<size_t>{2, 1}));  // no room left for the first chunk
}

// A call of later chunks takes first chunks along in the streams it leaves free, within the
// buckets; the later chunks always keep their places.
TEST(AudioChunkScheduleTest, RoomLeftInALaterCallTakesFirstChunksAlong) {
  std::vector<ChunkCandidate> ready = {first(5), later(0, milliseconds(-10), kMaxOvertakes), first(2),
                                       later(1, milliseconds(-20))};
  EXPECT_EQ(schedule_chunk_call(ready, kNow, limits(3), kEstimates).chosen, (std::vector<size_t>{3, 1, 2}));
  EXPECT_EQ(schedule_chunk_call(ready, kNow, limits(8), kEstimates).chosen, (std::vector<size_t>{3, 1, 2, 0}));
  EXPECT_EQ(schedule_chunk_call(ready, kNow, limits(8, {1, 2}), kEstimates).chosen, (std::vector<size_t>{3, 1}));
}

TEST(AudioChunkScheduleTest, CallsTakeTheLargestBucketTheReadyChunksFill) {
  EXPECT_EQ(bucket_batch_size(7, {1, 2, 4}), 4u);
  EXPECT_EQ(bucket_batch_size(3, {1, 2, 4}), 2u);
  EXPECT_EQ(bucket_batch_size(3, {4, 8}), 3u);  // fewer than the smallest bucket: as they are
  EXPECT_EQ(bucket_batch_size(5, {}), 5u);
  std::vector<ChunkCandidate> ready;
  for (uint64_t i = 0; i < 7; ++i) ready.push_back(first(i));
  EXPECT_EQ(schedule_chunk_call(ready, kNow, limits(4, {2, 4}), kEstimates).chosen.size(), 4u);
  ready.clear();
  for (uint64_t i = 0; i < 3; ++i) ready.push_back(later(i, milliseconds(1000)));
  EXPECT_EQ(schedule_chunk_call(ready, kNow, limits(4, {2, 4}), kEstimates).chosen, (std::vector<size_t>{0, 1}));
}

}  // namespace
}  // namespace omni::engine
