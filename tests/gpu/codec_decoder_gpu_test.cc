// The Qwen3-TTS codec decoder on CUDA (float32) against the CPU backend, on random-weight codecs
// (model/qwen3_tts/random_codec.h): streamed chunk by chunk on the GPU against the CPU's one-shot
// decode, chunked against one-shot on the GPU, and streams decoded in one batch against each
// alone, and the code2wav stage runner serving several requests on CUDA. cuBLASLt sums in another order than OpenBLAS
// (and by the shape of each product), so the GPU agrees within float32 rounding through ~40 layers, not bit for bit:
// 1e-4 absolute on audio in
// [-1, 1]. Every test skips when no GPU is visible (ctest label gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/qwen3_tts/codec_decoder.h"
#include "model/qwen3_tts/codec_frames.h"
#include "model/qwen3_tts/random_codec.h"
#include "runtime/stage_runner.h"
#include "support/temp_dir.h"
#include "tensor/backend.h"

namespace omni::model::qwen3_tts {
namespace {

constexpr double kTolerance = 1e-4;

#define SKIP_WITHOUT_GPU()                                                                                           \
  if (tensor::compiled_backends().find("cuda") == std::string::npos) GTEST_SKIP() << "no CUDA backend in the build"; \
  if (tensor::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process"

std::vector<int32_t> random_codes(int frames, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> codes(static_cast<size_t>(frames) * 16);
  for (int32_t& c : codes) c = static_cast<int32_t>(rng() % 2048);
  return codes;
}

// Decodes `codes` through one stream in chunks of the given frame counts (the last one repeats).
std::vector<float> decode_in_chunks(const CodecDecoder& decoder, const std::vector<int32_t>& codes,
                                    const std::vector<int>& chunks) {
  auto stream = decoder.open_stream();
  std::vector<float> audio;
  size_t at = 0;
  for (size_t i = 0; at < codes.size(); ++i) {
    const size_t n = std::min(codes.size() - at, static_cast<size_t>(chunks[std::min(i, chunks.size() - 1)]) * 16);
    decoder.decode(*stream, std::span(codes).subspan(at, n), audio);
    at += n;
  }
  return audio;
}

double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(double{a[i]} - b[i]));
  return worst;
}

double rms(const std::vector<float>& a) {
  double energy = 0.0;
  for (float s : a) energy += double{s} * s;
  return std::sqrt(energy / static_cast<double>(std::max<size_t>(a.size(), 1)));
}

struct Case {
  const char* name;
  CodecDecoderConfig shapes;
  int frames;  // the small dims cross the 72-frame window; the released ones decode slowly on the CPU
};

TEST(CodecDecoderGpuTest, StreamingOnCudaMatchesTheCpuOneShotDecode) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : {Case{"small", small_codec_shapes(), 100}, Case{"released", CodecDecoderConfig{}, 30}}) {
    SCOPED_TRACE(c.name);
    testing::TempDir dir;
    write_random_codec_checkpoint(dir.path(), c.shapes, 5);
    auto cpu = CodecDecoder::load(dir.path());
    auto gpu = CodecDecoder::load(dir.path(), tensor::Device::cuda(0));
    EXPECT_EQ(gpu->device(), tensor::Device::cuda(0));
    const std::vector<int32_t> codes = random_codes(c.frames, 11);
    const std::vector<float> want = cpu->decode(codes);
    ASSERT_EQ(want.size(), static_cast<size_t>(c.frames) * 1920);
    ASSERT_GT(rms(want), 0.01);  // audible, so that agreement means something
    const std::vector<float> streamed = decode_in_chunks(*gpu, codes, {1, 25});
    const std::vector<float> whole = gpu->decode(codes);
    const double vs_cpu = max_abs_difference(streamed, want), chunked_vs_whole = max_abs_difference(streamed, whole);
    std::printf("[codec gpu] %s dims, %d frames: cuda stream vs cpu one-shot %.3g, cuda stream vs cuda one-shot %.3g\n",
                c.name, c.frames, vs_cpu, chunked_vs_whole);
    EXPECT_LT(vs_cpu, kTolerance);
    EXPECT_LT(chunked_vs_whole, kTolerance);
    EXPECT_LT(max_abs_difference(decode_in_chunks(*gpu, codes, {3, 7, 1}), want), kTolerance);
  }
}

// A copied stream (copy_stream: a voice clone's kept reference context) continues exactly as the
// stream it was copied from: the same samples bit for bit on the device, and the original is not
// moved by decoding its copy.
TEST(CodecDecoderGpuTest, ACopiedStreamContinuesAsItsOriginal) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  write_random_codec_checkpoint(dir.path(), small_codec_shapes(), 13);
  auto gpu = CodecDecoder::load(dir.path(), tensor::Device::cuda(0));
  const std::vector<int32_t> context = random_codes(80, 4), rest = random_codes(30, 5);
  auto original = gpu->open_stream();
  std::vector<float> dropped;
  gpu->decode(*original, context, dropped);
  auto copy = gpu->copy_stream(*original);
  ASSERT_EQ(copy->frames(), 80);
  std::vector<float> from_copy, from_original;
  gpu->decode(*copy, rest, from_copy);
  gpu->decode(*original, rest, from_original);
  ASSERT_EQ(from_copy.size(), 30u * 1920u);
  EXPECT_EQ(from_copy, from_original);
}

