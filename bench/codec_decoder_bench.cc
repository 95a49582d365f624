// CPU speed of the Qwen3-TTS codec decoder (docs/performance.md): writes a random-weight speech
// tokenizer with the released dims (or --small), then decodes the same random frames one-shot and
// as a stream of chunks (a first chunk, then fixed-size ones), reporting frames per second and
// the real-time factor (audio seconds per wall second; 12.5 frames = 1 s of audio).
//   build/bench/codec_decoder_bench [--frames 50] [--first-chunk 1] [--chunk 25] [--repeat 2] [--small]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <vector>

#include "base/error.h"
#include "model/qwen3_tts/codec_decoder.h"
#include "model/qwen3_tts/random_codec.h"
#include "tensor/cpu/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace qt = omni::model::qwen3_tts;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Decode speed of the Qwen3-TTS codec decoder on the CPU"};
  int frames = 50, first_chunk = 1, chunk = 25, repeat = 2;
  bool small = false;
  std::string dir = (std::filesystem::temp_directory_path() / "omnistage-codec-bench").string();
  app.add_option("--frames", frames, "Frames to decode per run")->check(CLI::PositiveNumber);
  app.add_option("--first-chunk", first_chunk, "Frames in the stream's first chunk")->check(CLI::PositiveNumber);
  app.add_option("--chunk", chunk, "Frames in each later chunk")->check(CLI::PositiveNumber);
  app.add_option("--repeat", repeat, "Runs of each mode (the best is reported)")->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "Where to write the random checkpoint");
  app.add_flag("--small", small, "The small demo dims instead of the released ones");
  CLI11_PARSE(app, argc, argv);
  try {
    const qt::CodecDecoderConfig shapes = small ? qt::small_codec_shapes() : qt::CodecDecoderConfig{};
    qt::write_random_codec_checkpoint(dir, shapes, 1);
    auto decoder = qt::CodecDecoder::load(dir);
    std::mt19937 rng(1);
    std::vector<int32_t> codes(static_cast<size_t>(frames) * decoder->codes_per_frame());
    for (int32_t& c : codes) c = static_cast<int32_t>(rng() % shapes.codebook_size);
    std::printf("codec decoder (%s dims: hidden %d, latent %d, decoder_dim %d, %d layers), %d frames, %d cpu threads\n",
                small ? "small" : "released", shapes.hidden_size, shapes.latent_dim, shapes.decoder_dim,
                shapes.num_hidden_layers, frames, omni::tensor::cpu::thread_count());
    double best_whole = 1e30, best_stream = 1e30, first_packet = 1e30;
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
      if (audio != whole) throw omni::Error(omni::ErrorCode::kInternal, "streamed audio differs from one-shot audio");
    }
    const double audio_seconds = frames / 12.5;
    std::printf("one-shot: %.3f s, %.1f frames/s, real-time factor %.2f\n", best_whole, frames / best_whole,
                audio_seconds / best_whole);
    std::printf("stream (%d then %d): %.3f s, %.1f frames/s, real-time factor %.2f, first chunk %.1f ms\n", first_chunk,
                chunk, best_stream, frames / best_stream, audio_seconds / best_stream, 1e3 * first_packet);
    std::filesystem::remove_all(dir);
  } catch (const omni::Error& e) {
    std::fprintf(stderr, "codec_decoder_bench: %s\n", e.what());
    return e.exit_code();
  }
  return 0;
}
