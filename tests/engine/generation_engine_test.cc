// GenerationEngine's chunking, request bookkeeping and call schedule, on a fake decoder whose
// samples record which frame of which stream produced them, and whose calls take scripted time on a
// scripted clock.
#include "engine/generation_engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "base/error.h"

namespace omni::engine {
namespace {

// The engine's clock in these tests: it moves only when a decoder call takes time, or by hand.
struct FakeClock {
  AudioClock::time_point t{};
  GenerationEngine::TimeSource source() {
    return [this] { return t; };
  }
};

// 2 codes per frame, 3 samples per frame: (stream position, first code, chunk size); at 75 Hz a
// frame is 40 ms of audio. Code 99 is undecodable. Every call records the first code of each item
// (the tests give each request its own codes) and moves the clock on by `call_cost`.
class FakeDecoder final : public model::StreamingAudioDecoder {
 public:
  struct Stream final : model::AudioDecoderStream {
    int64_t frames() const override { return frames_; }
    int64_t frames_ = 0;
  };
  int codes_per_frame() const override { return 2; }
  int samples_per_frame() const override { return 3; }
  int sample_rate() const override { return 75; }
  std::unique_ptr<model::AudioDecoderStream> open_stream() const override { return std::make_unique<Stream>(); }
  std::unique_ptr<model::AudioDecoderStream> copy_stream(const model::AudioDecoderStream& base) const override {
    if (!copies) return nullptr;
    auto copy = std::make_unique<Stream>();
    copy->frames_ = static_cast<const Stream&>(base).frames_;
    return copy;
  }
  void decode(model::AudioDecoderStream& base, std::span<const int32_t> codes,
              std::vector<float>& audio) const override {
    record({codes.empty() ? -1 : codes[0]});
    decode_one(base, codes, audio);
  }
  // With batching on: checks every item first (as a batching decoder must), then decodes them.
  void decode_batch(std::span<const model::AudioDecodeItem> items) const override {
    std::vector<int32_t> firsts;
    for (const model::AudioDecodeItem& item : items) {
      for (int32_t c : item.codes) {
        if (c == 99) throw Error(ErrorCode::kInvalidArgument, "a batch item holds code 99");
        if (c == 77) throw Error(ErrorCode::kInternal, "the device failed");
      }
      firsts.push_back(item.codes.empty() ? -1 : item.codes[0]);
    }
    batch_sizes.push_back(items.size());
    record(firsts);
    for (const model::AudioDecodeItem& item : items) decode_one(*item.stream, item.codes, *item.audio);
  }
  int max_batch() const override { return batching ? 1000 : 1; }

  bool batching = false;
  bool copies = true;  // copy_stream() works
  FakeClock* clock = nullptr;
  std::chrono::milliseconds call_cost{0};
  mutable std::vector<size_t> batch_sizes;          // of decode_batch() calls
  mutable std::vector<std::vector<int32_t>> calls;  // every call's items, by their first code

 private:
  void record(std::vector<int32_t> firsts) const {
    calls.push_back(std::move(firsts));
    if (clock) clock->t += call_cost;
  }
  static void decode_one(model::AudioDecoderStream& base, std::span<const int32_t> codes, std::vector<float>& audio) {
    auto& s = static_cast<Stream&>(base);
    for (int32_t c : codes) {
      if (c == 99) throw Error(ErrorCode::kInvalidArgument, "code 99 is outside the codebook");
    }
    const int64_t n = static_cast<int64_t>(codes.size()) / 2;
    for (int64_t f = 0; f < n; ++f) {
      audio.insert(audio.end(),
                   {static_cast<float>(s.frames_ + f), static_cast<float>(codes[2 * f]), static_cast<float>(n)});
    }
    s.frames_ += n;
  }
};

std::vector<int32_t> frames(int first, int n) {
  std::vector<int32_t> codes;
  for (int i = 0; i < n; ++i) codes.insert(codes.end(), {first + i, 0});
  return codes;
}

TEST(GenerationEngineTest, DecodesAFirstChunkThenFixedChunksThenTheRest) {
  FakeDecoder decoder;
  GenerationEngine engine(decoder, {2, 3});
  engine.add_request("r");
  EXPECT_FALSE(engine.has_ready_work());
  engine.add_frames("r", frames(0, 1), false);
  EXPECT_FALSE(engine.has_ready_work());
  engine.add_frames("r", frames(1, 7), false);  // 8 pending: chunks of 2, 3, 3
  std::vector<float> audio;
  std::vector<size_t> sizes;
  while (engine.has_ready_work()) {
    for (AudioOutput& out : engine.step()) {
      EXPECT_FALSE(out.finished);
      sizes.push_back(out.audio.size() / 3);
      audio.insert(audio.end(), out.audio.begin(), out.audio.end());
    }
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{2, 3, 3}));
  engine.add_frames("r", frames(8, 4), true);  // 4 left after the end: 3, then the last 1
  std::vector<AudioOutput> out = engine.step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].audio.size(), 9u);
  EXPECT_FALSE(out[0].finished);
  out = engine.step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].audio, (std::vector<float>{11, 11, 1}));
  EXPECT_TRUE(out[0].finished);
  EXPECT_EQ(engine.num_requests(), 0u);
  for (size_t f = 0; f < 8; ++f) EXPECT_EQ(audio[3 * f], static_cast<float>(f));  // stream positions continue
}