TEST(CodecDecoderGpuTest, ThreeBatchedStreamsEachMatchTheirLoneDecode) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  write_random_codec_checkpoint(dir.path(), small_codec_shapes(), 9);
  auto gpu = CodecDecoder::load(dir.path(), tensor::Device::cuda(0));
  const std::vector<std::vector<int32_t>> codes = {random_codes(90, 1), random_codes(40, 2), random_codes(77, 3)};
  const std::vector<std::vector<int>> chunks = {{1, 25}, {4, 9}, {25}};
  std::vector<std::unique_ptr<AudioDecoderStream>> streams;
  for (size_t s = 0; s < 3; ++s) streams.push_back(gpu->open_stream());
  std::vector<std::vector<float>> batched(3);
  std::vector<size_t> at(3, 0);
  for (size_t step = 0; at[0] < codes[0].size() || at[1] < codes[1].size() || at[2] < codes[2].size(); ++step) {
    std::vector<AudioDecodeItem> items;
    for (size_t s = 0; s < 3; ++s) {
      const int frames = chunks[s][std::min(step, chunks[s].size() - 1)];
      const size_t n = std::min(codes[s].size() - at[s], static_cast<size_t>(frames) * 16);
      items.push_back({streams[s].get(), std::span(codes[s]).subspan(at[s], n), &batched[s]});
      at[s] += n;
    }
    gpu->decode_batch(items);
  }
  for (size_t s = 0; s < 3; ++s) {
    SCOPED_TRACE("stream " + std::to_string(s));
    const std::vector<float> alone = decode_in_chunks(*gpu, codes[s], chunks[s]);
    const double difference = max_abs_difference(batched[s], alone);
    std::printf("[codec gpu] batched stream %zu vs alone: %.3g\n", s, difference);
    EXPECT_LT(difference, kTolerance);
    EXPECT_EQ(streams[s]->frames(), static_cast<int64_t>(codes[s].size() / 16));
  }
}

// The stage as the server runs it: requests streamed in one-frame payloads, their ready chunks
// decoded together (decode_batch_max_size 3), on the stage's GPU.
TEST(Code2WavRunnerGpuTest, ServesStreamedRequestsInBatchesOnCuda) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  write_random_codec_checkpoint(dir.path() / "speech_tokenizer", small_codec_shapes(), 13);
  runtime::StageRunnerContext context;
  context.stage_id = 1;
  auto runner = runtime::make_stage_runner(
      {{"runner", "generation"},
       {"stage_model", "qwen3_tts_code2wav"},
       {"model", dir.path().string()},
       {"device", "cuda"},
       {"connector_extra",
        {{"initial_codec_chunk_frames", 1}, {"codec_chunk_frames", 4}, {"decode_batch_max_size", 3}}}},
      context);
  const std::map<std::string, std::vector<int32_t>> codes = {
      {"a", random_codes(17, 21)}, {"b", random_codes(9, 22)}, {"c", random_codes(12, 23)}, {"d", random_codes(5, 24)}};
  for (const auto& [id, unused] : codes) {
    runtime::StageRequest request;
    request.request_id = id;
    request.input_open = true;
    runner->add_request(request);
  }
  std::map<std::string, std::vector<float>> audio;
  std::map<std::string, bool> finished;
  for (size_t frame = 0; frame < 17; ++frame) {
    for (const auto& [id, c] : codes) {
      const size_t frames = c.size() / 16;
      if (frame >= frames) continue;
      auto bytes =
          std::make_shared<std::vector<uint8_t>>(encode_codec_frames(std::span(c).subspan(frame * 16, 16), 16));
      runner->add_input(id, runtime::StageInputChunk{
                                {}, {runtime::PayloadView(bytes->data(), bytes->size(), bytes)}, frame + 1 == frames});
    }
    while (runner->can_step()) {
      for (runtime::StageOutput& out : runner->step()) {
        EXPECT_FALSE(out.error) << out.request_id;
        audio[out.request_id].insert(audio[out.request_id].end(), out.audio.begin(), out.audio.end());
        if (out.finish_reason) finished[out.request_id] = true;
      }
    }
  }
  EXPECT_EQ(runner->running_requests(), 0u);
  auto cpu = CodecDecoder::load(dir.path() / "speech_tokenizer");
  for (const auto& [id, c] : codes) {
    SCOPED_TRACE("request " + id);
    EXPECT_TRUE(finished[id]);
    const double difference = max_abs_difference(audio[id], cpu->decode(c));
    std::printf("[codec gpu] code2wav runner on cuda, request %s vs cpu one-shot: %.3g\n", id.c_str(), difference);
    EXPECT_LT(difference, kTolerance);
  }
}

}  // namespace
}  // namespace omni::model::qwen3_tts
