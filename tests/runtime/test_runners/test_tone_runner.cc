#include "runtime/test_runners/test_tone_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
#include <thread>

#include "base/utf8.h"
#include "model/audio_chunking.h"
#include "runtime/engine_args.h"

namespace omni::runtime {

namespace {

constexpr double kAmplitude = 0.3;

}  // namespace

double tone_frequency(std::optional<int64_t> seed) {
  if (!seed) return 440.0;
  int64_t step = *seed % 20;
  if (step < 0) step += 20;
  return 220.0 + 20.0 * static_cast<double>(step);
}

float tone_sample(double frequency, int sample_rate, int64_t index) {
  double phase = 2 * std::numbers::pi * frequency * static_cast<double>(index) / sample_rate;
  return static_cast<float>(kAmplitude * std::sin(phase));
}

TestToneRunner::TestToneRunner(const Json& engine_args, const StageRunnerContext& context)
    : stage_id_(context.stage_id) {
  const EngineArgs args(engine_args, stage_id_);
  sample_rate_ = args.value_or("sample_rate", sample_rate_);
  samples_per_frame_ = args.value_or("samples_per_frame", samples_per_frame_);
  step_delay_ms_ = args.value_or("step_delay_ms", step_delay_ms_);
  const Json* extra = args.object("connector_extra");
  const model::AudioChunking chunking =
      model::read_audio_chunking(extra ? *extra : Json(nullptr), fmt::format("stage {} connector_extra", stage_id_));
  default_initial_frames_ = chunking.first_chunk_frames;
  chunk_frames_ = chunking.chunk_frames;
  if (sample_rate_ <= 0 || samples_per_frame_ <= 0) {
    throw_error(ErrorCode::kInvalidConfig, "stage {}: test-tone needs positive sample_rate and samples_per_frame",
                stage_id_);
  }
}

void TestToneRunner::add_request(StageRequest request) {
  const Json& info = request.additional_information;
  Running running;
  running.decoder = stage_id_ != 0;
  if (!running.decoder) {
    const Json& sampling = request.sampling_params;
    auto frames = static_cast<int64_t>(code_points(info.value("text", std::string())));
    int64_t max_tokens = sampling.value("max_tokens", int64_t{1} << 30);
    running.frames = static_cast<int>(std::min(frames, max_tokens));
    const std::optional<int64_t> seed =
        sampling.contains("seed") ? std::optional<int64_t>(sampling["seed"].get<int64_t>()) : std::nullopt;
    running.frame_token = static_cast<int32_t>(tone_frequency(seed));
  } else {
    running.initial_frames =
        model::read_first_chunk_frames(info, fmt::format("stage {} request {}", stage_id_, request.request_id))
            .value_or(default_initial_frames_);
    take_frames(running, request.prompt_token_ids);
    running.input_closed = !request.input_open;
  }
  requests_[request.request_id] = running;
}

void TestToneRunner::add_input(const std::string& request_id, StageInputChunk chunk) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  take_frames(it->second, chunk.token_ids);
  if (chunk.last) it->second.input_closed = true;
}

void TestToneRunner::take_frames(Running& running, const std::vector<int32_t>& frames) {
  if (running.frames_in == 0 && !frames.empty()) running.frequency = frames.front();
  running.frames_in += static_cast<int64_t>(frames.size());
}

void TestToneRunner::abort(const std::string& request_id) { requests_.erase(request_id); }

bool TestToneRunner::can_step() const {
  for (const auto& [id, running] : requests_) {
    if (!running.decoder || running.input_closed) return true;
    int64_t due = running.frames_decoded == 0 ? running.initial_frames : chunk_frames_;
    if (running.frames_in - running.frames_decoded >= due) return true;
  }
  return false;
}

std::optional<StageOutput> TestToneRunner::decode_ready(const std::string& id, Running& running) {
  // One chunk per step, whatever has arrived, so that chunk sizes do not depend on timing: `due`
  // frames while that many are there, the rest once the input has ended.
  int64_t ready = running.frames_in - running.frames_decoded;
  int64_t due = running.frames_decoded == 0 ? running.initial_frames : chunk_frames_;
  int64_t frames = ready >= due ? due : (running.input_closed ? ready : 0);
  if (frames == 0 && !running.input_closed) return std::nullopt;
  StageOutput output;
  output.request_id = id;
  int64_t first = running.frames_decoded * samples_per_frame_;
  output.audio.resize(static_cast<size_t>(frames * samples_per_frame_));
  for (size_t i = 0; i < output.audio.size(); ++i) {
    output.audio[i] = tone_sample(running.frequency, sample_rate_, first + static_cast<int64_t>(i));
  }
  output.audio_sample_rate = sample_rate_;
  running.frames_decoded += frames;
  if (running.input_closed && running.frames_decoded == running.frames_in) output.finish_reason = "stop";
  return output;
}

std::vector<StageOutput> TestToneRunner::step() {
  if (step_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_delay_ms_));
  std::vector<StageOutput> outputs;
  for (auto it = requests_.begin(); it != requests_.end();) {
    Running& running = it->second;
    std::optional<StageOutput> output;
    if (!running.decoder) {
      output.emplace();
      output->request_id = it->first;
      if (running.generated < running.frames) {
        output->token_ids.push_back(running.frame_token);
        ++running.generated;
      }
      if (running.generated >= running.frames) output->finish_reason = "stop";
    } else {
      output = decode_ready(it->first, running);
    }
    bool finished = output && output->finish_reason;
    if (output) outputs.push_back(std::move(*output));
    it = finished ? requests_.erase(it) : std::next(it);
  }
  return outputs;
}

}  // namespace omni::runtime
