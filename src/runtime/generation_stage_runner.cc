#include "runtime/generation_stage_runner.h"

#include <string>
#include <utility>
#include <vector>

#include "engine/generation_engine.h"
#include "model/audio_chunking.h"
#include "model/stage_model_registry.h"
#include "runtime/engine_args.h"

namespace omni::runtime {

namespace {

class GenerationStageRunner final : public StageRunner {
 public:
  GenerationStageRunner(const Json& engine_args, const StageRunnerContext& context) : stage_id_(context.stage_id) {
    const EngineArgs args(engine_args, context.stage_id);
    const Json* extra = args.object("connector_extra");
    const engine::AudioChunking chunking = model::read_audio_chunking(
        extra ? *extra : Json(nullptr), fmt::format("stage {} engine_args.connector_extra", stage_id_));
    model_ = model::builtin_stage_models().create_generation(args.stage_model(), args.stage_model_args());
    engine_ = std::make_unique<engine::GenerationEngine>(model_->decoder(), chunking);
  }

  ~GenerationStageRunner() override {
    // The engine borrows the decoder, so it goes first.
    engine_.reset();
  }

  void add_request(StageRequest request) override {
    const std::optional<int> first_chunk = model::read_first_chunk_frames(
        request.additional_information,
        fmt::format("stage {} request {} additional_information", stage_id_, request.request_id));
    // Payloads are read before the request is queued, so a bad payload fails the request here.
    std::vector<int32_t> codes = codes_of(request.inputs);
    // A voice clone's reference: its last ref_code_context_frames frames are the left context.
    const std::vector<int32_t> context =
        model::last_context_frames(model_->context_codes(request.additional_information),
                                   engine_->chunking().reference_context_frames, model_->decoder().codes_per_frame());
    engine_->add_request(request.request_id, first_chunk, context);
    try {
      engine_->add_frames(request.request_id, codes, /*last=*/!request.input_open);
    } catch (...) {
      engine_->abort(request.request_id);
      throw;
    }
  }

  void add_input(const std::string& request_id, StageInputChunk chunk) override {
    engine_->add_frames(request_id, codes_of(chunk.payloads), chunk.last);
  }

  void abort(const std::string& request_id) override { engine_->abort(request_id); }

  size_t running_requests() const override { return engine_->num_requests(); }

  bool can_step() const override { return engine_->has_ready_work(); }

  std::vector<StageOutput> step() override {
    std::vector<StageOutput> outputs;
    for (engine::AudioOutput& out : engine_->step()) {
      StageOutput stage_output;
      stage_output.request_id = std::move(out.request_id);
      stage_output.audio = std::move(out.audio);
      stage_output.audio_sample_rate = model_->decoder().sample_rate();
      if (out.error) {
        stage_output.error = Error(out.error->code(), fmt::format("stage {}: {}", stage_id_, out.error->what()));
      }
      if (out.finished) stage_output.finish_reason = "stop";
      outputs.push_back(std::move(stage_output));
    }
    return outputs;
  }

 private:
  std::vector<int32_t> codes_of(const std::vector<PayloadView>& payloads) const {
    std::vector<int32_t> codes;
    for (const PayloadView& payload : payloads) {
      std::vector<int32_t> more = model_->payload_codes(payload.bytes());
      codes.insert(codes.end(), more.begin(), more.end());
    }
    return codes;
  }

  int stage_id_;
  std::unique_ptr<model::StreamingDecoderStage> model_;
  std::unique_ptr<engine::GenerationEngine> engine_;
};

}  // namespace

std::unique_ptr<StageRunner> make_generation_stage_runner(const Json& engine_args, const StageRunnerContext& context) {
  return std::make_unique<GenerationStageRunner>(engine_args, context);
}

}  // namespace omni::runtime
