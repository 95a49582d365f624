#include "model/audio_chunking.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "base/error.h"

namespace omni::model {

namespace {

// A positive count of `unit` from `json`[key], or nullopt when absent; `where` names the source.
std::optional<int> positive_count(const Json& json, const char* key, const std::string& where,
                                  const char* unit = "frames") {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 1'000'000) {
    throw_error(ErrorCode::kInvalidConfig, "{}: {} must be a positive number of {}, got {}", where, key, unit,
                it->dump());
  }
  return it->get<int>();
}

}  // namespace

AudioChunking read_audio_chunking(const Json& extra, const std::string& where) {
  AudioChunking chunking;
  if (extra.is_null()) return chunking;
  if (!extra.is_object()) throw_error(ErrorCode::kInvalidConfig, "{} must be an object, got {}", where, extra.dump());
  chunking.first_chunk_frames =
      positive_count(extra, "initial_codec_chunk_frames", where).value_or(chunking.first_chunk_frames);
  chunking.chunk_frames = positive_count(extra, "codec_chunk_frames", where).value_or(chunking.chunk_frames);
  const std::optional<int> left_context = positive_count(extra, "codec_left_context_frames", where);
  // vLLM-Omni: int(ref_code_context_frames or codec_left_context_frames), negative rejected.
  chunking.reference_context_frames = left_context.value_or(chunking.reference_context_frames);
  if (auto it = extra.find("ref_code_context_frames"); it != extra.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1'000'000) {
      throw_error(ErrorCode::kInvalidConfig, "{}: ref_code_context_frames must be a number of frames >= 0, got {}",
                  where, it->dump());
    }
    if (it->get<int>() > 0) chunking.reference_context_frames = it->get<int>();
  }
  if (auto it = extra.find("ref_code_state_cache_size"); it != extra.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1'000'000) {
      throw_error(ErrorCode::kInvalidConfig,
                  "{}: ref_code_state_cache_size must be a number of references >= 0, got {}", where, it->dump());
    }
    chunking.reference_states = it->get<int>();
  }
  const std::optional<int> max_batch = positive_count(extra, "decode_batch_max_size", where, "requests");
  if (auto buckets = extra.find("decode_cudagraph_batch_sizes"); buckets != extra.end() && !buckets->is_null()) {
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

std::optional<int> read_first_chunk_frames(const Json& additional_information, const std::string& where) {
  try {
    return positive_count(additional_information, "initial_codec_chunk_frames", where);
  } catch (const Error& e) {
    throw Error(ErrorCode::kInvalidArgument, e.what());
  }
}

std::vector<int32_t> last_context_frames(std::vector<int32_t> context, int frames, int codes_per_frame) {
  const size_t keep = static_cast<size_t>(frames) * static_cast<size_t>(codes_per_frame);
  if (context.size() > keep) context.erase(context.begin(), context.end() - static_cast<std::ptrdiff_t>(keep));
  return context;
}

}  // namespace omni::model
