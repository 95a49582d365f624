// How a streaming audio decoder's input is cut into decoder calls (engine::GenerationEngine), and
// the reader of the options that set it: vLLM-Omni's names, which a deploy YAML puts in the
// `extra` of the connector that feeds the decoding stage (a stage's engine_args.connector_extra,
// runtime/pipeline_from_config.h):
//   initial_codec_chunk_frames (default 1): the first chunk, for a quick first packet; a request's
//     additional_information.initial_codec_chunk_frames overrides it (the speech API's field);
//   codec_chunk_frames (default 25): every later chunk;
//   codec_left_context_frames: vLLM-Omni re-decodes that many earlier frames per chunk because
//     its decoder restarts, ours keeps each stream's state (audio_decoder.h), so every chunk is
//     exact without re-decoding; here it is only the default of ref_code_context_frames;
//   ref_code_context_frames (default: codec_left_context_frames, else 25, as vLLM-Omni): how many
//     frames of a voice clone's reference codes (the request's left context,
//     StreamingDecoderStage::context_codes) the decoder sees before the generated ones: the last
//     that many; 0 means the default, as in vLLM-Omni, whose `int(x or left_context)` reads it so;
//   ref_code_state_cache_size (ours, default 16; 0 turns it off): how many voice clones' reference
//     contexts the engine keeps the decoded stream of, so that a request cloning the same voice
//     again starts from a copy instead of decoding its reference frames (a few MB each on the
//     released codec: the decoder's histories and its attention keys and values);
//   decode_batch_max_size (default 4, as the bundled deploy YAML): the most streams whose ready
//     chunks one decoder call takes;
//   decode_cudagraph_batch_sizes: vLLM-Omni's captured batch buckets. A decoder whose chunks vary
//     in rows runs without CUDA graphs, so the largest bucket only bounds the batch, as
//     decode_batch_max_size does (the smaller of the two when both are given).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"

namespace omni::model {

struct AudioChunking {
  int first_chunk_frames = 1;         // initial_codec_chunk_frames
  int chunk_frames = 25;              // codec_chunk_frames
  int max_batch = 4;                  // decode_batch_max_size: streams per decode call of later chunks
  int reference_context_frames = 25;  // ref_code_context_frames: the reference frames kept as left context
  int reference_states = 16;          // ref_code_state_cache_size: decoded reference contexts kept
  // decode_cudagraph_batch_sizes: the batch buckets calls are grouped into
  // (engine/audio_chunk_schedule.h); empty = none. Buckets above max_batch are never used.
  std::vector<int> batch_sizes;
};

// The chunking `connector_extra` (a JSON object, or null for the defaults) asks for. Throws
// omni::Error(kInvalidConfig) "<where>: <option> must be a positive number of frames, got <value>"
// (or "…of requests", "…a list of batch sizes", "ref_code_context_frames must be a number of
// frames >= 0") for an option of the wrong type or range.
AudioChunking read_audio_chunking(const Json& connector_extra, const std::string& where);

// A request's own first chunk (additional_information.initial_codec_chunk_frames); nullopt when it
// sets none. Throws omni::Error(kInvalidArgument) naming `where` and the field when it is not a
// positive number of frames.
std::optional<int> read_first_chunk_frames(const Json& additional_information, const std::string& where);

// The last `frames` frames (of `codes_per_frame` codes each, frame-major) of `context`, a voice
// clone's reference codes: all of them when there are no more.
std::vector<int32_t> last_context_frames(std::vector<int32_t> context, int frames, int codes_per_frame);

}  // namespace omni::model
