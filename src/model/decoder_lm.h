// The pre-norm decoder-only transformer LM of the Qwen families (Qwen2, Qwen3 and the text
// stacks built like them), on the tensor ops: embedding -> N x [RMSNorm, GQA attention with NeoX
// RoPE over the paged KV cache, residual, RMSNorm, SwiGLU MLP, residual] -> RMSNorm -> lm_head.
// What differs between families is a DecoderVariant, not a copy of this code. A config with
// experts (TextModelConfig::moe) makes its sparse layers' MLP a mixture of experts
// (model/moe_mlp.h); such a model runs on one rank. On CUDA its MoE layers run on the device
// without a read-back, so it takes the fixed-size decode steps, CUDA graphs and asynchronous steps
// as a dense model does (unless a layer falls back to the host router: MoeMlp::runs_on_device).
//
// On the CPU, weights, activations and the KV cache are float32 (bf16/f16 on disk are widened). On a
// CUDA device they are in the load options' dtype (model/model_dtype.h: by default the
// checkpoint's, bfloat16 for float32 checkpoints), written there from the file through pinned
// staging and converted on the GPU, with float32 arithmetic inside every op; a step uploads its
// token ids, positions and KV slots in one copy, runs every op on the device's stream without
// waiting, and copies back only the logits rows asked for (or, in forward_greedy and
// forward_sample, one token id per row). Activations come from the device's caching allocator, so
// a step allocates no new device memory once the shapes have been seen. The KV cache is
// [num_blocks, kKvBlockSize, kv_heads, head_dim] per layer in the activation dtype. Threading per
// CausalLm.
//
// Tensor parallelism: given a communicator of size N (on the model's device), the object is rank
// r's shard (model/tensor_parallel.h): it loads only its slices, holds the KV cache of its KV
// heads, and meets the other ranks in two all-reduces per layer, one for the embedding and one
// all-gather of the logits. Every rank must call init_kv_cache and forward/forward_greedy/
// forward_sample with the same arguments in the same order (runtime/tensor_parallel_model.h does
// that, sending forward_sample through forward; they meet the others in the same collectives);
// every rank returns the full logits.
#pragma once

#include <array>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "model/hf_config.h"
#include "model/model_registry.h"
#include "model/moe_mlp.h"
#include "model/tensor_parallel.h"
#include "tensor/communicator.h"
#include "tensor/device_graph.h"
#include "tensor/host_readback.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace omni::model {

class Checkpoint;

struct DecoderVariant {
  bool qk_norm = false;   // Qwen3: RMSNorm over each head of q and k before RoPE
  bool qkv_bias = false;  // Qwen2: q/k/v projections have a bias
};

// Where a decoder's weights live, for stacks nested inside a larger checkpoint (the Qwen3-TTS
// talker under "talker.model.", its code predictor under "talker.code_predictor.model.").
struct DecoderWeights {
  std::string prefix = "model.";           // {prefix}layers.{i}.*, {prefix}norm.weight, {prefix}embed_tokens.weight
  std::string lm_head = "lm_head.weight";  // the untied output head (Qwen3-Omni: "thinker.lm_head.weight")
  // false: a stack fed through forward_embeds whose caller owns the input tables and output heads;
  // neither embed_tokens nor lm_head is loaded and forward()/forward_greedy() are refused.
  bool has_embedding_and_head = true;
};

class DecoderLm : public CausalLm {
 public:
  // Loads the weights of `dir` under Hugging Face names (model.layers.{i}.self_attn.q_proj.weight…;
  // lm_head.weight, or the embedding when tied). Throws kLoadFailed naming a missing or
  // mis-shaped tensor, kUnsupported for an activation other than silu. options.device is where
  // the model runs (kUnavailable when it is not a visible device); options.tensor_parallel makes
  // this its rank's shard (kInvalidConfig when the model cannot be cut into that many ranks).
  DecoderLm(const std::filesystem::path& dir, const TextModelConfig& config, DecoderVariant variant,
            const CausalLmLoadOptions& options = {});
  // The same stack under other weight names (see DecoderWeights).
  DecoderLm(const std::filesystem::path& dir, const TextModelConfig& config, DecoderVariant variant,
            const DecoderWeights& weights, const CausalLmLoadOptions& options = {});