TEST(GenerationEngineTest, PerRequestFirstChunkAndAnEmptyEnd) {
  FakeDecoder decoder;
  GenerationEngine engine(decoder, {1, 25});
  engine.add_request("a", 4);
  engine.add_request("b");
  engine.add_frames("a", frames(0, 3), false);
  engine.add_frames("b", frames(0, 1), false);
  std::vector<AudioOutput> out = engine.step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].request_id, "b");
  engine.add_frames("a", {}, true);
  out = engine.step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].request_id, "a");
  EXPECT_EQ(out[0].audio.size(), 9u);
  EXPECT_TRUE(out[0].finished);
  engine.add_frames("b", {}, true);
  out = engine.step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].audio.empty());
  EXPECT_TRUE(out[0].finished);
}

// Left context (a voice clone's reference frames): decoded when the request starts, in a call of
// its own whose audio is not output, so the stream's positions continue from it.
TEST(GenerationEngineTest, LeftContextIsDecodedAtTheStartAndItsAudioDropped) {
  FakeDecoder decoder;
  GenerationEngine engine(decoder, {2, 3});
  engine.add_request("r", std::nullopt, frames(50, 4));
  ASSERT_EQ(decoder.calls.size(), 1u);
  EXPECT_EQ(decoder.calls[0], std::vector<int32_t>{50});
  EXPECT_FALSE(engine.has_ready_work());  // the context alone is no chunk
  engine.add_frames("r", frames(0, 1), false);
  EXPECT_FALSE(engine.has_ready_work());
  engine.add_frames("r", frames(1, 4), false);
  std::vector<AudioOutput> out = engine.step();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(decoder.calls.size(), 2u);
  EXPECT_EQ(decoder.calls[1], std::vector<int32_t>{0});
  // Frames 0 and 1 at stream positions 4 and 5 (the first chunk of 2); the context's audio gone.
  EXPECT_EQ(out[0].audio, (std::vector<float>{4, 0, 2, 5, 1, 2}));
  engine.add_frames("r", {}, true);
  out = engine.step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].audio, (std::vector<float>{6, 2, 3, 7, 3, 3, 8, 4, 3}));
  EXPECT_TRUE(out[0].finished);
  // A request that ends before its first frame gives no audio at all.
  engine.add_request("empty", std::nullopt, frames(60, 2));
  engine.add_frames("empty", {}, true);
  out = engine.step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].audio.empty());
  EXPECT_TRUE(out[0].finished);
  EXPECT_THROW(engine.add_request("partial", std::nullopt, std::vector<int32_t>{1, 2, 3}), Error);
  // Context codes the decoder refuses fail the request at its start; nothing is kept of it.
  EXPECT_THROW(engine.add_request("bad", std::nullopt, frames(98, 3)), Error);
  EXPECT_EQ(engine.num_requests(), 0u);
}

