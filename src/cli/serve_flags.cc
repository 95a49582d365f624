#include "cli/serve_flags.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "base/error.h"
#include "cli/model_source.h"
#include "config/json_merge.h"
#include "config/platform.h"
#include "model/pipelines.h"
#include "tensor/backend.h"

namespace omni::cli {

namespace {

// The diffusion flags omnistage's diffusion stages do not implement (docs/diffusion.md lists each).
constexpr const char* kDiffusion =
    "not implemented by omnistage's diffusion stages yet; docs/diffusion.md lists the "
    "diffusion flags and their status";
constexpr const char* kDiffusionParallel =
    "diffusion parallelism across GPUs is not implemented yet (one diffusion stage runs on one device); "
    "docs/diffusion.md lists the diffusion flags and their status";
constexpr const char* kAligner = "the forced-aligner stage does not exist yet";

// The flag of a dotted --diffusion-attention-config.<path> value after app.cc's rewrite.
constexpr const char* kAttentionEntryFlag = "--diffusion-attention-config-entry";

using K = FlagKind;
using T = FlagTarget;

std::vector<FlagSpec> make_specs() {
  std::vector<FlagSpec> specs = {
      // ---- server and engine -------------------------------------------------------------
      {.name = "--host", .help = "Host name or IP address to listen on (default: all interfaces)"},
      {.name = "--port", .kind = K::kInt, .default_value = 8000, .help = "Port to listen on"},
      {.name = "--api-key",
       .kind = K::kList,
       .help = "Require one of these keys as 'Authorization: Bearer <key>' (default: $OMNISTAGE_API_KEY, else "
               "$VLLM_API_KEY); /health, /ping, /load, /version and /metrics stay open"},
      {.name = "--allowed-origins",
       .kind = K::kJsonList,
       .default_value = OrderedJson::array({"*"}),
       .help = "CORS: origins allowed to call the API, as a JSON list"},
      {.name = "--allowed-methods",
       .kind = K::kJsonList,
       .default_value = OrderedJson::array({"*"}),
       .help = "CORS: methods allowed in cross-origin requests, as a JSON list"},
      {.name = "--allowed-headers",
       .kind = K::kJsonList,
       .default_value = OrderedJson::array({"*"}),
       .help = "CORS: request headers allowed in cross-origin requests, as a JSON list"},
      {.name = "--allow-credentials", .kind = K::kSwitch, .help = "CORS: allow credentials (cookies, authorization)"},
      {.name = "--max-request-body-bytes",
       .kind = K::kInt,
       .default_value = 67108864,
       .help = "Largest request body accepted, bytes; a larger one is answered 413"},
      {.name = "--h11-max-incomplete-event-size",
       .kind = K::kInt,
       .default_value = 4194304,
       .help = "Largest request line plus headers accepted, bytes; larger is answered 431"},
      {.name = "--h11-max-header-count",
       .kind = K::kInt,
       .default_value = 256,
       .help = "Most header fields in a request; more is answered 431"},
      {.name = "--timeout-keep-alive",
       .kind = K::kFloat,
       .default_value = 5.0,
       .help = "Seconds an idle keep-alive connection stays open (default: $VLLM_HTTP_TIMEOUT_KEEP_ALIVE, else 5)"},
      {.name = "--header-read-timeout",
       .kind = K::kFloat,
       .default_value = 10.0,
       .help = "Seconds a client has to send a request's headers; a slower one is disconnected"},
      {.name = "--body-read-timeout",
       .kind = K::kFloat,
       .default_value = 60.0,
       .help = "Seconds a client has to send a request's body after its headers; a slower one is disconnected"},
      {.name = "--max-connections",
       .kind = K::kInt,
       .default_value = 1000,
       .help = "Client connections open at once; one more is answered 503 with Retry-After (0: no cap)"},
      {.name = "--max-inflight-requests",
       .kind = K::kInt,
       .default_value = 4096,
       .help = "Generation requests queued or running at once; one more is answered 503 with Retry-After (0: no "
               "bound)"},
      {.name = "--served-model-name", .kind = K::kList, .help = "Model name(s) the API answers to (default: MODEL)"},
      {.name = "--tokenizer", .help = "Tokenizer folder or Hugging Face id (default: MODEL)"},
      {.name = "--revision",
       .default_value = "main",
       .help = "Branch, tag or commit of MODEL when it is a Hugging Face id"},
      {.name = "--tokenizer-revision",
       .default_value = "main",
       .help = "Branch, tag or commit of --tokenizer when it is a Hugging Face id"},
      {.name = "--download-dir",
       .help = "Hub cache root for Hugging Face ids (default: $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub)"},
      {.name = "--chat-template", .help = "Chat template file or inline template (default: the tokenizer's)"},
      {.name = "--disable-playground",
       .dest = "enable_playground",
       .kind = K::kSwitch,
       .help = "Do not serve the browser playground at / and /playground (omnistage's extension; vLLM-Omni has "
               "no such page)",
       .switch_value = false},
      {.name = "--chat-template-content-format",
       .default_value = "auto",
       .choices = {"auto", "string", "openai"},
       .help = "How list message content reaches the chat template: joined into a string, or as OpenAI "
               "content parts (auto: detected from the template)"},
      {.name = "--limit-mm-per-prompt",
       .help = "JSON object: the most media parts of each modality one prompt may carry, e.g. "
               "'{\"audio\": 2, \"image\": 1}' (vLLM's; a modality not named: 999)"},
      {.name = "--allowed-local-media-path",
       .help = "Folder whose files requests may name as file:// media (chat media parts, a voice-clone "
               "ref_audio); default: no local files"},
      {.name = "--dtype",
       .target = T::kStage,
       .default_value = "auto",
       .choices = {"auto", "half", "float16", "bfloat16", "float", "float32"},
       .help = "Weight and activation dtype"},
      {.name = "--load-format",
       .target = T::kStage,
       .choices = {"auto", "safetensors", "dummy"},
       .help = "How to load the weights: auto or safetensors (the checkpoint's files), or dummy (random "
               "weights made on the device from config.json's shapes; the folder needs no safetensors)"},
      {.name = "--quantization", .alternatives = {"-q"}, .target = T::kStage, .help = "Weight quantization method"},
      {.name = "--seed", .kind = K::kInt, .target = T::kStage, .default_value = 0, .help = "Random seed"},
      {.name = "--max-model-len",
       .kind = K::kInt,
       .target = T::kStage,
       .help = "Context length (prompt + output) per sequence (default: the model's)"},
      {.name = "--max-num-seqs", .kind = K::kInt, .target = T::kStage, .help = "Sequences per engine step"},
      {.name = "--max-num-batched-tokens", .kind = K::kInt, .target = T::kStage, .help = "Tokens per engine step"},
      {.name = "--gpu-memory-utilization",
       .kind = K::kFloat,
       .target = T::kStage,
       .default_value = 0.9,
       .help = "Fraction of device memory a stage may use, in (0, 1]"},
      {.name = "--tensor-parallel-size",
       .alternatives = {"-tp"},
       .kind = K::kInt,
       .target = T::kStage,
       .default_value = 1,
       .help = "Tensor parallel size; applies to every stage (prefer --stage-overrides)"},
      {.name = "--pipeline-parallel-size",
       .alternatives = {"-pp"},
       .kind = K::kInt,
       .target = T::kStage,
       .default_value = 1,
       .help = "Pipeline parallel size; applies to every stage"},
      {.name = "--data-parallel-size",
       .alternatives = {"-dp"},
       .kind = K::kInt,
       .target = T::kStage,
       .default_value = 1,
       .help = "Not accepted in omni mode: set data_parallel_size in the deploy YAML"},
      {.name = "--enable-expert-parallel",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "Not accepted in omni mode: set enable_expert_parallel in the deploy YAML"},
      {.name = "--enforce-eager", .kind = K::kSwitch, .target = T::kStage, .help = "Disable CUDA graphs"},
      {.name = "--async-scheduling",
       .kind = K::kBoolPair,
       .target = T::kStage,
       .help = "Schedule the next engine step while the current one runs on the device (same outputs)"},
      {.name = "--enable-prefix-caching",
       .kind = K::kBoolPair,
       .target = T::kStage,
       .help = "Reuse KV cache blocks of shared prompt prefixes"},
      {.name = "--enable-chunked-prefill",
       .kind = K::kBoolPair,
       .target = T::kStage,
       .help = "Split long prompts over several engine steps"},
      {.name = "--trust-remote-code",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "Accepted for compatibility (omnistage runs no model code from checkpoints)"},
      {.name = "--num-gpu-blocks-override",
       .kind = K::kInt,
       .target = T::kStage,
       .help = "Number of KV cache blocks, instead of sizing them from memory"},
      {.name = "--device",
       .target = T::kStage,
       .choices = {"auto", "cpu", "cuda"},
       .help = "Device the stages run on: auto (cuda when a GPU is visible, else cpu), cpu or cuda"},
      {.name = "--kv-cache-memory-bytes",
       .kind = K::kInt,
       .target = T::kStage,
       .help = "KV cache size in bytes per device, instead of --gpu-memory-utilization"},
      {.name = "--api-server-count",
       .kind = K::kInt,
       .default_value = 1,
       .help = "Number of API frontend processes sharing the stage engines"},
      {.name = "--headless", .kind = K::kSwitch, .help = "Run worker stages without an API server"},
      // ---- OmniConfig (vLLM-Omni serve) ------------------------------------------------------
      {.name = "--omni", .kind = K::kSwitch, .help = "Accepted for compatibility; omnistage always runs in omni mode"},
      {.name = "--enable-sleep-mode",
       .kind = K::kSwitch,
       .help = "Enable sleep mode: POST /v1/omni/sleep and /v1/omni/wakeup free and restore the stages' memory"},
      {.name = "--task-type",
       .target = T::kStage,
       .help = "Model-defined startup task type (TTS: CustomVoice, VoiceDesign or Base)"},
      {.name = "--forced-aligner",
       .help = "Forced aligner model for streaming TTS word timestamps",
       .unsupported = kAligner},
      {.name = "--forced-aligner-config", .help = "YAML file with forced aligner settings", .unsupported = kAligner},
      {.name = "--forced-aligner-device", .help = "Device(s) for the forced-aligner stage", .unsupported = kAligner},
      {.name = "--deploy-config",
       .help = "Deploy config YAML; a bare file name is also looked up in the bundled deploy dir (default: the "
               "model's bundled one)"},
      {.name = "--strategy-config",
       .help = "Composable-parallel strategy.yaml",
       .unsupported = "composable-parallel strategies do not exist yet"},
      {.name = "--stage-overrides",
       .help = "Per-stage JSON overrides, e.g. '{\"0\": {\"gpu_memory_utilization\": 0.8}, \"2\": {\"enforce_eager\": "
               "true}}'"},
      {.name = "--async-chunk", .kind = K::kBoolPair, .help = "Override the deploy YAML's async_chunk"},
      {.name = "--stage-id", .kind = K::kInt, .help = "Select and launch a single stage by stage_id"},
      {.name = "--replica-id", .kind = K::kInt, .help = "Deprecated and ignored (replica ids are auto-assigned)"},
      {.name = "--stage-init-timeout",
       .kind = K::kInt,
       .default_value = 300,
       .help = "Timeout for initializing a single stage, seconds"},
      {.name = "--init-timeout", .kind = K::kInt, .default_value = 600, .help = "Timeout for initializing the stages"},
      {.name = "--shm-threshold-bytes",
       .kind = K::kInt,
       .default_value = 65536,
       .help = "Threshold for the shared memory size"},
      {.name = "--log-stats", .kind = K::kSwitch, .help = "Log engine statistics"},
      {.name = "--log-file", .help = "Also write the log to this file"},
      {.name = "--batch-timeout", .kind = K::kInt, .default_value = 10, .help = "Timeout for the batch"},
      {.name = "--worker-backend",
       .default_value = "multi_process",
       .choices = {"multi_process", "ray"},
       .help = "Backend for stage workers"},
      {.name = "--ray-address",
       .help = "Address of the Ray cluster",
       .unsupported = "the Ray worker backend does not exist"},
      {.name = "--omni-master-address",
       .alternatives = {"-oma"},
       .help = "Host or IP of the Omni orchestrator (master)"},
      {.name = "--omni-master-port",
       .alternatives = {"-omp"},
       .kind = K::kInt,
       .help = "Port of the Omni orchestrator (master)"},
      {.name = "--omni-replica-address",
       .alternatives = {"-ora"},
       .help = "Local address a headless stage advertises to the master"},
      {.name = "--omni-dp-size-local",
       .kind = K::kInt,
       .default_value = 1,
       .help = "Stage replicas this runtime launches locally for its --stage-id"},
      {.name = "--omni-lb-policy",
       .default_value = "random",
       .choices = {"random", "round-robin", "least-queue-length"},
       .help = "Load-balancing policy across stage replicas (head only)"},
      {.name = "--omni-heartbeat-timeout",
       .kind = K::kFloat,
       .default_value = 30.0,
       .help = "Seconds before an unreporting replica is marked ERROR (head only)"},
      {.name = "--omni-heartbeat-interval",
       .kind = K::kFloat,
       .default_value = 1.0,
       .help = "Seconds between a stage replica's heartbeats to its head (omnistage)"},
      {.name = "--omni-replica-grace",
       .kind = K::kFloat,
       .default_value = 600.0,
       .help = "Seconds an ERROR or DOWN replica stays listed before it is dropped from its pool (head only; "
               "omnistage)"},
      // ---- diffusion -------------------------------------------------------------------------
      {.name = "--num-gpus",
       .kind = K::kInt,
       .help = "GPUs for diffusion model inference",
       .unsupported = kDiffusionParallel},
      {.name = "--model-class-name", .target = T::kStage, .help = "Override the diffusion pipeline class name"},
      {.name = "--diffusion-load-format",
       .target = T::kStage,
       .choices = {"default", "custom_pipeline", "dummy", "diffusers"},
       .help = "How to load the diffusion pipeline",
       .unsupported = kDiffusion},
      {.name = "--lora-path",
       .kind = K::kList,
       .target = T::kStage,
       .help = "LoRA checkpoint path(s)",
       .unsupported = kDiffusion},
      {.name = "--lora-backend",
       .target = T::kStage,
       .choices = {"peft", "distill"},
       .help = "Diffusion LoRA loading backend",
       .unsupported = kDiffusion},
      {.name = "--lora-scale",
       .kind = K::kFloat,
       .target = T::kStage,
       .help = "Scale for a startup PEFT LoRA",
       .unsupported = kDiffusion},
      {.name = "--diffusion-compile-granularity",
       .target = T::kStage,
       .choices = {"regional", "full"},
       .help = "Compilation scope for the diffusion model runner",
       .unsupported = kDiffusion},
      {.name = "--diffusion-compile-dynamic",
       .kind = K::kBoolPair,
       .target = T::kStage,
       .help = "Dynamic shapes for the diffusion compile scope",
       .unsupported = kDiffusion},
      {.name = "--fa-deterministic",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "Deterministic FlashAttention on the dense path",
       .unsupported = kDiffusion},
      {.name = "--diffusers-load-kwargs",
       .kind = K::kJson,
       .target = T::kStage,
       .default_value = OrderedJson::object(),
       .help = "JSON object passed when loading a diffusers pipeline",
       .unsupported = kDiffusion},
      {.name = "--diffusers-call-kwargs",
       .kind = K::kJson,
       .target = T::kStage,
       .default_value = OrderedJson::object(),
       .help = "JSON object passed when calling a diffusers pipeline",
       .unsupported = kDiffusion},
      {.name = "--custom-pipeline-args",
       .kind = K::kJson,
       .help = "JSON object for custom diffusion pipelines",
       .unsupported = kDiffusion},
      {.name = "--ulysses-degree",
       .alternatives = {"--usp"},
       .kind = K::kInt,
       .target = T::kStage,
       .help = "Ulysses sequence parallelism degree",
       .unsupported = kDiffusionParallel},
      {.name = "--ulysses-mode",
       .target = T::kStage,
       .default_value = "strict",
       .choices = {"strict", "advanced_uaa"},
       .help = "Ulysses sequence-parallel mode",
       .unsupported = kDiffusionParallel},
      {.name = "--ulysses-a2a-permute",
       .kind = K::kBoolPair,
       .target = T::kStage,
       .help = "Fused permute-free Ulysses all-to-all",
       .unsupported = kDiffusionParallel},
      {.name = "--ring-degree",
       .alternatives = {"--ring"},
       .kind = K::kInt,
       .target = T::kStage,
       .help = "Ring sequence parallelism degree",
       .unsupported = kDiffusionParallel},
      {.name = "--allgather-degree",
       .kind = K::kInt,
       .target = T::kStage,
       .help = "AllGather-KV sequence parallelism degree",
       .unsupported = kDiffusionParallel},
      {.name = "--diffusion-quantization-config",
       .kind = K::kJson,
       .target = T::kStage,
       .help = "JSON quantization_config for diffusion",
       .unsupported = kDiffusion},
      {.name = "--force-cutlass-fp8",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "Force CUTLASS FP8 kernels for ModelOpt FP8 diffusion checkpoints",
       .unsupported = kDiffusion},
      {.name = "--use-hsdp",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "Hybrid sharded data parallel",
       .unsupported = kDiffusionParallel},
      {.name = "--hsdp-shard-size",
       .kind = K::kInt,
       .target = T::kStage,
       .default_value = -1,
       .help = "GPUs to shard weights across (-1 = auto)",
       .unsupported = kDiffusionParallel},
      {.name = "--hsdp-replicate-size",
       .kind = K::kInt,
       .target = T::kStage,
       .default_value = 1,
       .help = "HSDP replica groups",
       .unsupported = kDiffusionParallel},
      {.name = "--diffusion-attention-backend",
       .target = T::kStage,
       .help = "Default diffusion attention backend",
       .unsupported = kDiffusion},
      {.name = "--fastvideo-vsa-topk",
       .kind = K::kInt,
       .target = T::kStage,
       .help = "Key/value blocks per query block for FASTVIDEO_VSA",
       .unsupported = kDiffusion},
      {.name = "--diffusion-attention-config",
       .alternatives = {"-dac"},
       .kind = K::kJson,
       .target = T::kStage,
       .help = "Diffusion attention config: JSON, or dotted flags like --diffusion-attention-config.default.backend X",
       .unsupported = kDiffusion},
      {.name = "--cache-backend",
       .target = T::kStage,
       .default_value = "none",
       .choices = {"none", "tea_cache", "cache_dit", "mag_cache", "sea_cache", "step_cache"},
       .help = "Cache backend for diffusion models",
       .unsupported = kDiffusion},
      {.name = "--cache-config",
       .kind = K::kJson,
       .target = T::kStage,
       .help = "JSON cache configuration",
       .unsupported = kDiffusion},
      {.name = "--video-output-transport",
       .kind = K::kJson,
       .target = T::kStage,
       .help = "JSON video output preparation settings",
       .unsupported = kDiffusion},
      {.name = "--enable-cache-dit-summary",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "Cache-dit summary logging",
       .unsupported = kDiffusion},
      {.name = "--step-execution", .kind = K::kSwitch, .target = T::kStage, .help = "Per-step diffusion execution"},
      {.name = "--request-batch-max-wait-ms",
       .kind = K::kFloat,
       .target = T::kStage,
       .default_value = 0.0,
       .help = "Diffusion request batching wait, ms (0 = off)"},
      {.name = "--vae-use-slicing", .kind = K::kSwitch, .target = T::kStage, .help = "VAE slicing"},
      {.name = "--vae-use-tiling",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "VAE tiling (diffusers' AutoencoderKL tiled decode)"},
      {.name = "--vae-fast-path",
       .target = T::kStage,
       .default_value = "lossless",
       .choices = {"off", "lossless", "channels_last"},
       .help = "Wan VAE decoder fast path",
       .unsupported = kDiffusion},
      {.name = "--disable-multithread-weight-load",
       .dest = "enable_multithread_weight_load",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "Disable multi-threaded safetensors loading",
       .unsupported = kDiffusion,
       .switch_value = false},
      {.name = "--enable-broadcast-weight-load",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "Rank-0 shared weight broadcast for HSDP",
       .unsupported = kDiffusion},
      {.name = "--num-weight-load-threads",
       .kind = K::kInt,
       .target = T::kStage,
       .default_value = 4,
       .help = "Threads for parallel weight loading",
       .unsupported = kDiffusion},
      {.name = "--diffusion-offload-config",
       .kind = K::kJson,
       .target = T::kStage,
       .help = "Diffusion CPU-offload config as JSON",
       .unsupported = kDiffusion},
      {.name = "--enable-cpu-offload",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "Model-level CPU offload",
       .unsupported = kDiffusion},
      {.name = "--enable-layerwise-offload",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "Layerwise CPU offload",
       .unsupported = kDiffusion},
      {.name = "--enable-distributed-layerwise-offload",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "Distributed layerwise CPU offload",
       .unsupported = kDiffusion},
      {.name = "--dlo-use-allgather",
       .kind = K::kBoolPair,
       .target = T::kStage,
       .help = "Shard + AllGather weight reconstruction (--dlo-no-use-allgather: rank-local)",
       .unsupported = kDiffusion,
       .negation = "--dlo-no-use-allgather"},
      {.name = "--dlo-resident-layers",
       .kind = K::kInt,
       .target = T::kStage,
       .default_value = 0,
       .help = "Resident DiT layers",
       .unsupported = kDiffusion},
      {.name = "--host-weight-runtime-mode",
       .target = T::kStage,
       .default_value = "disabled",
       .choices = {"disabled", "preferred", "required"},
       .help = "Host Weight Runtime policy",
       .unsupported = kDiffusion},
      {.name = "--host-weight-runtime-root",
       .target = T::kStage,
       .help = "Host Weight Runtime store",
       .unsupported = kDiffusion},
      {.name = "--dlo-host-registration-limit-gib",
       .kind = K::kFloat,
       .target = T::kStage,
       .default_value = 0.0,
       .help = "Per-worker GiB ceiling for HWR registration (0 = none)",
       .unsupported = kDiffusion},
      {.name = "--boundary-ratio",
       .kind = K::kFloat,
       .target = T::kStage,
       .help = "Low/high DiT boundary split ratio",
       .unsupported = kDiffusion},
      {.name = "--flow-shift",
       .kind = K::kFloat,
       .target = T::kStage,
       .help = "Scheduler flow_shift for video models",
       .unsupported = kDiffusion},
      {.name = "--diffusion-kv-cache-dtype",
       .target = T::kStage,
       .choices = {"fp8", "mxfp8", "mxfp4", "float"},
       .help = "Diffusion Q/K/V precision",
       .unsupported = kDiffusion},
      {.name = "--diffusion-kv-cache-skip-steps",
       .target = T::kStage,
       .help = "Skip-step selector, e.g. '0-9,20'",
       .unsupported = kDiffusion},
      {.name = "--diffusion-kv-cache-skip-layers",
       .target = T::kStage,
       .help = "Skip-layer selector, e.g. '0,1,4-8'",
       .unsupported = kDiffusion},
      {.name = "--cfg-parallel-size",
       .kind = K::kInt,
       .target = T::kStage,
       .default_value = 1,
       .help = "Devices for parallel guidance passes",
       .unsupported = kDiffusionParallel},
      {.name = "--vae-patch-parallel-size",
       .kind = K::kInt,
       .target = T::kStage,
       .default_value = 1,
       .help = "VAE patch parallelism degree",
       .unsupported = kDiffusionParallel},
      {.name = "--text-encoder-tp-size",
       .kind = K::kInt,
       .target = T::kStage,
       .help = "Tensor parallel degree of the diffusion text encoder",
       .unsupported = kDiffusionParallel},
      {.name = "--vae-parallel-mode",
       .target = T::kStage,
       .default_value = "tile",
       .choices = {"tile", "spatial_shard_height", "spatial_shard_width"},
       .help = "VAE parallel decode strategy",
       .unsupported = kDiffusionParallel},
      {.name = "--default-sampling-params",
       .kind = K::kJson,
       .target = T::kStage,
       .help = "JSON default sampling parameters per stage (diffusion models only)"},
      {.name = "--max-generated-image-size",
       .kind = K::kInt,
       .target = T::kStage,
       .default_value = 33177600,
       .help = "Maximum generated image size in pixels"},
      {.name = "--diffusion-streaming-output",
       .kind = K::kSwitch,
       .help = "Chunked streaming diffusion output",
       .unsupported = kDiffusion},
      {.name = "--tts-max-instructions-length",
       .kind = K::kInt,
       .target = T::kStage,
       .help = "Maximum length of TTS voice style instructions (pipeline default 500)"},
      {.name = "--voices-dir",
       .help = "Folder of the voices uploaded with POST /v1/audio/voices, restored at start-up (default: "
               "uploaded_voices/ in the model's folder)"},
      {.name = "--speaker-embedding-cache-size",
       .kind = K::kInt,
       .default_value = 256,
       .help = "Speaker embeddings of voice-clone reference audio kept in memory (LRU by audio content; 0: none)"},
      {.name = "--no-guardrails",
       .kind = K::kSwitch,
       .help = "Disable Cosmos3 safety guardrails",
       .unsupported = "Cosmos3 models do not exist yet"},
      {.name = "--robot-openpi-idle-timeout",
       .kind = K::kFloat,
       .default_value = 30.0,
       .help = "Idle timeout of /v1/realtime/robot/openpi, seconds",
       .unsupported = "robot endpoints do not exist yet"},
      {.name = "--enable-diffusion-pipeline-profiler",
       .kind = K::kSwitch,
       .target = T::kStage,
       .help = "Diffusion pipeline stage durations in each image response"},
      {.name = "--enable-ar-profiler",
       .kind = K::kSwitch,
       .help = "AR stage timing in stage_durations",
       .unsupported = "stage profiling does not exist yet"},
      {.name = "--enable-orch-monitor",
       .kind = K::kSwitch,
       .help = "Orchestrator window monitor log",
       .unsupported = "the orchestrator monitor does not exist yet"},
      {.name = "--auxiliary-text-encoder",
       .target = T::kStage,
       .help = "Auxiliary text encoder model",
       .unsupported = kDiffusion},
      // Filled by app.cc from dotted --diffusion-attention-config.<path> VALUE flags.
      {.name = kAttentionEntryFlag, .kind = K::kList, .unsupported = kDiffusion},
  };
  for (FlagSpec& spec : specs) {
    if (spec.dest.empty()) {
      spec.dest = spec.name.substr(2);
      std::replace(spec.dest.begin(), spec.dest.end(), '-', '_');
    }
    if (spec.kind == K::kBoolPair && spec.negation.empty()) spec.negation = "--no-" + spec.name.substr(2);
  }
  return specs;
}

std::string default_text(const FlagSpec& spec) {
  if (spec.default_value.is_null()) return "";
  if (spec.default_value.is_string()) return spec.default_value.get<std::string>();
  return config::json_text(spec.default_value);
}

[[noreturn]] void bad_value(const FlagSpec& spec, const std::string& text, const char* expected) {
  throw_error(ErrorCode::kInvalidArgument, "{}: '{}' is not {}", spec.name, text, expected);
}

OrderedJson convert(const FlagSpec& spec, const std::string& text) {
  switch (spec.kind) {
    case K::kInt: {
      errno = 0;
      char* end = nullptr;
      long long value = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno != 0) bad_value(spec, text, "an integer");
      return value;
    }
    case K::kFloat: {
      errno = 0;
      char* end = nullptr;
      double value = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(value)) bad_value(spec, text, "a number");
      return value;
    }
    case K::kJson: {
      Json parsed = parse_json(text, spec.name);
      if (!parsed.is_object()) bad_value(spec, text, "a JSON object");
      return OrderedJson::parse(text);
    }
    case K::kJsonList: {
      Json parsed = parse_json(text, spec.name);
      bool strings = parsed.is_array();
      for (const Json& item : parsed) strings = strings && item.is_string();
      if (!strings) bad_value(spec, text, "a JSON list of strings, e.g. '[\"*\"]'");
      return OrderedJson::parse(text);
    }
    default:
      if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(), text) == spec.choices.end()) {
        throw_error(ErrorCode::kInvalidArgument, "{}: invalid choice '{}' (choose from {})", spec.name, text,
                    fmt::join(spec.choices, ", "));
      }
      return text;
  }
}

