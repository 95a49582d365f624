// The "diffusion" stage runner: a diffusion stage served by engine::DiffusionEngine over the
// registered diffusion stage model that engine_args.stage_model names (model/diffusion_model.h).
//
// Input: additional_information {"prompt", "negative_prompt"} and sampling_params {"height",
// "width", "num_inference_steps", "guidance_scale" (or "true_cfg_scale"), "max_sequence_length",
// "seed"} (the deploy YAML's default_sampling_params under the request's); prompt_token_ids are
// ignored. A request whose image is larger than max_generated_image_size pixels, or that the model
// refuses (size, steps), fails with kInvalidArgument naming the field.
// Output: one StageOutput with the image and finish_reason "stop" per request.
//
// engine_args read (runtime/engine_args.h): model, stage_model, device, max_num_seqs (default 1),
// request_batch_max_wait_ms (default 0), step_execution (default false), max_generated_image_size
// (pixels, default 33177600 = 7680x4320), enable_diffusion_pipeline_profiler (default false: with
// it each image carries its stage durations, GeneratedImage::stage_durations, and the stage logs
// them at info level); the stage model reads its own (z_image: vae_use_tiling).
// Step timings (take_step_timings): "denoise_step" per denoising step of the batch, "vae_decode"
// per image.
#pragma once

#include <memory>
#include <string_view>

#include "runtime/stage_runner.h"

namespace omni::runtime {

inline constexpr std::string_view kDiffusionRunnerKind = "diffusion";

std::unique_ptr<StageRunner> make_diffusion_stage_runner(const Json& engine_args, const StageRunnerContext& context);

}  // namespace omni::runtime
