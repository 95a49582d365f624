// The deploy YAML schema (vLLM-Omni's DeployConfig / StageDeployConfig), typed.
//
// A deploy YAML sizes and places the stages of a registered pipeline. Every stage field of the
// schema is a typed std::optional member of StageDeployConfig (unset = the layer contributes
// nothing); keys the schema does not know fall through to engine_extras and are forwarded to the
// engine. Parsing validates types and names the stage, the field and the file that set it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "config/provenance.h"

namespace omni::config {

// X(name, C++ type) for every engine-facing StageDeployConfig field.
#define OMNI_STAGE_ENGINE_FIELDS(X)              \
  X(tensor_parallel_size, int64_t)               \
  X(enable_expert_parallel, bool)                \
  X(gpu_memory_utilization, double)              \
  X(max_num_seqs, int64_t)                       \
  X(max_num_batched_tokens, int64_t)             \
  X(max_model_len, int64_t)                      \
  X(enforce_eager, bool)                         \
  X(async_scheduling, bool)                      \
  X(disable_hybrid_kv_cache_manager, bool)       \
  X(mm_processor_cache_gb, double)               \
  X(mamba_ssm_cache_dtype, std::string)          \
  X(compilation_config, OrderedJson)             \
  X(profiler_config, OrderedJson)                \
  X(skip_mm_profiling, bool)                     \
  X(enable_flashinfer_autotune, bool)            \
  X(config_format, std::string)                  \
  X(load_format, std::string)                    \
  X(tokenizer_mode, std::string)                 \
  X(subtalker_sampling_params, OrderedJson)      \
  X(ulysses_degree, int64_t)                     \
  X(ulysses_mode, std::string)                   \
  X(ulysses_a2a_permute, bool)                   \
  X(ring_degree, int64_t)                        \
  X(allgather_degree, int64_t)                   \
  X(sequence_parallel_size, int64_t)             \
  X(cfg_parallel_size, int64_t)                  \
  X(vae_patch_parallel_size, int64_t)            \
  X(vae_parallel_mode, std::string)              \
  X(text_encoder_tp_size, int64_t)               \
  X(use_hsdp, bool)                              \
  X(hsdp_shard_size, int64_t)                    \
  X(hsdp_replicate_size, int64_t)                \
  X(model_class_name, std::string)               \
  X(diffusion_load_format, std::string)          \
  X(lora_path, OrderedJson)                      \
  X(lora_backend, std::string)                   \
  X(lora_scale, double)                          \
  X(diffusers_load_kwargs, OrderedJson)          \
  X(diffusers_call_kwargs, OrderedJson)          \
  X(diffusion_quantization_config, OrderedJson)  \
  X(diffusion_attention_backend, std::string)    \
  X(diffusion_attention_config, OrderedJson)     \
  X(fastvideo_vsa_topk, int64_t)                 \
  X(diffusion_compile_granularity, std::string)  \
  X(diffusion_compile_dynamic, bool)             \
  X(fa_deterministic, bool)                      \
  X(cache_backend, std::string)                  \
  X(cache_config, OrderedJson)                   \
  X(enable_cache_dit_summary, bool)              \
  X(step_execution, bool)                        \
  X(request_batch_max_wait_ms, double)           \
  X(vae_use_slicing, bool)                       \
  X(vae_use_tiling, bool)                        \
  X(vae_fast_path, std::string)                  \
  X(boundary_ratio, double)                      \
  X(flow_shift, double)                          \
  X(diffusion_kv_cache_dtype, std::string)       \
  X(diffusion_kv_cache_skip_steps, std::string)  \
  X(diffusion_kv_cache_skip_layers, std::string) \
  X(auxiliary_text_encoder, std::string)         \
  X(enable_multithread_weight_load, bool)        \
  X(num_weight_load_threads, int64_t)            \
  X(enable_broadcast_weight_load, bool)          \
  X(enable_cpu_offload, bool)                    \
  X(enable_layerwise_offload, bool)              \
  X(enable_distributed_layerwise_offload, bool)  \
  X(dlo_use_allgather, bool)                     \
  X(dlo_resident_layers, int64_t)                \
  X(dlo_host_registration_limit_gib, double)     \
  X(host_weight_runtime_mode, std::string)       \
  X(host_weight_runtime_root, std::string)       \
  X(diffusion_offload_config, OrderedJson)       \
  X(video_output_transport, OrderedJson)         \
  X(enable_diffusion_pipeline_profiler, bool)    \
  X(max_generated_image_size, int64_t)           \
  X(tts_max_instructions_length, int64_t)        \
  X(silence_ban_frames, int64_t)

// X(name, C++ type) for the top-level fields that apply to every stage's engine.
#define OMNI_PIPELINE_WIDE_FIELDS(X)           \
  X(trust_remote_code, bool)                   \
  X(distributed_executor_backend, std::string) \
  X(dtype, std::string)                        \
  X(quantization, std::string)                 \
  X(enable_prefix_caching, bool)               \
  X(enable_chunked_prefill, bool)              \
  X(data_parallel_size, int64_t)               \
  X(pipeline_parallel_size, int64_t)           \
  X(active_stream_window, int64_t)             \
  X(custom_voice_dir, std::string)

// Stage keys that place and wire a stage rather than configure its engine.
inline constexpr std::string_view kStageReservedKeys[] = {"stage_id",
                                                          "devices",
                                                          "num_replicas",
                                                          "env",
                                                          "async_chunk",
                                                          "input_connectors",
                                                          "output_connectors",
                                                          "default_sampling_params",
                                                          "default_pooling_params",
                                                          "engine_extras",
                                                          "engine_args",
                                                          "runtime"};

// Stage keys merged recursively (not replaced) when an overlay or platform section sets them.
inline constexpr std::string_view kDeepMergeKeys[] = {"default_sampling_params", "default_pooling_params",
                                                      "subtalker_sampling_params", "engine_extras", "engine_args"};

// PipelineConfig fields: topology, never accepted in a deploy YAML.
inline constexpr std::string_view kPipelineOnlyKeys[] = {"model_stage",
                                                         "execution_type",
                                                         "input_sources",
                                                         "engine_input_source",
                                                         "final_output",
                                                         "final_output_type",
                                                         "owns_tokenizer",
                                                         "requires_multimodal_data",
                                                         "hf_config_name",
                                                         "sampling_constraints",
                                                         "custom_process_input_func",
                                                         "custom_process_next_stage_input_func",
                                                         "async_chunk_process_next_stage_input_func",
                                                         "sync_process_input_func",
                                                         "prompt_expand_func",
                                                         "cfg_kv_collect_func",
                                                         "worker_type",
                                                         "stage_type"};

// The connector classes vLLM-Omni registers; a connectors entry must name one.
inline constexpr std::string_view kConnectorClasses[] = {
    "SharedMemoryConnector",           "MooncakeStoreConnector",      "MooncakeConnector",
    "MooncakeTransferEngineConnector", "MoriTransferEngineConnector", "YuanrongConnector",
    "YuanrongTransferEngineConnector"};
inline constexpr std::string_view kDefaultConnectorClass = "SharedMemoryConnector";

// The platform names a `platforms:` section may use.
inline constexpr std::string_view kPlatformNames[] = {"cuda", "rocm", "npu", "xpu", "musa", "cpu"};

bool is_stage_engine_field(std::string_view name);
bool is_pipeline_wide_field(std::string_view name);
bool is_stage_reserved_key(std::string_view name);
bool is_deep_merge_key(std::string_view name);

// Checks that `value` has the JSON type of the typed field `name` (stage engine or pipeline-wide;
// other names accept anything). Throws omni::Error(kInvalidConfig) "<where>: <name> must be …".
void check_field_type(std::string_view name, const OrderedJson& value, std::string_view where);

struct ConnectorSpec {
  std::string name;                           // connector class, e.g. SharedMemoryConnector
  OrderedJson extra = OrderedJson::object();  // forwarded to the connector
};

struct DuplexSessionConfig {
  double idle_ttl_s = 300;
  double disconnect_grace_s = 30;
  double reaper_interval_s = 5;
  double resume_replay_ttl_s = 60;
  int64_t resume_replay_max_bytes_per_session = 8 << 20;
  int64_t max_pending_input_bytes_per_session = 16 << 20;
  int64_t max_pending_turns_per_session = 4;
  int64_t max_sessions = 1;
  int64_t completed_append_cache_size = 256;
  std::string server_vad_model_path;
  int64_t warmup_frames = 0;
};

struct StageDeployConfig {
  int stage_id = 0;
  std::optional<std::string> devices;  // logical device indices, "0,1"
  int64_t num_replicas = 1;
  OrderedJson env = OrderedJson::object();
  std::optional<bool> async_chunk;                       // false opts this stage out of pipeline-wide async_chunk
  std::map<std::string, std::string> input_connectors;   // from_stage_<n> -> connector name
  std::map<std::string, std::string> output_connectors;  // to_stage_<n> -> connector name
  OrderedJson default_sampling_params = OrderedJson::object();
  OrderedJson default_pooling_params = OrderedJson::object();
#define OMNI_DECLARE_FIELD(name, type) std::optional<type> name;
  OMNI_STAGE_ENGINE_FIELDS(OMNI_DECLARE_FIELD)
#undef OMNI_DECLARE_FIELD
  // Keys the schema does not know, forwarded to the engine; they win over the typed fields.
  OrderedJson engine_extras = OrderedJson::object();
  // Where each key was set (see provenance.h); nested keys are dotted.
  SourceMap sources;

  // The typed engine fields that are set, in schema order, as JSON.
  OrderedJson engine_fields() const;
};

struct DeployConfig {
  bool async_chunk = true;
  std::string session_mode = "turn";  // turn | duplex
  DuplexSessionConfig duplex_session;
  std::string model_runner = "v1";  // v1 | v2
  std::map<std::string, ConnectorSpec> connectors;
  std::vector<std::pair<int, int>> edges;  // explicit (from, to); empty = derived from input_sources
  std::vector<StageDeployConfig> stages;
  std::string pipeline;  // registry key override; empty = resolve from the model
#define OMNI_DECLARE_FIELD(name, type) std::optional<type> name;
  OMNI_PIPELINE_WIDE_FIELDS(OMNI_DECLARE_FIELD)
#undef OMNI_DECLARE_FIELD
  std::vector<std::string> files;  // the base_config chain, base first (absolute paths)
  SourceMap sources;               // top-level keys -> the file that set them

  // The pipeline-wide fields that are set, in schema order, as JSON.
  OrderedJson pipeline_wide_fields() const;
  const StageDeployConfig* find_stage(int stage_id) const;
};

}  // namespace omni::config