// A request whose context an earlier one had starts from a copy of the stream kept after it: no
// decoder call for the context, the same positions; at most reference_states contexts are kept,
// the least recently used going first; a decoder that cannot copy streams decodes every context.
TEST(GenerationEngineTest, ARepeatedContextStartsFromACopyOfItsStream) {
  FakeDecoder decoder;
  GenerationEngine engine(decoder, {.first_chunk_frames = 1, .chunk_frames = 3, .reference_states = 2});
  engine.add_request("a", std::nullopt, frames(50, 4));
  engine.add_request("b", std::nullopt, frames(50, 4));
  EXPECT_EQ(decoder.calls.size(), 1u);
  EXPECT_EQ(engine.reused_contexts(), 1u);
  engine.add_frames("a", frames(0, 1), true);
  engine.add_frames("b", frames(5, 1), true);
  std::vector<float> a, b;
  while (engine.has_ready_work()) {
    for (AudioOutput& out : engine.step()) (out.request_id == "a" ? a : b) = out.audio;
  }
  EXPECT_EQ(a, (std::vector<float>{4, 0, 1}));
  EXPECT_EQ(b, (std::vector<float>{4, 5, 1}));  // b's stream is its own copy: also at position 4
  const size_t calls = decoder.calls.size();
  engine.add_request("c", std::nullopt, frames(60, 2));  // decoded and kept: 60, 50
  engine.add_request("d", std::nullopt, frames(70, 2));  // decoded and kept: 70, 60 (50 goes)
  engine.add_request("e", std::nullopt, frames(60, 2));  // reused
  engine.add_request("f", std::nullopt, frames(50, 2));  // decoded again
  EXPECT_EQ(decoder.calls.size(), calls + 3);
  EXPECT_EQ(engine.reused_contexts(), 2u);
  EXPECT_EQ(decoder.calls.back(), std::vector<int32_t>{50});

  FakeDecoder plain;
  plain.copies = false;
  GenerationEngine uncached(plain, {1, 3});
  uncached.add_request("a", std::nullopt, frames(50, 4));
  uncached.add_request("b", std::nullopt, frames(50, 4));
  EXPECT_EQ(plain.calls.size(), 2u);
  EXPECT_EQ(uncached.reused_contexts(), 0u);
}

TEST(GenerationEngineTest, ADecodeErrorEndsOnlyThatRequest) {
  FakeDecoder decoder;  // no batching: one stream per call
  GenerationEngine engine(decoder, {1, 1});
  engine.add_request("bad");
  engine.add_request("good");
  engine.add_frames("bad", std::vector<int32_t>{99, 0}, false);
  engine.add_frames("good", frames(0, 1), false);
  std::vector<AudioOutput> out = engine.step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].request_id, "bad");
  ASSERT_TRUE(out[0].error);
  EXPECT_STREQ(out[0].error->what(), "code 99 is outside the codebook");
  EXPECT_TRUE(out[0].finished);
  out = engine.step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].request_id, "good");
  EXPECT_FALSE(out[0].error);
  EXPECT_EQ(engine.num_requests(), 1u);
  engine.abort("good");
  engine.abort("unknown");
  EXPECT_EQ(engine.num_requests(), 0u);
}

// Short first chunks go to the decoder together, past max_batch streams, as long as their frames
// fit in one full call of later chunks (max_batch × chunk_frames); later chunks go at most
// max_batch per call.
TEST(GenerationEngineTest, FirstChunksDecodeTogetherLaterChunksAtMostMaxBatch) {
  FakeClock clock;  // standing still: no chunk is ever at risk
  FakeDecoder decoder;
  decoder.batching = true;
  GenerationEngine engine(decoder, {.first_chunk_frames = 1, .chunk_frames = 2, .max_batch = 3}, clock.source());
  for (const char* id : {"a", "b", "c", "d", "e"}) engine.add_request(id);
  for (const char* id : {"a", "b", "c", "d"}) engine.add_frames(id, frames(10, 3), false);
  std::vector<AudioOutput> out = engine.step();
  EXPECT_EQ(decoder.batch_sizes, (std::vector<size_t>{4}));
  ASSERT_EQ(out.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(out[i].request_id, std::string(1, static_cast<char>('a' + i)));
    EXPECT_EQ(out[i].audio, (std::vector<float>{0, 10, 1}));  // each stream's own first frame
  }
  out = engine.step();  // later chunks: at most 3
  EXPECT_EQ(decoder.batch_sizes, (std::vector<size_t>{4, 3}));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].audio, (std::vector<float>{1, 11, 2, 2, 12, 2}));
  engine.add_frames("e", frames(0, 1), true);
  out = engine.step();  // e's first (and last) chunk goes ahead of d's later chunk
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].request_id, "e");
  EXPECT_TRUE(out[0].finished);
  out = engine.step();  // alone in its call: decode(), not decode_batch()
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].request_id, "d");
  EXPECT_EQ(decoder.calls.size(), 4u);
  EXPECT_FALSE(engine.has_ready_work());
  EXPECT_EQ(engine.num_requests(), 4u);
  EXPECT_THROW(GenerationEngine(decoder, {.first_chunk_frames = 1, .chunk_frames = 2, .max_batch = 0}), Error);
  EXPECT_THROW(
      GenerationEngine(decoder, {.first_chunk_frames = 1, .chunk_frames = 2, .max_batch = 2, .batch_sizes = {1, 0}}),
      Error);
}