// Builds {"a": {"b": value}} from the "a.b=value" entries of dotted attention-config flags.
OrderedJson attention_config_from_entries(const std::vector<std::string>& entries) {
  OrderedJson out = OrderedJson::object();
  for (const std::string& entry : entries) {
    const size_t eq = entry.find('=');
    std::string path = entry.substr(0, eq);
    std::string text = eq == std::string::npos ? "" : entry.substr(eq + 1);
    if (path.empty() || eq == std::string::npos || path.front() == '.' || path.back() == '.' ||
        path.find("..") != std::string::npos) {
      throw_error(ErrorCode::kInvalidArgument,
                  "--diffusion-attention-config.{}: expected --diffusion-attention-config.<key>[.<key>…] VALUE", path);
    }
    OrderedJson value;
    try {
      value = OrderedJson::parse(text);
    } catch (const OrderedJson::exception&) {
      value = text;  // a bare word such as FLASH_ATTN
    }
    OrderedJson* node = &out;
    size_t start = 0;
    while (true) {
      size_t dot = path.find('.', start);
      std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (dot == std::string::npos) {
        (*node)[key] = value;
        break;
      }
      if (!(*node)[key].is_object()) (*node)[key] = OrderedJson::object();
      node = &(*node)[key];
      start = dot + 1;
    }
  }
  return out;
}

