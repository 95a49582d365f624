// Speed of the Qwen3-TTS codec decoder (docs/performance.md): writes a random-weight speech
// tokenizer with the released dims (or --small), then on --device decodes the same random frames
// one-shot and as a stream of chunks (a first chunk, then fixed-size ones), reporting frames per
// second and the real-time factor (audio seconds per wall second; 12.5 frames = 1 s of audio).
// --batch B1,B2,... then decodes B streams at once (decode_batch, one call per chunk for all of
// them, as the code2wav stage batches its requests), --frames frames each in a first chunk of
// --first-chunk and then chunks of --chunk, after one untimed warm-up round, and reports frames per
// second over all streams and the time of the first call (the first packets of B requests).
//   build/bench/codec_decoder_bench [--frames 50] [--first-chunk 1] [--chunk 25] [--repeat 2] [--small]
//                                   [--device cpu|cuda:0|auto] [--batch 1,8,64]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "base/error.h"
#include "model/qwen3_tts/codec_decoder.h"
#include "model/qwen3_tts/random_codec.h"
#include "tensor/backend.h"
#include "tensor/cpu/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace qt = omni::model::qwen3_tts;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<int32_t> random_codes(int frames, int width, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> codes(static_cast<size_t>(frames) * width);
  for (int32_t& c : codes) c = static_cast<int32_t>(rng() % vocab);
  return codes;
}

struct BatchTiming {
  double total = 0.0, first_call = 0.0;
  int calls = 0;
};