  const CausalLmInfo& info() const override { return info_; }
  size_t kv_bytes_per_block() const override;
  void init_kv_cache(int num_blocks) override;
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;
  void forward_greedy(const ForwardBatch& batch, std::vector<int32_t>& token_ids) override;
  // ops::sample on the logits where they are (bf16/f16 on a GPU: the penalties round to that dtype),
  // one copy of the ids to the host.
  void forward_sample(const ForwardBatch& batch, std::span<const tensor::ops::SamplingParams> params,
                      std::vector<int32_t>& token_ids) override;
  // Accepted on a CUDA device with one rank, a decode attention kernel for the dtype and head size
  // (ops::paged_decode_attention) and an output head; declined otherwise (the CPU runs unpadded).
  bool prepare_decode_steps(const std::vector<int>& batch_sizes, int max_blocks_per_seq, bool capture_graphs) override;
  // On a CUDA device with one rank and an output head, a step is queued on the device's stream
  // (forward_greedy's path, the fixed-size one included, or forward_sample's device sampling) and
  // its ids are copied back to pinned host memory behind it (tensor/host_readback.h); wait_step()
  // waits for that copy alone. The ids of previous_rows are gathered from the previous step's
  // device-resident ids into this step's inputs on the stream (ops::substitute_ids), before the
  // step's ops or graph replay. Elsewhere the default (synchronous) steps. Errors as the base; a
  // launch with two steps outstanding is kInternal; previous rows after a synchronous
  // forward_greedy that came between the two launches are kInvalidArgument (its fixed-size step
  // may have overwritten the ids on the device).
  void launch_step(const ForwardBatch& batch, std::span<const tensor::ops::SamplingParams> params,
                   std::span<const int32_t> previous_rows) override;
  void wait_step(std::vector<int32_t>& token_ids) override;
  // How many launch_step calls found the previous step still outstanding and queued behind it
  // without waiting (the device-side overlap of async scheduling); 0 where steps run synchronously.
  int64_t overlapped_launches() const { return overlapped_launches_; }
  // How many greedy steps ran as a fixed-size decode step (prepare_decode_steps), graph or not.
  int64_t fixed_decode_steps() const { return fixed_decode_steps_; }
  tensor::Device device() const override { return device_; }
  size_t activation_bytes(int max_tokens, int max_logit_rows) const override;
  // The input embeddings of `ids` as host float32 [ids.size(), hidden_size] (rows a downstream
  // stage reads). kUnsupported for a model split over ranks or without an embedding,
  // kInvalidArgument for an id outside the vocabulary.
  std::vector<float> embed_on_host(std::span<const int32_t> ids) const;
  // Runs the stack on caller-built input rows instead of token ids: `inputs_embeds` is
  // [tokens, hidden_size], one row per batch position (batch.token_ids must be empty; every rank
  // passes the same full rows), either a host float32 tensor or, on a CUDA model, a tensor on the
  // model's device in its dtype. A device tensor becomes the residual stream and is overwritten,
  // and the step's positions and KV slots then go up with the ops through pinned staging memory,
  // so the call never waits for the device (host rows are uploaded with the step's integers in one
  // synchronising copy). `hidden` becomes the post-final-norm hidden states of the rows forward()
  // would give logits for, [rows, hidden_size] on the model's device in its dtype. Errors as
  // forward().
  void forward_embeds(const ForwardBatch& batch, const tensor::Tensor& inputs_embeds, tensor::Tensor& hidden);
  // One decode step of caller-built rows with all of its metadata on the device, so that it may be
  // recorded into a DeviceGraph (the Qwen3-TTS code predictor's sub-steps): `h` [B, hidden_size] on
  // the model's device in dtype() is the residual stream and ends as the post-final-norm hidden
  // states; positions, KV slots and context lengths are [B] i32 and block_tables [B, W] i32, all on
  // the device, with the meaning and padding rows of decode_step_inputs.h. Queues work only.
  // kUnsupported off CUDA, with several ranks or without a KV cache.
  void decode_embeds(tensor::Tensor& h, const tensor::Tensor& positions, const tensor::Tensor& slots,
                     const tensor::Tensor& context_lens, const tensor::Tensor& block_tables);