// Scripted arrivals: a new stream's first chunk goes ahead of running streams' later chunks, but
// overtakes a ready later chunk only once, so new requests cannot starve running ones.
TEST(GenerationEngineTest, FirstChunksGoFirstAndOvertakeALaterChunkOnlyOnce) {
  FakeClock clock;
  FakeDecoder decoder;
  decoder.batching = true;
  decoder.clock = &clock;
  decoder.call_cost = std::chrono::milliseconds(10);
  GenerationEngine engine(decoder, {.first_chunk_frames = 1, .chunk_frames = 4, .max_batch = 2}, clock.source());
  engine.add_request("a");
  engine.add_request("b");
  engine.add_frames("a", frames(100, 1), false);
  engine.add_frames("b", frames(200, 1), false);
  engine.step();
  engine.add_frames("a", frames(101, 4), false);  // due at 10 + 40 ms: far from at risk
  engine.add_frames("b", frames(201, 4), false);
  engine.add_request("c");
  engine.add_frames("c", frames(300, 1), false);
  engine.step();
  engine.add_request("d");
  engine.add_frames("d", frames(400, 1), false);
  engine.step();  // a and b were overtaken once: they go before d
  engine.step();
  EXPECT_EQ(decoder.calls, (std::vector<std::vector<int32_t>>{{100, 200}, {300}, {101, 201}, {400}}));
  EXPECT_FALSE(engine.has_ready_work());
}

// More later chunks than one call takes, and new streams arriving: calls of first chunks and of
// later chunks alternate, so neither kind waits for all of the other.
TEST(GenerationEngineTest, FirstAndLaterCallsAlternateWhileBothWait) {
  FakeClock clock;  // standing still: no chunk is ever at risk
  FakeDecoder decoder;
  decoder.batching = true;
  GenerationEngine engine(decoder, {.first_chunk_frames = 1, .chunk_frames = 4, .max_batch = 1}, clock.source());
  for (int i = 1; i <= 3; ++i) {
    const std::string id(1, static_cast<char>('a' + i - 1));
    engine.add_request(id);
    engine.add_frames(id, frames(100 * i, 1), false);
  }
  engine.step();  // the three first chunks: 3 frames, within one later call's 4
  for (int i = 1; i <= 3; ++i)
    engine.add_frames(std::string(1, static_cast<char>('a' + i - 1)), frames(100 * i + 1, 4), false);
  decoder.calls.clear();
  engine.add_request("d");
  engine.add_frames("d", frames(400, 1), false);
  engine.step();
  engine.add_request("e");
  engine.add_frames("e", frames(500, 1), false);
  while (engine.has_ready_work()) engine.step();
  EXPECT_EQ(decoder.calls, (std::vector<std::vector<int32_t>>{{400}, {101}, {500}, {201}, {301}}));
}

// A later chunk that can still make its deadline, but not after a call of first chunks, goes first;
// one that is late anyway lets the first chunk go.
TEST(GenerationEngineTest, ALaterChunkAtRiskGoesBeforeFirstChunks) {
  FakeClock clock;
  FakeDecoder decoder;
  decoder.batching = true;
  decoder.clock = &clock;
  decoder.call_cost = std::chrono::milliseconds(30);
  // One stream per call of later chunks, so that no first chunk rides along.
  GenerationEngine engine(decoder, {.first_chunk_frames = 1, .chunk_frames = 4, .max_batch = 1}, clock.source());
  engine.add_request("a");
  engine.add_frames("a", frames(100, 1), false);
  engine.step();  // a plays from 30 ms; its 40 ms of audio run out at 70 ms
  engine.add_frames("a", frames(101, 8), false);
  engine.add_request("b");
  engine.add_frames("b", frames(200, 1), false);
  clock.t = AudioClock::time_point(std::chrono::milliseconds(45));
  engine.step();  // now + a first-chunk call (30 ms) would be 75 ms: a goes first
  EXPECT_EQ(decoder.calls.back(), (std::vector<int32_t>{101}));
  // a's next chunk is due at 30 + 200 ms; at 300 ms it is late whatever goes first.
  clock.t = AudioClock::time_point(std::chrono::milliseconds(300));
  engine.step();
  EXPECT_EQ(decoder.calls.back(), (std::vector<int32_t>{200}));
  engine.step();
  EXPECT_EQ(decoder.calls.back(), (std::vector<int32_t>{105}));
}