int64_t int_value(const ServeFlags& flags, const std::string& dest) {
  const OrderedJson& value = flags.values[dest];
  return value.is_number_integer() ? value.get<int64_t>() : 0;
}

void require_range(const ServeFlags& flags, const std::string& dest, const char* flag, int64_t low, int64_t high) {
  if (!flags.was_given(dest)) return;
  int64_t value = int_value(flags, dest);
  if (value < low || value > high) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} is out of range [{}, {}]", flag, value, low, high);
  }
}

// vLLM-Omni serve's rules for combining the launch flags (docs/configuration.md, "The command line").
void validate_combinations(const ServeFlags& f) {
  for (const char* dest : {"port", "omni_master_port"}) {
    require_range(f, dest, dest == std::string("port") ? "--port" : "--omni-master-port", 0, 65535);
  }
  constexpr int64_t kMax = int64_t{1} << 40;
  require_range(f, "tensor_parallel_size", "--tensor-parallel-size", 1, 4096);
  require_range(f, "pipeline_parallel_size", "--pipeline-parallel-size", 1, 4096);
  require_range(f, "max_model_len", "--max-model-len", 1, kMax);
  require_range(f, "max_num_seqs", "--max-num-seqs", 1, kMax);
  require_range(f, "max_num_batched_tokens", "--max-num-batched-tokens", 1, kMax);
  require_range(f, "num_gpu_blocks_override", "--num-gpu-blocks-override", 1, kMax);
  require_range(f, "kv_cache_memory_bytes", "--kv-cache-memory-bytes", 1, int64_t{1} << 62);
  require_range(f, "stage_init_timeout", "--stage-init-timeout", 1, kMax);
  require_range(f, "init_timeout", "--init-timeout", 1, kMax);
  require_range(f, "api_server_count", "--api-server-count", 1, 1024);
  require_range(f, "omni_dp_size_local", "--omni-dp-size-local", 1, 4096);
  require_range(f, "max_request_body_bytes", "--max-request-body-bytes", 1, int64_t{1} << 40);
  require_range(f, "h11_max_incomplete_event_size", "--h11-max-incomplete-event-size", 1024, UINT32_MAX);
  require_range(f, "h11_max_header_count", "--h11-max-header-count", 1, 1'000'000);
  require_range(f, "max_connections", "--max-connections", 0, 1'000'000);
  require_range(f, "max_inflight_requests", "--max-inflight-requests", 0, 1'000'000'000);
  for (const auto& [dest, flag] : {std::pair{"timeout_keep_alive", "--timeout-keep-alive"},
                                   std::pair{"header_read_timeout", "--header-read-timeout"},
                                   std::pair{"body_read_timeout", "--body-read-timeout"}}) {
    if (f.was_given(dest) && !(f.values[dest].get<double>() > 0)) {
      throw_error(ErrorCode::kInvalidArgument, "{} must be > 0 seconds, got {}", flag, f.values[dest].get<double>());
    }
  }
  require_range(f, "stage_id", "--stage-id", 0, 1'000'000);

  if (f.was_given("gpu_memory_utilization")) {
    double value = f.values["gpu_memory_utilization"].get<double>();
    if (!(value > 0.0 && value <= 1.0)) {
      throw_error(ErrorCode::kInvalidArgument, "--gpu-memory-utilization: {} is not in (0, 1]", value);
    }
  }
  for (const auto& [dest, flag] : {std::pair{"omni_heartbeat_timeout", "--omni-heartbeat-timeout"},
                                   std::pair{"omni_heartbeat_interval", "--omni-heartbeat-interval"},
                                   std::pair{"omni_replica_grace", "--omni-replica-grace"}}) {
    if (f.was_given(dest) && !(f.values[dest].get<double>() > 0)) {
      throw_error(ErrorCode::kInvalidArgument, "{} must be > 0", flag);
    }
  }
  if (f.was_given("data_parallel_size")) {
    throw_error(ErrorCode::kInvalidArgument,
                "--data-parallel-size is not accepted in omni mode (as in vLLM-Omni): set data_parallel_size in the "
                "deploy YAML, at the top level or per stage");
  }
  if (f.was_given("enable_expert_parallel")) {
    throw_error(ErrorCode::kInvalidArgument,
                "--enable-expert-parallel is not accepted in omni mode (as in vLLM-Omni): set enable_expert_parallel "
                "per stage in the deploy YAML");
  }
  const bool master = f.was_given("omni_master_address") && f.was_given("omni_master_port");
  if (f.was_given("stage_id") && !master) {
    throw_error(ErrorCode::kInvalidArgument,
                "--stage-id requires --omni-master-address (-oma) and --omni-master-port (-omp)");
  }
  if (f.was_given("headless")) {
    if (!f.was_given("stage_id") || !master) {
      throw_error(ErrorCode::kInvalidArgument,
                  "--headless requires --stage-id, --omni-master-address (-oma) and --omni-master-port (-omp)");
    }
    if (f.values["worker_backend"] != "multi_process") {
      throw_error(ErrorCode::kInvalidArgument, "--headless requires --worker-backend multi_process");
    }
  }
  if (f.was_given("omni_replica_address") && !f.was_given("headless")) {
    throw_error(ErrorCode::kInvalidArgument, "--omni-replica-address (-ora) is only valid with --headless");
  }
  if (int_value(f, "omni_dp_size_local") != 1 && !f.was_given("stage_id")) {
    throw_error(ErrorCode::kInvalidArgument, "--omni-dp-size-local other than 1 requires --stage-id");
  }
  if (int_value(f, "api_server_count") > 1) {
    for (const char* dest : {"headless", "stage_id", "omni_master_address", "omni_replica_address"}) {
      if (f.was_given(dest)) {
        throw_error(ErrorCode::kInvalidArgument, "--api-server-count > 1 cannot be combined with {}",
                    f.flag_of.at(dest));
      }
    }
    if (int_value(f, "omni_dp_size_local") != 1) {
      throw_error(ErrorCode::kInvalidArgument, "--api-server-count > 1 requires --omni-dp-size-local 1");
    }
    if (f.values["worker_backend"] != "multi_process") {
      throw_error(ErrorCode::kInvalidArgument, "--api-server-count > 1 requires --worker-backend multi_process");
    }
    if (f.was_given("enable_sleep_mode")) {
      throw_error(ErrorCode::kInvalidArgument, "--api-server-count > 1 cannot be combined with --enable-sleep-mode");
    }
  }
  if (f.was_given("replica_id")) {
    spdlog::warn("--replica-id is deprecated and ignored: replica ids are assigned by the master");
  }
}

}  // namespace

