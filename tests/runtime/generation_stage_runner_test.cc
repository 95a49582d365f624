// The generation runner over the Qwen3-TTS code2wav stage model on a random-weight codec: chunk
// sizes from the input connector's extra, streamed payloads decoded as they arrive, several
// requests, abort, errors; and over the Qwen3-Omni code2wav on its tiny fixture.
#include "runtime/generation_stage_runner.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "model/qwen3_omni/code2wav.h"
#include "model/qwen3_tts/codec_decoder.h"
#include "model/qwen3_tts/codec_frames.h"
#include "model/qwen3_tts/random_codec.h"
#include "support/temp_dir.h"

namespace omni::runtime {
namespace {

constexpr int kSamplesPerFrame = 1920;

class GenerationRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    checkpoint_dir = new testing::TempDir;
    model::qwen3_tts::CodecDecoderConfig shapes = model::qwen3_tts::small_codec_shapes();
    shapes.num_hidden_layers = 1;
    model::qwen3_tts::write_random_codec_checkpoint(checkpoint_dir->path() / "speech_tokenizer", shapes, 11);
  }
  static void TearDownTestSuite() { delete checkpoint_dir; }

  // On the CPU, where the decoder's samples are bit-exact (a GPU machine would pick cuda by "auto").
  std::unique_ptr<StageRunner> make_runner(const Json& extra, const std::string& device = "cpu") {
    StageRunnerContext context;
    context.stage_id = 1;
    return make_stage_runner({{"runner", "generation"},
                              {"stage_model", "qwen3_tts_code2wav"},
                              {"model", checkpoint_dir->path().string()},
                              {"connector_extra", extra},
                              {"device", device}},
                             context);
  }

  // Random frames; the payload views own their bytes, as a connector's mapping would.
  std::vector<int32_t> frames(int n) {
    std::vector<int32_t> codes(static_cast<size_t>(n) * 16);
    for (int32_t& c : codes) c = static_cast<int32_t>(rng_() % 2048);
    return codes;
  }
  static PayloadView payload(std::span<const int32_t> codes) {
    auto bytes = std::make_shared<std::vector<uint8_t>>(model::qwen3_tts::encode_codec_frames(codes, 16));
    return PayloadView(bytes->data(), bytes->size(), bytes);
  }
  std::vector<float> one_shot(const std::vector<int32_t>& codes) {
    return model::qwen3_tts::CodecDecoder::load(checkpoint_dir->path() / "speech_tokenizer")->decode(codes);
  }

  static inline testing::TempDir* checkpoint_dir = nullptr;
  std::mt19937 rng_{5};
};

TEST_F(GenerationRunnerTest, DecodesStreamedFramesInTheConfiguredChunksExactly) {
  auto runner = make_runner({{"initial_codec_chunk_frames", 2},
                             {"codec_chunk_frames", 3},
                             {"codec_left_context_frames", 72},
                             {"codec_streaming", true}});
  const std::vector<int32_t> codes = frames(9);
  StageRequest request;
  request.request_id = "a";
  request.input_open = true;
  runner->add_request(request);
  EXPECT_EQ(runner->running_requests(), 1u);
  EXPECT_FALSE(runner->can_step());  // no frames yet

  std::vector<float> audio;
  std::vector<size_t> chunk_frames;
  std::optional<std::string> finish;
  auto drain = [&] {
    while (runner->can_step()) {
      for (StageOutput& out : runner->step()) {
        EXPECT_EQ(out.request_id, "a");
        EXPECT_EQ(out.audio_sample_rate, 24000);
        EXPECT_FALSE(out.error);
        chunk_frames.push_back(out.audio.size() / kSamplesPerFrame);
        audio.insert(audio.end(), out.audio.begin(), out.audio.end());
        if (out.finish_reason) finish = out.finish_reason;
      }
    }
  };
  // Frames arrive one payload per talker step, 1 frame each, then the rest in one go.
  for (int f = 0; f < 5; ++f) {
    runner->add_input("a",
                      StageInputChunk{{}, {payload(std::span(codes).subspan(static_cast<size_t>(f) * 16, 16))}, false});
    drain();
  }
  EXPECT_EQ(chunk_frames, (std::vector<size_t>{2, 3}));  // frames 0-1, then 2-4
  runner->add_input("a", StageInputChunk{{}, {payload(std::span(codes).subspan(size_t{5} * 16))}, true});
  drain();
  EXPECT_EQ(chunk_frames, (std::vector<size_t>{2, 3, 3, 1}));
  EXPECT_EQ(finish, "stop");
  EXPECT_EQ(runner->running_requests(), 0u);
  const std::vector<float> want = one_shot(codes);
  ASSERT_EQ(audio.size(), want.size());
  EXPECT_EQ(std::memcmp(audio.data(), want.data(), audio.size() * sizeof(float)), 0);
}

