// Frames per second of the Qwen3-TTS talker stage (the "ar" runner: talker step + 15 code
// predictor steps per frame) for a batch of requests started together, on the CPU or a GPU, for
// docs/performance.md:
//   build/bench/talker_bench --write 0.6b --model /tmp/qwen3-tts-0.6b-talker   # once, ~1.9 GB bf16
//   build/bench/talker_bench --model /tmp/qwen3-tts-0.6b-talker --frames 12
//   build/bench/talker_bench --write 1.7b --model /tmp/t17 --device cuda --requests 1 --frames 100
// The first step (the prompts' prefill and frame 0) is timed apart from the decode steps.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "base/error.h"
#include "model/qwen3_tts/random_checkpoint.h"
#include "runtime/ar_stage_runner.h"
#include "runtime/stage_runner.h"

int main(int argc, char** argv) {
  CLI::App app{"Time the Qwen3-TTS talker stage on one request"};
  std::string model, write, text = "The quick brown fox jumps over the lazy dog, and then it runs away.";
  std::string device = "cpu";
  int frames = 12, requests = 1;
  app.add_option("--model", model, "Talker checkpoint directory")->required();
  app.add_option("--write", write, "First write a random-weight checkpoint of these shapes there")
      ->check(CLI::IsMember({"0.6b", "1.7b", "demo"}));
  app.add_option("--frames", frames, "Frames to generate per request (max_new_tokens)");
  app.add_option("--requests", requests, "Requests started together (the stage's batch)")->check(CLI::Range(1, 256));
  app.add_option("--device", device, "Device of the talker stage (cpu, cuda, cuda:N)");
  app.add_option("--text", text, "Text to speak");
  CLI11_PARSE(app, argc, argv);
  try {
    namespace tts = omni::model::qwen3_tts;
    if (!write.empty()) {
      const tts::RandomTalkerShapes shapes = write == "0.6b"   ? tts::qwen3_tts_0_6b_shapes()
                                             : write == "1.7b" ? tts::qwen3_tts_1_7b_shapes()
                                                               : tts::qwen3_tts_demo_shapes();
      tts::write_random_talker_checkpoint(model, shapes, 1, omni::tensor::DType::kBF16, OMNI_QWEN3_TOKENIZER_DIR);
      std::printf("wrote %s\n", model.c_str());
    }
    using Clock = std::chrono::steady_clock;
    const auto load_start = Clock::now();
    omni::Json args = {{"runner", std::string(omni::runtime::kArRunnerKind)},
                       {"model", model},
                       {"device", device},
                       {"max_num_seqs", requests},
                       {"max_model_len", 1024}};
    auto runner = omni::runtime::make_stage_runner(args, {});
    const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
    for (int r = 0; r < requests; ++r) {
      omni::runtime::StageRequest request;
      request.request_id = "bench-" + std::to_string(r);
      request.additional_information = {
          {"text", text}, {"voice", "vivian"}, {"max_new_tokens", frames}, {"seed", 1 + r}};
      // EOS is kept out so that every run times the same number of frames.
      request.sampling_params = {{"ignore_eos", true}};
      runner->add_request(request);
    }
    const auto start = Clock::now();
    runner->step();
    const auto first = Clock::now();
    int decoded = 0, steps = 0;
    while (runner->running_requests() > 0) {
      for (const auto& out : runner->step()) decoded += out.payload ? 1 : 0;
      ++steps;
    }
    const auto end = Clock::now();
    const double first_s = std::chrono::duration<double>(first - start).count();
    const double decode_s = std::chrono::duration<double>(end - first).count();
    std::printf(
        "load %.2f s; first frame (prefill + frame 0 of %d requests) %.3f s; %d more frames in %d steps, %.3f s: "
        "%.3f ms per step, %.2f frames/s (real time is 12.5 frames/s per request)\n",
        load_s, requests, first_s, decoded, steps, decode_s, 1e3 * decode_s / std::max(steps, 1), decoded / decode_s);
  } catch (const omni::Error& e) {
    std::fprintf(stderr, "talker_bench: %s\n", e.what());
    return e.exit_code();
  }
  return 0;
}