const std::vector<FlagSpec>& serve_flag_specs() {
  static const std::vector<FlagSpec> kSpecs = make_specs();
  return kSpecs;
}

std::vector<std::string> rewrite_serve_args(const std::vector<std::string>& args) {
  std::map<std::string, std::string> aliases;
  for (const FlagSpec& spec : serve_flag_specs()) {
    for (const std::string& alternative : spec.alternatives) {
      if (alternative.size() > 2 && alternative[0] == '-' && alternative[1] != '-') aliases[alternative] = spec.name;
    }
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--") {
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    if (auto it = aliases.find(name); it != aliases.end()) {
      out.push_back(it->second + (eq == std::string::npos ? "" : arg.substr(eq)));
      continue;
    }
    for (const char* prefix : {"--diffusion-attention-config.", "-dac."}) {
      if (name.rfind(prefix, 0) != 0) continue;
      std::string path = name.substr(std::string_view(prefix).size());
      std::string value;
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        throw_error(ErrorCode::kInvalidArgument, "{}: missing value", name);
      }
      arg.clear();
      out.push_back(kAttentionEntryFlag);
      out.push_back(path + "=" + value);
      break;
    }
    if (!arg.empty()) out.push_back(arg);
  }
  return out;
}

ServeFlagParser::ServeFlagParser(CLI::App& app) {
  app.add_option("model", *model_, "Model directory or Hugging Face id (e.g. Qwen/Qwen3-Omni-30B-A3B-Instruct)")
      ->required();
  for (const FlagSpec& spec : serve_flag_specs()) {
    Binding binding{&spec};
    std::string names = spec.name;
    for (const std::string& alternative : spec.alternatives) {
      if (alternative.rfind("--", 0) == 0 || alternative.size() == 2) names += "," + alternative;
    }
    std::string help = spec.help;
    if (!spec.choices.empty()) help += fmt::format(" (choices: {})", fmt::join(spec.choices, ", "));
    std::vector<std::string> short_aliases;
    for (const std::string& alternative : spec.alternatives) {
      if (alternative.rfind("--", 0) != 0 && alternative.size() > 2) short_aliases.push_back(alternative);
    }
    if (!short_aliases.empty()) help += fmt::format(" [alias: {}]", fmt::join(short_aliases, ", "));
    const std::string group = spec.name == kAttentionEntryFlag ? "" : "Serve";
    switch (spec.kind) {
      case K::kSwitch:
        binding.option = app.add_flag(names)->description(help)->group(group);
        break;
      case K::kBoolPair:
        binding.option = app.add_flag(names)->description(help)->group(group);
        binding.negation = app.add_flag(spec.negation)->description("Turn off " + spec.name)->group(group);
        binding.option->excludes(binding.negation);
        break;
      case K::kList:
        binding.option = app.add_option(names, *binding.list, help)->group(group)->expected(1, -1);
        break;
      default:
        binding.option = app.add_option(names, *binding.text, help)
                             ->group(group)
                             ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                             ->type_name(spec.kind == K::kInt                                 ? "INT"
                                         : spec.kind == K::kFloat                             ? "FLOAT"
                                         : spec.kind == K::kJson || spec.kind == K::kJsonList ? "JSON"
                                                                                              : "TEXT");
        break;
    }
    if (const std::string text = default_text(spec); !text.empty()) binding.option->default_str(text);
    bindings_.push_back(binding);
  }
}

