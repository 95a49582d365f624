// TEST ONLY: the "test-tone" stage runner, a stand-in for a TTS pipeline's two stages in tests of
// the speech API, the routing of additional_information and the connector's chunking options
// through real stage processes. It loads no model and must not be used to serve.
//
// As stage 0 ("talker" role) it emits one token per step, one per codec frame: the tone's
// frequency in Hz, tone_frequency() of the sampling seed; the utterance has one frame per character
// (Unicode code point) of additional_information.text, at most the sampling max_tokens, and
// finishes with "stop".
//
// As a later stage ("code2wav" role, fed by stage 0 in full-payload or async_chunk mode) it
// turns the frames (the tokens it receives) into audio of the frequency the first one names:
// frame k is samples [k*spf, (k+1)*spf) of tone_sample(), spf = samples_per_frame. As code2wav does, it emits audio
// once `initial` frames have arrived, then every `chunk` frames, and the rest when the input ends, one chunk per step
// (so the chunk sizes are exactly initial, chunk, chunk, …, rest whatever the timing): initial =
// additional_information.initial_codec_chunk_frames, else engine_args.connector_extra's, else 1;
// chunk = connector_extra.codec_chunk_frames, else 25.
//
// engine_args: runner "test-tone"; sample_rate (default 24000); samples_per_frame (default 1920);
// connector_extra (pipeline_from_config.h); step_delay_ms (default 0).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "runtime/stage_runner.h"

namespace omni::runtime {

inline constexpr std::string_view kTestToneRunnerKind = "test-tone";

// The tone of a request: 440 Hz without a seed, else 220 + 20 * (seed mod 20) Hz, amplitude 0.3.
double tone_frequency(std::optional<int64_t> seed);
// Sample `index` of the utterance (from its first sample), computed in double precision so that
// every process and every chunking gives the same float.
float tone_sample(double frequency, int sample_rate, int64_t index);

class TestToneRunner : public StageRunner {
 public:
  // Throws omni::Error(kInvalidConfig) naming the stage and the mistyped field.
  TestToneRunner(const Json& engine_args, const StageRunnerContext& context);

  void add_request(StageRequest request) override;
  void add_input(const std::string& request_id, StageInputChunk chunk) override;
  void abort(const std::string& request_id) override;
  bool can_step() const override;
  size_t running_requests() const override { return requests_.size(); }
  std::vector<StageOutput> step() override;

 private:
  struct Running {
    bool decoder = false;  // the code2wav role
    // talker role
    int frames = 0;
    int generated = 0;
    int32_t frame_token = 0;  // the tone's frequency
    // code2wav role
    double frequency = 440;
    int initial_frames = 1;
    int64_t frames_in = 0;       // frames received so far
    int64_t frames_decoded = 0;  // frames turned into audio so far
    bool input_closed = true;
  };

  std::optional<StageOutput> decode_ready(const std::string& id, Running& running);
  static void take_frames(Running& running, const std::vector<int32_t>& frames);

  int stage_id_;
  int sample_rate_ = 24000;
  int samples_per_frame_ = 1920;
  int default_initial_frames_ = 1;
  int chunk_frames_ = 25;
  int step_delay_ms_ = 0;
  std::map<std::string, Running> requests_;
};

}  // namespace omni::runtime
