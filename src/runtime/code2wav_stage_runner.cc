#include "runtime/code2wav_stage_runner.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/generation_engine.h"
#include "model/qwen3_tts/codec_decoder.h"
#include "model/qwen3_tts/codec_frames.h"
#include "tensor/backend.h"

namespace omni::runtime {

namespace {

// A positive count of `unit` from `json`[key], or nullopt when absent; `where` names the source.
std::optional<int> frame_count(const Json& json, const char* key, const std::string& where,
                               const char* unit = "frames") {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 1'000'000) {
    throw_error(ErrorCode::kInvalidConfig, "{}: {} must be a positive number of {}, got {}", where, key, unit,
                it->dump());
  }
  return it->get<int>();
}

// The chunk sizes from engine_args.connector_extra (pipeline_from_config.h), else the defaults.
engine::AudioChunking chunking_from_engine_args(const Json& engine_args, int stage_id) {
  engine::AudioChunking chunking;
  auto extra = engine_args.find("connector_extra");
  if (extra == engine_args.end() || extra->is_null()) return chunking;
  const std::string where = "stage " + std::to_string(stage_id) + " engine_args.connector_extra";
  if (!extra->is_object()) throw_error(ErrorCode::kInvalidConfig, "{} must be an object, got {}", where, extra->dump());
  chunking.first_chunk_frames =
      frame_count(*extra, "initial_codec_chunk_frames", where).value_or(chunking.first_chunk_frames);
  chunking.chunk_frames = frame_count(*extra, "codec_chunk_frames", where).value_or(chunking.chunk_frames);
  frame_count(*extra, "codec_left_context_frames", where);  // checked, not needed (see the header)
  const std::optional<int> max_batch = frame_count(*extra, "decode_batch_max_size", where, "requests");
  if (auto buckets = extra->find("decode_cudagraph_batch_sizes"); buckets != extra->end() && !buckets->is_null()) {
    if (!buckets->is_array() || buckets->empty()) {
      throw_error(ErrorCode::kInvalidConfig, "{}: decode_cudagraph_batch_sizes must be a list of batch sizes, got {}",
                  where, buckets->dump());
    }
    for (const Json& size : *buckets) {
      if (!size.is_number_integer() || size.get<int64_t>() < 1 || size.get<int64_t>() > 1'000'000) {
        throw_error(ErrorCode::kInvalidConfig, "{}: decode_cudagraph_batch_sizes holds {}, not a batch size", where,
                    size.dump());
      }
      chunking.batch_sizes.push_back(size.get<int>());
    }
  }
  // Without decode_batch_max_size the largest bucket is the maximum, as on vLLM-Omni's graph path.
  const int largest_bucket =
      chunking.batch_sizes.empty() ? 0 : *std::max_element(chunking.batch_sizes.begin(), chunking.batch_sizes.end());
  chunking.max_batch = max_batch.value_or(largest_bucket > 0 ? largest_bucket : chunking.max_batch);
  return chunking;
}

class Code2WavStageRunner final : public StageRunner {
 public:
  Code2WavStageRunner(const Json& engine_args, const StageRunnerContext& context) : stage_id_(context.stage_id) {
    auto model = engine_args.find("model");
    if (model == engine_args.end() || !model->is_string() || model->get<std::string>().empty()) {
      throw_error(ErrorCode::kInvalidConfig, "stage {}: engine_args.model must name the checkpoint directory",
                  context.stage_id);
    }
    // The stage process sees only its own devices (CUDA_VISIBLE_DEVICES), so "cuda" is its first.
    auto device_arg = engine_args.find("device");
    std::string device_text = "auto";
    if (device_arg != engine_args.end() && !device_arg->is_null()) {
      if (!device_arg->is_string()) {
        throw_error(ErrorCode::kInvalidConfig, "stage {}: engine_args.device must be a string, got {}",
                    context.stage_id, device_arg->dump());
      }
      device_text = device_arg->get<std::string>();
    }
    const tensor::Device device =
        tensor::resolve_device(device_text, fmt::format("stage {} engine argument device", context.stage_id));
    decoder_ = model::qwen3_tts::CodecDecoder::load(
        std::filesystem::path(model->get<std::string>()) / "speech_tokenizer", device);
    engine_ =
        std::make_unique<engine::GenerationEngine>(*decoder_, chunking_from_engine_args(engine_args, context.stage_id));
  }

  ~Code2WavStageRunner() override {
    // The engine borrows the decoder, so it goes first.
    engine_.reset();
  }

  void add_request(StageRequest request) override {
    const std::string where =
        "stage " + std::to_string(stage_id_) + " request " + request.request_id + " additional_information";
    std::optional<int> first_chunk;
    try {
      first_chunk = frame_count(request.additional_information, "initial_codec_chunk_frames", where);
    } catch (const Error& e) {
      throw Error(ErrorCode::kInvalidArgument, e.what());
    }
    // Frames are decoded before the request is queued, so a bad payload fails the request here.
    std::vector<int32_t> codes = frames_of(request.inputs);
    engine_->add_request(request.request_id, first_chunk);
    try {
      engine_->add_frames(request.request_id, codes, /*last=*/!request.input_open);
    } catch (...) {
      engine_->abort(request.request_id);
      throw;
    }
  }

  void add_input(const std::string& request_id, StageInputChunk chunk) override {
    engine_->add_frames(request_id, frames_of(chunk.payloads), chunk.last);
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
      stage_output.audio_sample_rate = decoder_->sample_rate();
      if (out.error) {
        stage_output.error = Error(out.error->code(), fmt::format("stage {}: {}", stage_id_, out.error->what()));
      }
      if (out.finished) stage_output.finish_reason = "stop";
      outputs.push_back(std::move(stage_output));
    }
    return outputs;
  }

 private:
  std::vector<int32_t> frames_of(const std::vector<PayloadView>& payloads) const {
    std::vector<int32_t> codes;
    for (const PayloadView& payload : payloads) {
      std::vector<int32_t> frames = model::qwen3_tts::decode_codec_frames(payload.bytes(), decoder_->codes_per_frame());
      codes.insert(codes.end(), frames.begin(), frames.end());
    }
    return codes;
  }

  int stage_id_;
  std::unique_ptr<model::qwen3_tts::CodecDecoder> decoder_;
  std::unique_ptr<engine::GenerationEngine> engine_;
};

}  // namespace

std::unique_ptr<StageRunner> make_code2wav_stage_runner(const Json& engine_args, const StageRunnerContext& context) {
  return std::make_unique<Code2WavStageRunner>(engine_args, context);
}

}  // namespace omni::runtime