ServeFlags ServeFlagParser::collect() const {
  ServeFlags flags;
  flags.model = *model_;
  for (const Binding& binding : bindings_) {
    const FlagSpec& spec = *binding.spec;
    OrderedJson value = spec.default_value;
    const bool given = binding.option->count() > 0 || (binding.negation && binding.negation->count() > 0);
    if (given) {
      switch (spec.kind) {
        case K::kSwitch:
          value = spec.switch_value;
          break;
        case K::kBoolPair:
          value = binding.option->count() > 0;
          break;
        case K::kList:
          value = *binding.list;
          break;
        default:
          value = convert(spec, *binding.text);
      }
      flags.given.insert(spec.dest);
      flags.flag_of[spec.dest] = binding.negation && binding.negation->count() > 0 ? spec.negation : spec.name;
    }
    flags.values[spec.dest] = value;
  }
  if (flags.was_given("diffusion_attention_config_entry")) {
    OrderedJson dotted = attention_config_from_entries(flags.values["diffusion_attention_config_entry"]);
    OrderedJson& config = flags.values["diffusion_attention_config"];
    if (config.is_null()) config = OrderedJson::object();
    config.update(dotted, true);
    flags.given.insert("diffusion_attention_config");
    flags.flag_of["diffusion_attention_config"] = "--diffusion-attention-config";
  }
  validate_combinations(flags);
  return flags;
}