  // Runs the batch's token ids through the loaded layers and returns in `hidden` the rows forward()
  // would give logits for (batch.all_logits: every token) as the last layer leaves them, before the
  // final norm, [rows, hidden_size] on the model's device: a text encoder's features (a model loaded
  // with num_hidden_layers = N - 1 gives Hugging Face's hidden_states[-2] of the N-layer model).
  // Writes the tokens' K/V like forward(). Errors as forward().
  void forward_hidden(const ForwardBatch& batch, tensor::Tensor& hidden);
  // The dtype of weights and activations on the model's device (float32 on the CPU, else bfloat16).
  tensor::DType dtype() const { return dtype_; }
  // A host float32 tensor on the model's device in dtype(), for the caller's tables that feed the
  // stack or read its hidden states (a copy, also on the CPU).
  tensor::Tensor place(const tensor::Tensor& host_f32) const;

  const TextModelConfig& config() const { return config_; }

 private:
  struct Layer {
    tensor::Tensor input_norm, post_attention_norm;
    tensor::Tensor qkv_proj;  // [q + k + v rows of this rank, hidden]: query rows, then key, then value
    tensor::Tensor qkv_bias;  // [q + k + v rows] likewise; undefined without qkv_bias
    tensor::Tensor o_proj;
    tensor::Tensor q_norm, k_norm;  // undefined without qk_norm
    tensor::Tensor gate_up_proj;    // [2 * intermediate, hidden]: gate rows, then up rows
    tensor::Tensor down_proj;
    std::unique_ptr<MoeMlp> moe;  // a sparse layer's MLP (gate_up_proj and down_proj undefined)
    tensor::Tensor k_cache, v_cache;
  };

  // The attention metadata of a step: the sequences for ops::paged_attention, or device-resident
  // context lengths and block tables for ops::paged_decode_attention (when block_tables is defined).
  struct AttentionBatch {
    std::span<const tensor::ops::PagedSequence> seqs;
    tensor::Tensor context_lens, block_tables;
  };

  // One batch size of the fixed-size decode path: its device-resident inputs (rewritten by one
  // upload per step), its output ids and, in graph mode, the recording that reads and writes them.
  struct DecodeStep {
    int64_t rows = 0;
    tensor::Tensor inputs;  // i32 [rows * (4 + table width)]: ids, positions, slots, context lengths, tables
    tensor::Tensor best;    // i32 [rows]: the argmax of each row's logits
    tensor::DeviceGraph graph;
  };