// The Qwen3-Omni code2wav stage through the same runner: its first chunk is 555 samples short (the
// decoder blocks' left trim), the rest whole, and the streamed audio is the one-shot decode.
TEST_F(GenerationRunnerTest, ServesTheQwen3OmniCode2WavStreamedExactly) {
  const std::filesystem::path fixture = std::filesystem::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_omni_code2wav";
  StageRunnerContext context;
  context.stage_id = 2;
  auto runner = make_stage_runner({{"runner", "generation"},
                                   {"stage_model", "qwen3_omni_code2wav"},
                                   {"model", fixture.string()},
                                   {"connector_extra", {{"initial_codec_chunk_frames", 2}, {"codec_chunk_frames", 4}}},
                                   {"device", "cpu"}},
                                  context);
  std::vector<int32_t> codes(static_cast<size_t>(9) * 16);
  for (int32_t& c : codes) c = static_cast<int32_t>(rng_() % 128);  // the fixture's codebooks hold 128 codes
  StageRequest request;
  request.request_id = "omni";
  request.input_open = true;
  runner->add_request(request);
  std::vector<float> audio;
  std::vector<size_t> chunk_samples;
  std::optional<std::string> finish;
  auto drain = [&] {
    while (runner->can_step()) {
      for (StageOutput& out : runner->step()) {
        EXPECT_FALSE(out.error) << (out.error ? out.error->what() : "");
        EXPECT_EQ(out.audio_sample_rate, 24000);
        chunk_samples.push_back(out.audio.size());
        audio.insert(audio.end(), out.audio.begin(), out.audio.end());
        if (out.finish_reason) finish = out.finish_reason;
      }
    }
  };
  runner->add_input("omni", StageInputChunk{{}, {payload(std::span(codes).first(size_t{5} * 16))}, false});
  drain();
  runner->add_input("omni", StageInputChunk{{}, {payload(std::span(codes).subspan(size_t{5} * 16))}, true});
  drain();
  EXPECT_EQ(chunk_samples, (std::vector<size_t>{2 * 1920 - 555, 4 * 1920, 3 * 1920}));
  EXPECT_EQ(finish, "stop");
  const std::vector<float> want = model::qwen3_omni::load_code2wav(fixture)->decode(codes);
  ASSERT_EQ(audio.size(), want.size());
  EXPECT_EQ(std::memcmp(audio.data(), want.data(), audio.size() * sizeof(float)), 0);
}

TEST_F(GenerationRunnerTest, ServesSeveralRequestsAndAbortFreesOne) {
  auto runner = make_runner({{"codec_chunk_frames", 2}});
  const std::vector<int32_t> a = frames(3), b = frames(4);
  StageRequest ra, rb, rc;
  ra.request_id = "a";
  ra.input_open = true;
  // A request with a smaller first chunk than the stage's, as the speech API may ask.
  ra.additional_information = {{"initial_codec_chunk_frames", 3}};
  rb.request_id = "b";
  rb.input_open = true;
  rc.request_id = "c";
  rc.input_open = true;
  runner->add_request(ra);
  runner->add_request(rb);
  runner->add_request(rc);
  runner->add_input("a", StageInputChunk{{}, {payload(a)}, true});
  runner->add_input("b", StageInputChunk{{}, {payload(b)}, false});
  runner->add_input("c", StageInputChunk{{}, {payload(b)}, false});
  runner->abort("c");
  EXPECT_EQ(runner->running_requests(), 2u);
  std::map<std::string, std::vector<float>> audio;
  std::map<std::string, std::vector<size_t>> chunks;
  while (runner->can_step()) {
    for (StageOutput& out : runner->step()) {
      chunks[out.request_id].push_back(out.audio.size() / kSamplesPerFrame);
      audio[out.request_id].insert(audio[out.request_id].end(), out.audio.begin(), out.audio.end());
      EXPECT_EQ(out.finish_reason.has_value(), out.request_id == "a") << out.request_id;
    }
  }
  EXPECT_EQ(chunks["a"], (std::vector<size_t>{3}));
  EXPECT_EQ(chunks["b"], (std::vector<size_t>{1, 2}));  // the stage default first chunk is 1
  EXPECT_EQ(chunks.count("c"), 0u);
  EXPECT_EQ(runner->running_requests(), 1u);  // b waits for its last chunk
  runner->add_input("b", StageInputChunk{{}, {}, true});
  ASSERT_TRUE(runner->can_step());
  std::vector<StageOutput> last = runner->step();
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].audio.size(), static_cast<size_t>(kSamplesPerFrame));
  EXPECT_EQ(last[0].finish_reason, "stop");
  audio["b"].insert(audio["b"].end(), last[0].audio.begin(), last[0].audio.end());
  EXPECT_EQ(audio["a"], one_shot(a));
  EXPECT_EQ(audio["b"], one_shot(b));
  EXPECT_THROW(runner->add_input("c", StageInputChunk{{}, {payload(a)}, true}), Error);
}