config::CliConfigInputs config_inputs(const ServeFlags& flags) {
  config::CliConfigInputs inputs;
  inputs.model = flags.model;
  if (flags.was_given("deploy_config")) inputs.deploy_config = flags.values["deploy_config"];
  if (flags.was_given("stage_overrides")) inputs.stage_overrides = flags.values["stage_overrides"];
  if (flags.was_given("async_chunk")) inputs.async_chunk = flags.values["async_chunk"].get<bool>();
  for (const FlagSpec& spec : serve_flag_specs()) {
    if (spec.target != T::kStage || !flags.was_given(spec.dest)) continue;
    inputs.engine_args[spec.dest] = flags.values[spec.dest];
    inputs.flag_names[spec.dest] = flags.flag_of.at(spec.dest);
  }
  return inputs;
}

config::ConfigEnvironment config_environment() {
  config::ConfigEnvironment environment;
  const char* deploy_dir = std::getenv("OMNISTAGE_DEPLOY_DIR");
  environment.bundled_deploy_dir = deploy_dir && *deploy_dir ? deploy_dir : OMNI_DEPLOY_DIR;
  const char* forced = std::getenv(std::string(config::kPlatformEnv).c_str());
  // Asking the driver costs a CUDA initialisation; skip it when the platform is forced.
  const bool cuda_visible = !(forced && *forced) && tensor::cuda_device_count() > 0;
  environment.platform = config::detect_platform(cuda_visible);
  return environment;
}

