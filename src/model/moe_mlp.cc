#include "model/moe_mlp.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "model/safetensors.h"
#include "tensor/convert.h"
#include "tensor/moe_ops.h"
#include "tensor/ops.h"

namespace omni::model {

using tensor::Device;
using tensor::DeviceType;
using tensor::DType;
using tensor::Tensor;
namespace ops = tensor::ops;

MoeMlp::MoeMlp(const Checkpoint& ckpt, const std::string& prefix, const MoeConfig& moe, int64_t hidden, DType dtype,
               Device device)
    : moe_(moe), hidden_(hidden), dtype_(dtype), device_(device) {
  const int64_t experts = moe.num_experts, inter = moe.moe_intermediate_size;
  router_ = ckpt.load(prefix + "gate.weight", {experts, hidden}, dtype, device);
  const std::string fused_gate_up = prefix + "experts.gate_up_proj", fused_down = prefix + "experts.down_proj";
  if (ckpt.contains(fused_gate_up) || ckpt.contains(fused_down)) {
    gate_up_ =
        ckpt.load(fused_gate_up, {experts, 2 * inter, hidden}, dtype, device).reshape({experts * 2 * inter, hidden});
    down_ = ckpt.load(fused_down, {experts, hidden, inter}, dtype, device).reshape({experts * hidden, inter});
  } else {
    load_per_expert(ckpt, prefix);
  }
  if (const int64_t shared = moe.shared_expert_intermediate_size; shared > 0) {
    const std::string p = prefix + "shared_expert.";
    shared_gate_up_ = Tensor::empty({2 * shared, hidden}, dtype, device);
    ckpt.load_slice_into(p + "gate_proj.weight", {shared, hidden}, 0, 0, shared, shared_gate_up_, 0);
    ckpt.load_slice_into(p + "up_proj.weight", {shared, hidden}, 0, 0, shared, shared_gate_up_,
                         static_cast<size_t>(shared * hidden));
    shared_down_ = ckpt.load(p + "down_proj.weight", {hidden, shared}, dtype, device);
    shared_gate_ = ckpt.load(prefix + "shared_expert_gate.weight", {1, hidden}, dtype, device);
  }
  // The routing kernel takes up to 64 choices and the grouping 4096 experts; the grouped products
  // read rows in 16-byte chunks (8 bfloat16/float16 values, 4 float32 ones).
  on_device_ = device.type == DeviceType::kCuda && moe.num_experts_per_tok <= 64 && moe.num_experts <= 4096 &&
               hidden % 8 == 0 && inter % 8 == 0;
}

void MoeMlp::load_per_expert(const Checkpoint& ckpt, const std::string& prefix) {
  const int64_t experts = moe_.num_experts, inter = moe_.moe_intermediate_size, hidden = hidden_;
  gate_up_ = Tensor::empty({experts * 2 * inter, hidden}, dtype_, device_);
  down_ = Tensor::empty({experts * hidden, inter}, dtype_, device_);
  const size_t gate_up_block = static_cast<size_t>(2 * inter * hidden),
               down_block = static_cast<size_t>(hidden * inter);
  for (int64_t e = 0; e < experts; ++e) {
    const std::string p = prefix + "experts." + std::to_string(e) + ".";
    ckpt.load_slice_into(p + "gate_proj.weight", {inter, hidden}, 0, 0, inter, gate_up_, e * gate_up_block);
    ckpt.load_slice_into(p + "up_proj.weight", {inter, hidden}, 0, 0, inter, gate_up_,
                         e * gate_up_block + static_cast<size_t>(inter * hidden));
    ckpt.load_slice_into(p + "down_proj.weight", {hidden, inter}, 0, 0, hidden, down_, e * down_block);
  }
}

void MoeMlp::route(const float* logits, int num_experts, int top_k, bool norm_topk_prob, int32_t* experts,
                   float* weights) {
  // Softmax in float32 (as Hugging Face's router, whatever the activation dtype).
  const float top = *std::max_element(logits, logits + num_experts);
  std::vector<float> probs(num_experts);
  float sum = 0.0f;
  for (int e = 0; e < num_experts; ++e) {
    probs[e] = std::exp(logits[e] - top);
    sum += probs[e];
  }
  for (float& p : probs) p /= sum;
  std::vector<int32_t> order(num_experts);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                    [&](int32_t a, int32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
  float kept = 0.0f;
  for (int j = 0; j < top_k; ++j) kept += probs[order[j]];
  for (int j = 0; j < top_k; ++j) {
    experts[j] = order[j];
    weights[j] = norm_topk_prob ? probs[order[j]] / kept : probs[order[j]];
  }
}

size_t MoeMlp::activation_bytes(int64_t tokens) const {
  const size_t rows = static_cast<size_t>(tokens) * moe_.num_experts_per_tok;
  const size_t inter = moe_.moe_intermediate_size;
  // Router logits; the gathered rows, gate/up, act and the experts' outputs.
  size_t elements =
      static_cast<size_t>(tokens) * (moe_.num_experts + moe_.num_experts_per_tok) + rows * (2 * hidden_ + 3 * inter);
  // The shared expert's gate/up, act, output and gate.
  const size_t shared = moe_.shared_expert_intermediate_size;
  if (shared > 0) elements += static_cast<size_t>(tokens) * (3 * shared + hidden_ + 1);
  return elements * tensor::dtype_size(dtype_);
}

void MoeMlp::forward(const Tensor& x, Tensor& out) const {
  if (on_device_) {
    forward_on_device(x, out);
  } else {
    forward_on_host(x, out);
  }
  if (shared_gate_.defined() && x.dim(0) > 0) add_shared_expert(x, out);
}

void MoeMlp::add_shared_expert(const Tensor& x, Tensor& out) const {
  const int64_t tokens = x.dim(0), shared = moe_.shared_expert_intermediate_size;
  Tensor gate_up = Tensor::empty({tokens, 2 * shared}, dtype_, device_);
  ops::linear(x, shared_gate_up_, Tensor(), gate_up);
  Tensor act = Tensor::empty({tokens, shared}, dtype_, device_);
  ops::silu_and_mul(gate_up, act);
  Tensor expert_out = Tensor::empty({tokens, hidden_}, dtype_, device_);
  ops::linear(act, shared_down_, Tensor(), expert_out);
  Tensor gate = Tensor::empty({tokens, 1}, dtype_, device_);
  ops::linear(x, shared_gate_, Tensor(), gate);
  ops::sigmoid(gate, gate);
  ops::add_row_scaled(out, expert_out, gate.reshape({tokens}), out);
}

void MoeMlp::forward_on_device(const Tensor& x, Tensor& out) const {
  const int64_t tokens = x.dim(0), experts = moe_.num_experts, k = moe_.num_experts_per_tok;
  const int64_t inter = moe_.moe_intermediate_size, pairs = tokens * k;
  if (tokens == 0) return;
  Tensor logits = Tensor::empty({tokens, experts}, dtype_, device_);
  ops::linear(x, router_, Tensor(), logits);
  Tensor chosen = Tensor::empty({tokens, k}, DType::kI32, device_);
  Tensor weights = Tensor::empty({tokens, k}, dtype_, device_);
  ops::moe_route(logits, static_cast<int>(k), moe_.norm_topk_prob, chosen, weights);
  Tensor offsets = Tensor::empty({experts + 1}, DType::kI32, device_);
  Tensor rows = Tensor::empty({pairs}, DType::kI32, device_);
  Tensor index = Tensor::empty({tokens, k}, DType::kI32, device_);
  ops::moe_group(chosen, static_cast<int>(experts), offsets, rows, index);
  // A token picks an expert at most once: no expert holds more rows than there are tokens.
  Tensor gate_up = Tensor::empty({pairs, 2 * inter}, dtype_, device_);
  ops::grouped_linear(x, rows, gate_up_, offsets, tokens, gate_up);
  Tensor act = Tensor::empty({pairs, inter}, dtype_, device_);
  ops::silu_and_mul(gate_up, act);
  Tensor expert_out = Tensor::empty({pairs, hidden_}, dtype_, device_);
  ops::grouped_linear(act, Tensor(), down_, offsets, tokens, expert_out);
  ops::gather_weighted_sum(expert_out, index, weights, out);
}

void MoeMlp::forward_on_host(const Tensor& x, Tensor& out) const {
  const int64_t tokens = x.dim(0), experts = moe_.num_experts, k = moe_.num_experts_per_tok;
  const int64_t inter = moe_.moe_intermediate_size;
  Tensor logits = Tensor::empty({tokens, experts}, dtype_, device_);
  ops::linear(x, router_, Tensor(), logits);
  const Tensor host_logits = device_.type == DeviceType::kCpu ? logits : logits.to(Device::cpu());
  std::vector<float> scores(static_cast<size_t>(tokens * experts));
  tensor::convert_to_f32(host_logits.dtype(), host_logits.raw(), scores.data(), scores.size());

  // Each token's experts and weights, then the (token, choice) pairs grouped by expert: rows[p] is
  // the token of grouped row p, index[t, j] the grouped row of token t's j-th choice.
  std::vector<int32_t> chosen(static_cast<size_t>(tokens * k));
  std::vector<float> weights(chosen.size());
  std::vector<int64_t> begin(experts + 1, 0);
  for (int64_t t = 0; t < tokens; ++t) {
    route(scores.data() + t * experts, static_cast<int>(experts), static_cast<int>(k), moe_.norm_topk_prob,
          chosen.data() + t * k, weights.data() + t * k);
    for (int64_t j = 0; j < k; ++j) ++begin[chosen[t * k + j] + 1];
  }
  std::partial_sum(begin.begin(), begin.end(), begin.begin());
  Tensor rows = Tensor::empty({tokens * k}, DType::kI32);
  Tensor index = Tensor::empty({tokens, k}, DType::kI32);
  std::vector<int64_t> next(begin.begin(), begin.end() - 1);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t p = next[chosen[t * k + j]]++;
      rows.data<int32_t>()[p] = static_cast<int32_t>(t);
      index.data<int32_t>()[t * k + j] = static_cast<int32_t>(p);
    }
  }
  // The weights in the activation dtype, as Hugging Face casts them before the weighted sum.
  Tensor weight_rows = Tensor::empty({tokens, k}, dtype_);
  tensor::convert_elements(DType::kF32, weights.data(), dtype_, weight_rows.raw(), weights.size());
  if (device_.type != DeviceType::kCpu) weight_rows = weight_rows.to(device_);