  void check_batch(const ForwardBatch& batch, size_t tokens) const;
  // Replaces the rows of h [tokens, hidden] that batch.input_rows names by batch.input_row_values.
  void substitute_input_rows(const ForwardBatch& batch, tensor::Tensor& h) const;
  // Adds batch.input_row_deepstack[layer] to the rows of h [tokens, hidden] that batch.input_rows names.
  void add_deepstack_rows(const ForwardBatch& batch, size_t layer, tensor::Tensor& h) const;
  // Runs the layers over the residual stream h [tokens, hidden] in place, except that the last
  // sublayer's output is returned ([tokens, hidden]) for the caller to add to h, alone or fused with
  // the final norm (ops::add_rms_norm); undefined without layers, or when the layers added it to h
  // themselves (the fused ops of few-row steps on one GPU).
  // `mrope_positions` [3, tokens] (defined only for a batch with ForwardBatch::mrope_positions)
  // rotates q and k by the model's M-RoPE layout in separate ops instead of the fused rotation.
  tensor::Tensor run_layers(tensor::Tensor& h, const tensor::Tensor& positions, const tensor::Tensor& slots,
                            const AttentionBatch& attention, const tensor::Tensor& mrope_positions = tensor::Tensor(),
                            const ForwardBatch* media = nullptr);
  // The attention input of layer `l` for a batch with M-RoPE positions: q [tokens, heads, hd] and
  // the K/V cache rows at `slots` from the normalised input x, rotated at mrope_positions [3, tokens].
  void multimodal_attention_input(Layer& l, const tensor::Tensor& x, const tensor::Tensor& mrope_positions,
                                  const tensor::Tensor& slots, tensor::Tensor& q);
  // Queues the ops of a fixed-size decode step, reading step.inputs and writing step.best.
  void queue_decode_step(DecodeStep& step);
  // The DecodeStep that runs `batch`, or nullptr when it must take the ordinary path.
  DecodeStep* decode_step_for(const ForwardBatch& batch);
  // Packs `batch` (padded to step.rows) in the staging buffer and queues its one upload to step.inputs.
  void upload_step_inputs(const ForwardBatch& batch, DecodeStep& step);
  void check_has_head(const char* caller) const;
  // What makes an asynchronous step's run differ: its integers go up without waiting for the device
  // and token t's id becomes previous_ids[rows[t]] where rows[t] >= 0 (ops::substitute_ids; rows
  // undefined: no substitution).
  struct StepChaining {
    tensor::Tensor previous_ids;  // i32 on the device
    tensor::Tensor rows;          // i32 [tokens] on the host
  };
  // An asynchronous step (launch_step): its ids on the device and their copy to the host. Two slots
  // alternate, as at most two steps are outstanding, so a slot's pinned buffer is rewritten only
  // after its step was waited for.
  struct AsyncStep {
    tensor::Tensor ids;  // i32 [rows] on the device; undefined when the step had no rows
    int64_t rows = 0;
    tensor::HostReadback readback;  // started only when rows > 0
  };
  // Whether launch_step/wait_step run on the device (see launch_step).
  bool steps_run_async() const;
  // Queues a step of launch_step on the device and returns its device-resident ids.
  tensor::Tensor queue_async_step(const ForwardBatch& batch, std::span<const tensor::ops::SamplingParams> params,
                                  std::span<const int32_t> previous_rows, const AsyncStep* previous);
  // Runs the layers over the batch (its token ids, or `inputs_embeds` when given) and returns the
  // logits [rows, columns] (on the model's device, in its dtype) of the rows the batch asks for:
  // columns is vocab_size, or with several ranks vocab_rows * ranks, the last shard's padding past
  // vocab_size included; undefined without an output head. `hidden_out`, when given, receives
  // those rows' post-norm hidden states; `chaining`, when given, makes it an asynchronous step's run.
  // final_norm false: `hidden_out` gets the rows as the last layer leaves them and no logits are made.
  tensor::Tensor run(const ForwardBatch& batch, const tensor::Tensor* inputs_embeds, tensor::Tensor* hidden_out,
                     const StepChaining* chaining = nullptr, bool final_norm = true);
  // Sums a row-parallel product's partial results over the ranks.
  void reduce_partial_sums(tensor::Tensor& x);
  // The logits of `picked` [rows, hidden] over the whole vocabulary (see run()); `order` is the
  // gather order of the ranks' rows (empty with one rank).
  tensor::Tensor project_vocabulary(const tensor::Tensor& picked, const tensor::Tensor& order);
  // A host tensor on the model's device.
  tensor::Tensor placed(const tensor::Tensor& host) const;
  // A weight of the checkpoint, whole, on the model's device in its dtype.
  tensor::Tensor load_weight(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape) const;

  TextModelConfig config_;
  DecoderVariant variant_;
  bool has_embedding_and_head_ = true;
  bool has_moe_ = false;
  // A mixture-of-experts layer routes on the host (model/moe_mlp.h's fallback): its steps read back.
  bool moe_reads_back_ = false;
  tensor::Device device_;
  tensor::DType dtype_;  // of weights, activations and the KV cache
  CausalLmInfo info_;
  float rope_theta_ = 10000.0f;
  tensor::ops::RopeSpec mrope_;  // the M-RoPE layout of ForwardBatch::mrope_positions (kNeox: none)
  tensor::Communicator* tensor_parallel_ = nullptr;
  DecoderShard shard_;
  // embed_tokens_ holds the shard's vocab_rows rows plus one zero row that every token outside
  // the shard's range reads; lm_head_ is [vocab_rows, hidden].
  tensor::Tensor embed_tokens_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  int num_blocks_ = 0;
  std::vector<DecodeStep> decode_steps_;  // ascending rows; empty: no fixed-size decode path
  int decode_table_width_ = 0;
  tensor::Tensor decode_staging_;  // host i32, the largest step's inputs
  std::array<AsyncStep, 2> async_steps_;
  int64_t launched_steps_ = 0, waited_steps_ = 0;  // step k uses async_steps_[k % 2]
  int64_t overlapped_launches_ = 0;
  int64_t fixed_decode_steps_ = 0;
  // A synchronous fixed-size step ran after the latest launch: the ids a DecodeStep's `best` holds
  // may no longer be that launch's, so the next launch may not read them.
  bool previous_ids_stale_ = false;
};

}  // namespace omni::model