// `batch` streams of `frames` frames each, decoded in lockstep: one decode_batch call per chunk.
BatchTiming decode_streams_together(const qt::CodecDecoder& decoder, int batch, int frames, int first_chunk, int chunk,
                                    int vocab) {
  const size_t width = static_cast<size_t>(decoder.codes_per_frame());
  std::vector<std::vector<int32_t>> codes;
  std::vector<std::unique_ptr<omni::model::AudioDecoderStream>> streams;
  std::vector<std::vector<float>> audio(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    codes.push_back(random_codes(frames, static_cast<int>(width), vocab, 100 + b));
    streams.push_back(decoder.open_stream());
  }
  BatchTiming timing;
  const auto start = Clock::now();
  size_t at = 0;
  for (int n = first_chunk; at < codes[0].size(); n = chunk) {
    const size_t take = std::min(codes[0].size() - at, static_cast<size_t>(n) * width);
    std::vector<omni::model::AudioDecodeItem> items;
    items.reserve(static_cast<size_t>(batch));
    for (int b = 0; b < batch; ++b) {
      items.push_back({streams[b].get(), std::span(codes[b]).subspan(at, take), &audio[b]});
    }
    decoder.decode_batch(items);
    if (at == 0) timing.first_call = seconds_since(start);
    ++timing.calls;
    at += take;
  }
  timing.total = seconds_since(start);
  return timing;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Decode speed of the Qwen3-TTS codec decoder"};
  int frames = 50, first_chunk = 1, chunk = 25, repeat = 2;
  bool small = false;
  std::string device_text = "cpu";
  std::vector<int> batches;
  std::string dir = (std::filesystem::temp_directory_path() / "omnistage-codec-bench").string();
  app.add_option("--frames", frames, "Frames to decode per run (per stream with --batch)")->check(CLI::PositiveNumber);
  app.add_option("--first-chunk", first_chunk, "Frames in the stream's first chunk")->check(CLI::PositiveNumber);
  app.add_option("--chunk", chunk, "Frames in each later chunk (every chunk with --batch)")->check(CLI::PositiveNumber);
  app.add_option("--repeat", repeat, "Runs of each mode (the best is reported)")->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "Where to write the random checkpoint");
  app.add_option("--device", device_text, "cpu, cuda:N or auto");
  app.add_option("--batch", batches, "Streams decoded together, one figure per size (e.g. 1,8,64)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_flag("--small", small, "The small demo dims instead of the released ones");
  CLI11_PARSE(app, argc, argv);
  try {
    const omni::tensor::Device device = omni::tensor::resolve_device(device_text, "--device");
    const qt::CodecDecoderConfig shapes = small ? qt::small_codec_shapes() : qt::CodecDecoderConfig{};
    qt::write_random_codec_checkpoint(dir, shapes, 1);
    auto decoder = qt::CodecDecoder::load(dir, device);
    const std::vector<int32_t> codes = random_codes(frames, decoder->codes_per_frame(), shapes.codebook_size, 1);
    std::printf(
        "codec decoder (%s dims: hidden %d, latent %d, decoder_dim %d, %d layers) on %s, %d frames, %d cpu threads\n",
        small ? "small" : "released", shapes.hidden_size, shapes.latent_dim, shapes.decoder_dim,
        shapes.num_hidden_layers, omni::tensor::device_name(device).c_str(), frames, omni::tensor::cpu::thread_count());
    if (device != omni::tensor::Device::cpu()) decoder->decode(std::span(codes).first(16));  // warm-up
    double best_whole = 1e30, best_stream = 1e30, first_packet = 1e30, difference = 0.0;
    for (int r = 0; r < repeat; ++r) {
      auto start = Clock::now();
      const std::vector<float> whole = decoder->decode(codes);
      best_whole = std::min(best_whole, seconds_since(start));

      start = Clock::now();
      auto stream = decoder->open_stream();
      std::vector<float> audio;
      const size_t width = static_cast<size_t>(decoder->codes_per_frame());
      size_t at = 0;
      for (int n = first_chunk; at < codes.size(); n = chunk) {
        const size_t take = std::min(codes.size() - at, static_cast<size_t>(n) * width);
        decoder->decode(*stream, std::span(codes).subspan(at, take), audio);
        if (at == 0) first_packet = std::min(first_packet, seconds_since(start));
        at += take;
      }
      best_stream = std::min(best_stream, seconds_since(start));
      // Bit for bit on the CPU; within float32 rounding on a GPU (codec_decoder.h).
      if (device == omni::tensor::Device::cpu() && audio != whole) {
        throw omni::Error(omni::ErrorCode::kInternal, "streamed audio differs from one-shot audio");
      }
      for (size_t i = 0; i < audio.size() && i < whole.size(); ++i) {
        difference = std::max(difference, static_cast<double>(std::abs(audio[i] - whole[i])));
      }
    }
    const double audio_seconds = frames / 12.5;
    std::printf("one-shot: %.3f s, %.1f frames/s, real-time factor %.2f\n", best_whole, frames / best_whole,
                audio_seconds / best_whole);
    std::printf(
        "stream (%d then %d): %.3f s, %.1f frames/s, real-time factor %.2f, first chunk %.1f ms, max |stream - "
        "one-shot| %.2g\n",
        first_chunk, chunk, best_stream, frames / best_stream, audio_seconds / best_stream, 1e3 * first_packet,
        difference);
    for (const int batch : batches) {
      decode_streams_together(*decoder, batch, std::min(frames, chunk), first_chunk, chunk,
                              shapes.codebook_size);  // warm-up
      BatchTiming best{1e30, 1e30, 0};
      for (int r = 0; r < repeat; ++r) {
        const BatchTiming t =
            decode_streams_together(*decoder, batch, frames, first_chunk, chunk, shapes.codebook_size);
        if (t.total < best.total) best.total = t.total, best.calls = t.calls;
        best.first_call = std::min(best.first_call, t.first_call);
      }
      const double total_frames = static_cast<double>(batch) * frames;
      std::printf(
          "batch %d (%d then %d): %.3f s, %.1f frames/s, %.1f audio seconds per second, first call %.1f ms, %.1f ms "
          "per later call\n",
          batch, first_chunk, chunk, best.total, total_frames / best.total, total_frames / 12.5 / best.total,
          1e3 * best.first_call, 1e3 * (best.total - best.first_call) / std::max(1, best.calls - 1));
    }
    std::filesystem::remove_all(dir);
  } catch (const omni::Error& e) {
    std::fprintf(stderr, "codec_decoder_bench: %s\n", e.what());
    return e.exit_code();
  }
  return 0;
}
