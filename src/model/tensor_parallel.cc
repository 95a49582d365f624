#include "model/tensor_parallel.h"

#include <algorithm>

#include "base/error.h"

namespace omni::model {

using tensor::DType;
using tensor::Tensor;

DecoderShard plan_decoder_shard(const TextModelConfig& config, int rank, int size, const std::string& source) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw_error(ErrorCode::kInvalidConfig, "{}: tensor-parallel rank {} of size {}", source, rank, size);
  }
  const int heads = config.num_attention_heads, kv_heads = config.num_key_value_heads;
  if (heads % size != 0) {
    throw_error(ErrorCode::kInvalidConfig,
                "{}: tensor_parallel_size {} does not divide num_attention_heads {} (each rank takes whole heads)",
                source, size, heads);
  }
  if (kv_heads % size != 0 && size % kv_heads != 0) {
    throw_error(ErrorCode::kInvalidConfig,
                "{}: tensor_parallel_size {} and num_key_value_heads {}: one must divide the other (KV heads are "
                "split or replicated)",
                source, size, kv_heads);
  }
  if (config.intermediate_size % size != 0) {
    throw_error(ErrorCode::kInvalidConfig, "{}: tensor_parallel_size {} does not divide intermediate_size {}", source,
                size, config.intermediate_size);
  }
  DecoderShard s;
  s.rank = rank;
  s.size = size;
  s.heads = heads / size;
  if (kv_heads >= size) {
    s.kv_heads = kv_heads / size;
    s.kv_head_begin = rank * s.kv_heads;
  } else {
    // size / kv_heads ranks share each KV head; the rank's query heads all read that one.
    s.kv_heads = 1;
    s.kv_head_begin = rank / (size / kv_heads);
  }
  s.intermediate = config.intermediate_size / size;
  s.vocab_rows = (config.vocab_size + size - 1) / size;
  s.vocab_begin = rank * s.vocab_rows;
  return s;
}

Tensor load_row_shard(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape, int64_t begin,
                      int64_t count, DType dtype, tensor::Device device) {
  tensor::Shape part = shape;
  part[0] = count;
  Tensor t = Tensor::empty(part, dtype, device);
  ckpt.load_slice_into(name, shape, 0, begin, count, t, 0);
  return t;
}

Tensor load_column_shard(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape, int64_t begin,
                         int64_t count, DType dtype, tensor::Device device) {
  Tensor t = Tensor::empty({shape.at(0), count}, dtype, device);
  ckpt.load_slice_into(name, shape, 1, begin, count, t, 0);
  return t;
}

Tensor load_vocab_shard(const Checkpoint& ckpt, const std::string& name, const tensor::Shape& shape, int64_t begin,
                        int64_t count, int64_t rows, DType dtype, tensor::Device device) {
  const int64_t hidden = shape.at(1);
  Tensor t = Tensor::zeros({rows, hidden}, dtype, device);
  const int64_t present = std::clamp<int64_t>(shape.at(0) - begin, 0, count);
  ckpt.load_slice_into(name, shape, 0, std::min(begin, shape.at(0)), present, t, 0);
  return t;
}

}  // namespace omni::model