const config::PipelineRegistry& pipeline_registry() {
  static const config::PipelineRegistry kRegistry = [] {
    config::PipelineRegistry r;
    model::register_all_pipelines(r);
    return r;
  }();
  return kRegistry;
}

config::EffectiveConfig build_config(const ServeFlags& flags) {
  return config::build_effective_config(pipeline_registry(), config_inputs(flags), config_environment());
}

void use_hub_model(ServeFlags& flags, hub::FileSet files) {
  const std::string download_dir =
      flags.values["download_dir"].is_string() ? flags.values["download_dir"].get<std::string>() : "";
  if (const std::optional<hub::RepoId> repo = hub_model(flags.model)) {
    const ModelSource source{flags.values["revision"].get<std::string>(), download_dir, files};
    if (files == hub::FileSet::kConfig) {
      // `config` needs no download for a known id: the bundled table names its pipeline.
      if (std::optional<std::string> cached = cached_model_dir(flags.model, source)) {
        flags.model = *cached;
      } else if (!pipeline_registry().known_models().contains(flags.model)) {
        try {
          flags.model = local_model_dir(flags.model, source);
        } catch (const Error& e) {
          throw_error(ErrorCode::kNotFound,
                      "no pipeline for model '{}': it is not a local directory nor a known model id, and its "
                      "config.json did not come from the Hub: {}",
                      flags.model, e.what());
        }
      }
    } else {
      flags.model = local_model_dir(flags.model, source);
      if (!flags.was_given("served_model_name")) flags.values["served_model_name"] = OrderedJson::array({repo->str()});
    }
  }
  if (files == hub::FileSet::kPipeline && flags.values["tokenizer"].is_string()) {
    const ModelSource source{flags.values["tokenizer_revision"].get<std::string>(), download_dir,
                             hub::FileSet::kTokenizer};
    flags.values["tokenizer"] = local_model_dir(flags.values["tokenizer"].get<std::string>(), source);
  }
}

}  // namespace omni::cli