// With decode_cudagraph_batch_sizes, every call takes the largest bucket its ready chunks fill.
TEST(GenerationEngineTest, CallsAreGroupedIntoTheBatchBuckets) {
  FakeClock clock;
  FakeDecoder decoder;
  decoder.batching = true;
  GenerationEngine engine(decoder,
                          {.first_chunk_frames = 1, .chunk_frames = 2, .max_batch = 4, .batch_sizes = {4, 1, 2, 8}},
                          clock.source());
  std::vector<std::string> ids;
  for (int i = 0; i < 7; ++i) {
    ids.push_back("r" + std::to_string(i));
    engine.add_request(ids.back());
    engine.add_frames(ids.back(), frames(100 * i, 1), false);
  }
  while (engine.has_ready_work()) engine.step();
  for (int i = 0; i < 7; ++i) engine.add_frames(ids[i], frames(100 * i + 1, 2), false);
  while (engine.has_ready_work()) engine.step();
  // Bucket 8 is above max_batch 4 and never used; first chunks by arrival, later ones by deadline.
  EXPECT_EQ(decoder.calls, (std::vector<std::vector<int32_t>>{
                               {0, 100, 200, 300}, {400, 500}, {600}, {1, 101, 201, 301}, {401, 501}, {601}}));
}

// A refused batch is decoded request by request: only the request at fault fails.
TEST(GenerationEngineTest, ABatchWithBadCodesFailsOnlyTheRequestAtFault) {
  FakeDecoder decoder;
  decoder.batching = true;
  GenerationEngine engine(decoder, {.first_chunk_frames = 1, .chunk_frames = 1, .max_batch = 8});
  engine.add_request("bad");
  engine.add_request("good");
  engine.add_frames("bad", std::vector<int32_t>{99, 0}, false);
  engine.add_frames("good", frames(5, 1), false);
  std::vector<AudioOutput> out = engine.step();
  ASSERT_EQ(out.size(), 2u);
  ASSERT_TRUE(out[0].error);
  EXPECT_STREQ(out[0].error->what(), "code 99 is outside the codebook");
  EXPECT_TRUE(out[0].finished);
  EXPECT_FALSE(out[1].error);
  EXPECT_EQ(out[1].audio, (std::vector<float>{0, 5, 1}));
  EXPECT_TRUE(decoder.batch_sizes.empty());
  EXPECT_EQ(engine.num_requests(), 1u);

  // A failure other than the codes' fails the whole batch: its streams may be half-advanced.
  engine.add_request("other");
  engine.add_request("third");
  engine.add_frames("other", std::vector<int32_t>{77, 0}, false);
  engine.add_frames("third", frames(0, 1), false);
  out = engine.step();
  ASSERT_EQ(out.size(), 2u);
  ASSERT_TRUE(out[0].error);
  EXPECT_STREQ(out[0].error->what(), "the device failed");
  ASSERT_TRUE(out[1].error);
  EXPECT_STREQ(out[1].error->what(), "the device failed");
  EXPECT_TRUE(out[0].finished && out[1].finished);
  EXPECT_EQ(engine.num_requests(), 1u);  // good, whose first chunk went earlier
}

TEST(GenerationEngineTest, RefusesBadInputNamingIt) {
  FakeDecoder decoder;
  EXPECT_THROW(GenerationEngine(decoder, {0, 25}), Error);
  GenerationEngine engine(decoder, {1, 25});
  engine.add_request("r");
  EXPECT_THROW(engine.add_request("r"), Error);
  EXPECT_THROW(engine.add_request("s", 0), Error);
  try {
    engine.add_frames("r", std::vector<int32_t>{1, 2, 3}, false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("request r: 3 codes are not whole frames of 2"), std::string::npos);
  }
  try {
    engine.add_frames("nobody", {}, true);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
  engine.add_frames("r", {}, true);
  EXPECT_THROW(engine.add_frames("r", frames(0, 1), false), Error);
}

}  // namespace
}  // namespace omni::engine