TEST_F(GenerationRunnerTest, FullPayloadRequestsAndBadInputFailOnlyThatRequest) {
  auto runner = make_runner(Json::object());
  const std::vector<int32_t> codes = frames(2);
  StageRequest whole;
  whole.request_id = "whole";
  whole.inputs = {payload(std::span(codes).first(16)), payload(std::span(codes).subspan(16))};
  runner->add_request(whole);
  std::vector<int32_t> bad = frames(1);
  bad[3] = 4000;
  StageRequest broken;
  broken.request_id = "broken";
  broken.inputs = {payload(bad)};
  runner->add_request(broken);
  std::map<std::string, StageOutput> last;
  std::vector<float> audio;
  while (runner->can_step()) {
    for (StageOutput& out : runner->step()) {
      if (out.request_id == "whole") audio.insert(audio.end(), out.audio.begin(), out.audio.end());
      if (out.finish_reason || out.error) last[out.request_id] = out;
    }
  }
  ASSERT_TRUE(last["broken"].error);
  EXPECT_NE(std::string(last["broken"].error->what()).find("code 4000 of codebook 3 in frame 0"), std::string::npos)
      << last["broken"].error->what();
  EXPECT_EQ(last["whole"].finish_reason, "stop");
  EXPECT_EQ(audio, one_shot(codes));

  StageRequest partial;
  partial.request_id = "partial";
  auto bytes = std::make_shared<std::vector<uint8_t>>(10, 0);
  partial.inputs = {PayloadView(bytes->data(), bytes->size(), bytes)};
  EXPECT_THROW(runner->add_request(partial), Error);
  EXPECT_EQ(runner->running_requests(), 0u);
  StageRequest bad_option;
  bad_option.request_id = "opt";
  bad_option.additional_information = {{"initial_codec_chunk_frames", 0}};
  EXPECT_THROW(runner->add_request(bad_option), Error);
}

// A voice clone's reference codes (additional_information.ref_code) are decoded as left context:
// the last ref_code_context_frames of them (0 or absent: codec_left_context_frames, else 25), whose
// audio is dropped, so the output is the one-shot decode of those frames and the generated ones
// without the context's samples.
TEST_F(GenerationRunnerTest, KeepsTheLastRefCodeContextFramesOfTheReferenceAsLeftContext) {
  const std::vector<int32_t> reference = frames(30), codes = frames(3);
  auto decode = [&](const Json& extra) {
    auto runner = make_runner(extra);
    StageRequest request;
    request.request_id = "clone";
    request.additional_information = {{"ref_code", reference}};
    request.inputs = {payload(codes)};
    runner->add_request(request);
    std::vector<float> audio;
    while (runner->can_step()) {
      for (StageOutput& out : runner->step()) {
        EXPECT_FALSE(out.error) << out.error->what();
        audio.insert(audio.end(), out.audio.begin(), out.audio.end());
      }
    }
    return audio;
  };
  // The output after the last `context` reference frames.
  auto want = [&](int context) {
    std::vector<int32_t> all(reference.end() - static_cast<std::ptrdiff_t>(context) * 16, reference.end());
    all.insert(all.end(), codes.begin(), codes.end());
    std::vector<float> audio = one_shot(all);
    audio.erase(audio.begin(), audio.begin() + static_cast<std::ptrdiff_t>(context) * kSamplesPerFrame);
    return audio;
  };
  const std::vector<float> with4 = decode({{"ref_code_context_frames", 4}});
  ASSERT_EQ(with4.size(), codes.size() / 16 * kSamplesPerFrame);
  EXPECT_EQ(with4, want(4));
  EXPECT_EQ(decode({{"ref_code_context_frames", 4}, {"codec_left_context_frames", 72}}), with4);
  // Defaults: codec_left_context_frames (here 6), else 25; 0 is the default too; more than the
  // reference has keeps all of it.
  const std::vector<float> with6 = decode({{"codec_left_context_frames", 6}});
  EXPECT_EQ(with6, want(6));
  EXPECT_EQ(decode({{"codec_left_context_frames", 6}, {"ref_code_context_frames", 0}}), with6);
  EXPECT_EQ(decode(Json::object()), want(25));
  EXPECT_EQ(decode({{"ref_code_context_frames", 72}}), want(30));
  // The context changes the audio: the bound is not a no-op.
  EXPECT_NE(with4, with6);
  for (const Json& bad : {Json(-1), Json("4"), Json(2.5)}) {
    try {
      make_runner({{"ref_code_context_frames", bad}});
      FAIL() << "no error for " << bad.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
      EXPECT_NE(std::string(e.what()).find("stage 1 engine_args.connector_extra: ref_code_context_frames must be a "
                                           "number of frames >= 0, got " +
                                           bad.dump()),
                std::string::npos)
          << e.what();
    }
  }
}

