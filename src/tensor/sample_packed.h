// ops::sample with its parameters read from device memory, so that a DeviceGraph can record it
// (device_graph.h) and later replays draw with whatever the buffer holds then: the Qwen3-TTS code
// predictor's sampling sub-steps, recorded once per batch size and replayed per frame. Same rules,
// same kernels and the same Philox uniform as ops::sample (ops.h), so a row draws the same id
// either way; the penalties, which need the token history on the host, are not supported.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::tensor::ops {

// Words (4 bytes) of one row of packed parameters (tensor/packed_sampling_params.h).
inline constexpr int64_t kPackedSamplingParamsWords = 12;

// Checks `params` as sample() does (kInvalidArgument naming the row and the field), refuses a
// repetition, presence or frequency penalty (kInvalidArgument naming the row), and writes them into
// `packed`: i32 [params.size(), kPackedSamplingParamsWords] on any device (on CUDA one copy queued
// on the device's stream; `params` may be dropped when this returns). Not to be recorded.
void write_sampling_params(std::span<const SamplingParams> params, Tensor& packed);

// Draws one id per row of logits [R, V] (float) into ids [R] i32 as sample() would with row r's
// packed parameters and step + step_offset: `packed` [R, kPackedSamplingParamsWords] i32, written by
// write_sampling_params; step_offset is fixed in a recording (a sub-step's index) while the base
// step in the buffer changes per replay. All three tensors on one device. Queues work only (no
// upload, no synchronisation), so it may be recorded. kInvalidArgument for mismatched shapes,
// dtypes or devices.
void sample_packed(const Tensor& logits, const Tensor& packed, uint64_t step_offset, Tensor& ids);

}  // namespace omni::tensor::ops
