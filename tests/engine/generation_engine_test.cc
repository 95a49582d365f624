// GenerationEngine's chunking and request bookkeeping, on a fake decoder whose samples record
// which frame of which stream produced them.
#include "engine/generation_engine.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"

namespace omni::engine {
namespace {

// 2 codes per frame, 3 samples per frame: (stream position, first code, chunk size). Code 99 is
// undecodable.
class FakeDecoder final : public model::StreamingAudioDecoder {
 public:
  struct Stream final : model::AudioDecoderStream {
    int64_t frames() const override { return frames_; }
    int64_t frames_ = 0;
  };
  int codes_per_frame() const override { return 2; }
  int samples_per_frame() const override { return 3; }
  int sample_rate() const override { return 24000; }
  std::unique_ptr<model::AudioDecoderStream> open_stream() const override { return std::make_unique<Stream>(); }
  void decode(model::AudioDecoderStream& base, std::span<const int32_t> codes,
              std::vector<float>& audio) const override {
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
  // With batching on: checks every item first (as a batching decoder must), then decodes them and
  // records the batch's size.
  void decode_batch(std::span<const model::AudioDecodeItem> items) const override {
    for (const model::AudioDecodeItem& item : items) {
      for (int32_t c : item.codes) {
        if (c == 99) throw Error(ErrorCode::kInvalidArgument, "a batch item holds code 99");
        if (c == 77) throw Error(ErrorCode::kInternal, "the device failed");
      }
    }
    batch_sizes.push_back(items.size());
    for (const model::AudioDecodeItem& item : items) decode(*item.stream, item.codes, *item.audio);
  }
  int max_batch() const override { return batching ? 1000 : 1; }

  bool batching = false;
  mutable std::vector<size_t> batch_sizes;
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

TEST(GenerationEngineTest, ADecodeErrorEndsOnlyThatRequest) {
  FakeDecoder decoder;
  GenerationEngine engine(decoder, {1, 1});
  engine.add_request("bad");
  engine.add_request("good");
  engine.add_frames("bad", std::vector<int32_t>{99, 0}, false);
  engine.add_frames("good", frames(0, 1), false);
  std::vector<AudioOutput> out = engine.step();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].request_id, "bad");
  EXPECT_EQ(out[0].error, "code 99 is outside the codebook");
  EXPECT_TRUE(out[0].finished);
  EXPECT_FALSE(out[1].error);
  EXPECT_EQ(engine.num_requests(), 1u);
  engine.abort("good");
  engine.abort("unknown");
  EXPECT_EQ(engine.num_requests(), 0u);
}

// Ready requests go to the decoder together, at most max_batch per call, in request-id order.
TEST(GenerationEngineTest, ReadyRequestsDecodeInBatchesOfAtMostMaxBatch) {
  FakeDecoder decoder;
  decoder.batching = true;
  GenerationEngine engine(decoder, {.first_chunk_frames = 1, .chunk_frames = 2, .max_batch = 3});
  for (const char* id : {"a", "b", "c", "d", "e"}) engine.add_request(id);
  for (const char* id : {"a", "b", "c", "d"}) engine.add_frames(id, frames(10, 3), false);
  std::vector<AudioOutput> out = engine.step();
  // e has no frames yet; d, alone in its batch, goes through decode().
  EXPECT_EQ(decoder.batch_sizes, (std::vector<size_t>{3}));
  ASSERT_EQ(out.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(out[i].request_id, std::string(1, static_cast<char>('a' + i)));
    EXPECT_EQ(out[i].audio, (std::vector<float>{0, 10, 1}));  // each stream's own first frame
  }
  decoder.batch_sizes.clear();
  engine.add_frames("e", frames(0, 1), true);
  out = engine.step();
  EXPECT_EQ(decoder.batch_sizes, (std::vector<size_t>{3, 2}));
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].audio, (std::vector<float>{1, 11, 2, 2, 12, 2}));
  EXPECT_TRUE(out[4].finished);
  EXPECT_EQ(engine.num_requests(), 4u);
  EXPECT_THROW(GenerationEngine(decoder, {.first_chunk_frames = 1, .chunk_frames = 2, .max_batch = 0}), Error);
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
  EXPECT_EQ(out[0].error, "code 99 is outside the codebook");
  EXPECT_TRUE(out[0].finished);
  EXPECT_FALSE(out[1].error);
  EXPECT_EQ(out[1].audio, (std::vector<float>{0, 5, 1}));
  EXPECT_TRUE(decoder.batch_sizes.empty());
  EXPECT_EQ(engine.num_requests(), 1u);

  // A failure other than the codes' fails the whole batch: its streams may be half-advanced.
  engine.add_request("other");
  engine.add_frames("good", std::vector<int32_t>{77, 0}, false);
  engine.add_frames("other", frames(0, 1), false);
  out = engine.step();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].error, "the device failed");
  EXPECT_EQ(out[1].error, "the device failed");
  EXPECT_TRUE(out[0].finished && out[1].finished);
  EXPECT_EQ(engine.num_requests(), 0u);
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