  const int64_t n = tokens * k;
  Tensor grouped = Tensor::empty({n, hidden_}, dtype_, device_);
  ops::embedding(x, rows, grouped);
  Tensor gate_up = Tensor::empty({n, 2 * inter}, dtype_, device_);
  Tensor act = Tensor::empty({n, inter}, dtype_, device_);
  Tensor expert_out = Tensor::empty({n, hidden_}, dtype_, device_);
  for (int64_t e = 0; e < experts; ++e) {
    if (begin[e] == begin[e + 1]) continue;
    Tensor rows_out = gate_up.slice_rows(begin[e], begin[e + 1]);
    ops::linear(grouped.slice_rows(begin[e], begin[e + 1]), gate_up_.slice_rows(e * 2 * inter, (e + 1) * 2 * inter),
                Tensor(), rows_out);
  }
  ops::silu_and_mul(gate_up, act);
  for (int64_t e = 0; e < experts; ++e) {
    if (begin[e] == begin[e + 1]) continue;
    Tensor rows_out = expert_out.slice_rows(begin[e], begin[e + 1]);
    ops::linear(act.slice_rows(begin[e], begin[e + 1]), down_.slice_rows(e * hidden_, (e + 1) * hidden_), Tensor(),
                rows_out);
  }
  ops::gather_weighted_sum(expert_out, index, weight_rows, out);
}

}  // namespace omni::model