// Requests that clone the same reference start from a copy of the codec stream kept after its
// context (ref_code_state_cache_size, default 16): their audio is the same bits as decoding the
// context again, as with the cache off, and as the one-shot decode; a bad size names the option.
TEST_F(GenerationRunnerTest, RequestsOfOneReferenceShareItsDecodedContext) {
  const std::vector<int32_t> reference = frames(12), codes = frames(3);
  auto clone_twice = [&](const Json& extra) {
    auto runner = make_runner(extra);
    std::vector<std::vector<float>> audio(2);
    for (int i = 0; i < 2; ++i) {
      StageRequest request;
      request.request_id = "clone" + std::to_string(i);
      request.additional_information = {{"ref_code", reference}};
      request.inputs = {payload(codes)};
      runner->add_request(request);
      while (runner->can_step()) {
        for (StageOutput& out : runner->step()) {
          EXPECT_FALSE(out.error) << out.error->what();
          audio[i].insert(audio[i].end(), out.audio.begin(), out.audio.end());
        }
      }
    }
    return audio;
  };
  std::vector<int32_t> all = reference;
  all.insert(all.end(), codes.begin(), codes.end());
  std::vector<float> want = one_shot(all);
  want.erase(want.begin(), want.begin() + 12 * kSamplesPerFrame);
  const std::vector<std::vector<float>> kept = clone_twice(Json::object());
  EXPECT_EQ(kept[0], want);
  EXPECT_EQ(kept[1], want);
  const std::vector<std::vector<float>> off = clone_twice({{"ref_code_state_cache_size", 0}});
  EXPECT_EQ(off[0], want);
  EXPECT_EQ(off[1], want);
  try {
    make_runner({{"ref_code_state_cache_size", -1}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ref_code_state_cache_size must be a number of references >= 0, got -1"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(GenerationRunnerTest, BadConnectorOptionsNameTheStageAndTheOption) {
  try {
    make_runner({{"codec_chunk_frames", "many"}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find("stage 1 engine_args.connector_extra: codec_chunk_frames must be a positive"),
              std::string::npos)
        << e.what();
  }
  for (const auto& [extra, want] : std::vector<std::pair<Json, std::string>>{
           {{{"decode_batch_max_size", 0}}, "decode_batch_max_size must be a positive number of requests, got 0"},
           {{{"decode_cudagraph_batch_sizes", "4"}}, "decode_cudagraph_batch_sizes must be a list of batch sizes"},
           {{{"decode_cudagraph_batch_sizes", {1, -2}}}, "decode_cudagraph_batch_sizes holds -2, not a batch size"}}) {
    try {
      make_runner(extra);
      FAIL() << "no error for " << extra.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(make_runner({{"decode_batch_max_size", 8}, {"decode_cudagraph_batch_sizes", {1, 2, 4}}}));
  try {
    make_runner(Json::object(), "tpu:0");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1 engine argument device"), std::string::npos) << e.what();
  }
  StageRunnerContext context;
  EXPECT_THROW(make_stage_runner({{"runner", "generation"}, {"stage_model", "qwen3_tts_code2wav"}}, context), Error);
  try {
    make_stage_runner({{"runner", "generation"}, {"model", checkpoint_dir->path().string()}}, context);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find("stage 0: engine_args.stage_model must name a registered stage model"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace omni::runtime
