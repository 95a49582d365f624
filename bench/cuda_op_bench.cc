// Times the CUDA ops of a decode/prefill step on device 0 against the copy bandwidth measured in the
// same run. One line per case: time per call, the bytes the op must move (each input read once,
// each output written once), that over the time, and that as a fraction of the copy bandwidth;
// prefill and dense attention also print their matrix rate.
//
//   cuda_op_bench [iterations [section]]
//
// section: one of elementwise, linear, gemv, decode_attention, prefill_attention, dense_attention,
// sample, z_image (default: all of them). Times are CUDA-event times over `iterations` back-to-back calls after 5
// warm-up calls, so they include the host's launch overhead whenever that is longer than the kernel (no CUDA graphs),
// except the gemv section's, which replays calls recorded in a DeviceGraph as the decode step does, so that they show
// the kernels of products that take a few microseconds. Shapes are Qwen3-8B's (hidden 4096, 32 query / 8 kv heads,
// head_dim 128, vocab 151936; the gemv section adds Qwen3-TTS's talker and code predictor and Qwen3-0.6B,
// dense_attention Z-Image's); inputs are random, and working sets of the bandwidth cases exceed the 50 MB L2 where the
// case is large enough to be bandwidth-bound at all.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/image_kernels.h"
#include "tensor/cuda/kernels.h"
#include "tensor/device_graph.h"
#include "tensor/dit_ops.h"
#include "tensor/ops.h"

namespace {

using omni::tensor::Device;
using omni::tensor::DType;
using omni::tensor::Tensor;
namespace ops = omni::tensor::ops;
namespace cuda = omni::tensor::cuda;

// Uniform values in [-scale, scale) from a 64-bit LCG: gigabytes of random bf16 in about a second
// (std::normal_distribution would take a minute for the embedding table and the KV caches).
Tensor random_bf16(const omni::tensor::Shape& shape, std::mt19937& rng, float scale = 1.0f) {
  Tensor host = Tensor::empty(shape, DType::kBF16);
  uint64_t state = (static_cast<uint64_t>(rng()) << 32) | rng();
  uint16_t* data = host.data<uint16_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float u = static_cast<float>(state >> 40) * (1.0f / 16777216.0f);
    data[i] = omni::tensor::f32_to_bf16((2.0f * u - 1.0f) * scale);
  }
  return host.to(Device::cuda(0));
}

Tensor host_ints(const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kI32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

int g_iterations = 200;
double g_copy_bandwidth = 0.0;  // bytes/s

template <typename F>
double seconds_per_call(F&& call) {
  for (int i = 0; i < 5; ++i) call();  // plans, caches, clocks
  cudaStream_t stream = cuda::stream_for(0);
  cudaEvent_t start, stop;
  cuda::check(cudaEventCreate(&start), "cudaEventCreate", 0);
  cuda::check(cudaEventCreate(&stop), "cudaEventCreate", 0);
  cuda::check(cudaEventRecord(start, stream), "cudaEventRecord", 0);
  for (int i = 0; i < g_iterations; ++i) call();
  cuda::check(cudaEventRecord(stop, stream), "cudaEventRecord", 0);
  cuda::synchronize(0);
  float ms = 0.0f;
  cuda::check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", 0);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1e3 / g_iterations;
}

void report(const std::string& name, double seconds, double bytes, double flops = 0.0) {
  std::printf("%-58s %9.2f us %8.0f GB/s %5.0f%% of copy", name.c_str(), seconds * 1e6, bytes / seconds / 1e9,
              100.0 * bytes / seconds / g_copy_bandwidth);
  if (flops > 0.0) std::printf(" %7.1f TFLOP/s", flops / seconds / 1e12);
  std::printf("\n");
}

// Device-to-device copy of 2 GiB: bytes read plus bytes written, the ceiling of every case below.
void measure_copy_bandwidth() {
  const size_t bytes = size_t{2} << 30;
  void *src = nullptr, *dst = nullptr;
  cuda::check(cudaMalloc(&src, bytes), "cudaMalloc", 0);
  cuda::check(cudaMalloc(&dst, bytes), "cudaMalloc", 0);
  cuda::check(cudaMemset(src, 1, bytes), "cudaMemset", 0);
  const int saved = g_iterations;
  g_iterations = 20;
  const double s = seconds_per_call(
      [&] { cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda::stream_for(0)), "copy", 0); });
  g_iterations = saved;
  g_copy_bandwidth = 2.0 * bytes / s;
  std::printf("%-58s %9.2f us %8.0f GB/s (read + write)\n", "copy 2 GiB device to device", s * 1e6,
              g_copy_bandwidth / 1e9);
  cudaFree(src);
  cudaFree(dst);
}

void bench_elementwise(std::mt19937& rng) {
  const int hidden = 4096, inter = 12288, vocab = 151936;
  for (int tokens : {1, 256}) {
    const std::string at = " T=" + std::to_string(tokens);
    Tensor table = random_bf16({vocab, hidden}, rng);
    std::vector<int32_t> id_values(tokens);
    for (auto& id : id_values) id = static_cast<int32_t>(rng() % vocab);
    Tensor ids = host_ints(id_values).to(Device::cuda(0));
    Tensor x = random_bf16({tokens, hidden}, rng), residual = random_bf16({tokens, hidden}, rng);
    Tensor w = random_bf16({hidden}, rng), out = Tensor::empty({tokens, hidden}, DType::kBF16, Device::cuda(0));
    const double row = 2.0 * hidden;
    report("embedding bf16 H=4096" + at, seconds_per_call([&] { ops::embedding(table, ids, out); }), 2 * tokens * row);
    report("rms_norm bf16 H=4096" + at, seconds_per_call([&] { ops::rms_norm(x, w, 1e-6f, out); }),
           2 * tokens * row + row);
    report("add_rms_norm bf16 H=4096" + at, seconds_per_call([&] { ops::add_rms_norm(x, residual, w, 1e-6f, out); }),
           4 * tokens * row + row);

    Tensor gate_up = random_bf16({tokens, 2 * int64_t{inter}}, rng);
    Tensor act = Tensor::empty({tokens, inter}, DType::kBF16, Device::cuda(0));
    report("silu_and_mul bf16 I=12288" + at, seconds_per_call([&] { ops::silu_and_mul(gate_up, act); }),
           3.0 * tokens * inter * 2);

    Tensor q = random_bf16({tokens, 32, 128}, rng), k = random_bf16({tokens, 8, 128}, rng);
    Tensor qn = random_bf16({128}, rng), kn = random_bf16({128}, rng);
    std::vector<int32_t> pos(tokens);
    for (int t = 0; t < tokens; ++t) pos[t] = 100 + t;
    Tensor positions = host_ints(pos).to(Device::cuda(0));
    report("qk_norm_rope bf16 32/8 heads x 128" + at,
           seconds_per_call([&] { ops::qk_norm_rope(q, k, qn, kn, 1e-6f, positions, 1e6f); }),
           2.0 * tokens * 40 * 128 * 2);

    Tensor v = random_bf16({tokens, 8, 128}, rng);
    Tensor k_cache = random_bf16({4096, 16, 8, 128}, rng), v_cache = random_bf16({4096, 16, 8, 128}, rng);
    std::vector<int32_t> slot_values(tokens);
    for (int t = 0; t < tokens; ++t) slot_values[t] = static_cast<int32_t>(rng() % (int64_t{4096} * 16));
    Tensor slots = host_ints(slot_values).to(Device::cuda(0));
    report("store_kv bf16 8 x 128" + at, seconds_per_call([&] { ops::store_kv(k, v, slots, k_cache, v_cache); }),
           4.0 * tokens * 8 * 128 * 2);
  }
}

void bench_linear(std::mt19937& rng) {
  for (int m : {1, 8, 32}) {
    Tensor x = random_bf16({m, 4096}, rng), w = random_bf16({4096, 4096}, rng);
    Tensor out = Tensor::empty({m, 4096}, DType::kBF16, Device::cuda(0));
    report("linear bf16 " + std::to_string(m) + " x 4096 x 4096",
           seconds_per_call([&] { ops::linear(x, w, Tensor(), out); }), 4096.0 * 4096 * 2);
  }
}

// Seconds per call of record(i), i = 0 .. kCalls - 1 recorded in one graph and replayed.
template <typename F>
double seconds_per_graphed_call(F&& record) {
  constexpr int kCalls = 64;
  const omni::tensor::DeviceGraph graph = omni::tensor::DeviceGraph::capture(Device::cuda(0), [&] {
    for (int i = 0; i < kCalls; ++i) record(i);
  });
  const int saved = g_iterations;
  g_iterations = std::max(4, g_iterations / 10);
  const double s = seconds_per_call([&] { graph.replay(); });
  g_iterations = saved;
  return s / kCalls;
}

// Few-row bfloat16 products of the shapes decode steps issue (fused qkv and gate_up as
// DecoderLm loads them), through the matrix-vector kernel and through cuBLASLt in the same run.
// Consecutive calls cycle through copies of the weight that together exceed the 50 MB L2, as a
// decode step's layers do; bytes are the weight's plus x's and out's.
void bench_gemv(std::mt19937& rng) {
  struct Product {
    const char* what;
    int64_t n, k;
  };
  const Product products[] = {
      {"1024x1024", 1024, 1024},
      {"code predictor / 0.6B qkv", 4096, 1024},
      {"code predictor / 0.6B o", 1024, 2048},
      {"code predictor / 0.6B gate_up", 6144, 1024},
      {"code predictor / 0.6B down", 1024, 3072},
      {"code predictor lm_head", 2048, 1024},
      {"talker qkv", 4096, 2048},
      {"talker o", 2048, 2048},
      {"talker gate_up", 12288, 2048},
      {"talker down", 2048, 6144},
      {"talker codec_head", 3072, 2048},
      {"Qwen3-8B qkv", 6144, 4096},
      {"Qwen3-8B o", 4096, 4096},
      {"Qwen3-8B gate_up", 24576, 4096},
      {"Qwen3-8B down", 4096, 12288},
      {"Qwen3-0.6B lm_head", 151936, 1024},
  };
  const int64_t pool_elems = int64_t{256} << 20;  // 512 MiB of bfloat16
  Tensor pool = random_bf16({pool_elems}, rng, 0.05f);
  std::printf("%-44s %2s %22s %22s %8s\n", "linear bf16 N x K", "M", "gemv", "cuBLASLt", "speedup");
  for (const Product& shape : products) {
    const int64_t weight_elems = (shape.n * shape.k + 127) / 128 * 128;
    const int copies = static_cast<int>(std::clamp<int64_t>(pool_elems / weight_elems, 1, 64));
    std::vector<Tensor> weights;
    weights.reserve(copies);
    for (int i = 0; i < copies; ++i) {
      weights.push_back(Tensor::borrow(static_cast<uint16_t*>(pool.raw()) + i * weight_elems, {shape.n, shape.k},
                                       DType::kBF16, Device::cuda(0)));
    }
    for (int m : {1, 2, 3, 4, 6, 8}) {
      Tensor x = random_bf16({m, shape.k}, rng);
      Tensor out = Tensor::empty({m, shape.n}, DType::kBF16, Device::cuda(0));
      const double bytes = 2.0 * static_cast<double>(shape.n * shape.k + m * shape.k + m * shape.n);
      const double gemv = seconds_per_graphed_call([&](int i) { cuda::gemv(x, weights[i % copies], Tensor(), out); });
      const double blas =
          seconds_per_graphed_call([&](int i) { cuda::linear_cublas(x, weights[i % copies], Tensor(), out); });
      const std::string name =
          std::string(shape.what) + " " + std::to_string(shape.n) + " x " + std::to_string(shape.k);
      std::printf("%-44s %2d %8.2f us %6.2f TB/s %8.2f us %6.2f TB/s %7.2fx\n", name.c_str(), m, gemv * 1e6,
                  bytes / gemv / 1e12, blas * 1e6, bytes / blas / 1e12, blas / gemv);
    }
  }
}

void bench_decode_attention(std::mt19937& rng) {
  const int heads = 32, kv_heads = 8, head_dim = 128, block = 16;
  struct Case {
    int batch, context;
  };
  for (const Case c : {Case{1, 4096}, Case{1, 32768}, Case{8, 4096}, Case{32, 1024}, Case{32, 4096}, Case{128, 1024},
                       Case{256, 512}}) {
    const int blocks_per_seq = (c.context + 1 + block - 1) / block;
    Tensor k_cache = random_bf16({int64_t{c.batch} * blocks_per_seq, block, kv_heads, head_dim}, rng);
    Tensor v_cache = random_bf16({int64_t{c.batch} * blocks_per_seq, block, kv_heads, head_dim}, rng);
    Tensor q = random_bf16({c.batch, heads, head_dim}, rng);
    Tensor out = Tensor::empty({c.batch, heads, head_dim}, DType::kBF16, Device::cuda(0));
    // Blocks in a shuffled order, as a long-running KV pool hands them out.
    std::vector<int32_t> order(static_cast<size_t>(c.batch) * blocks_per_seq);
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::vector<int32_t>> tables(c.batch);
    std::vector<ops::PagedSequence> seqs(c.batch);
    for (int s = 0; s < c.batch; ++s) {
      tables[s].assign(order.begin() + static_cast<ptrdiff_t>(s) * blocks_per_seq,
                       order.begin() + static_cast<ptrdiff_t>(s + 1) * blocks_per_seq);
      seqs[s] = {s, 1, c.context, tables[s]};
    }
    const double sec = seconds_per_call([&] { ops::paged_attention(q, k_cache, v_cache, seqs, 0.088f, 0, out); });
    report("decode attention bf16 batch " + std::to_string(c.batch) + " context " + std::to_string(c.context), sec,
           2.0 * c.batch * (c.context + 1) * kv_heads * head_dim * 2);
  }
}

void bench_prefill_attention(std::mt19937& rng) {
  const int heads = 32, kv_heads = 8, head_dim = 128, block = 16;
  for (int tokens : {512, 2048, 8192}) {
    const int blocks = (tokens + block - 1) / block;
    Tensor k_cache = random_bf16({blocks, block, kv_heads, head_dim}, rng);
    Tensor v_cache = random_bf16({blocks, block, kv_heads, head_dim}, rng);
    Tensor q = random_bf16({tokens, heads, head_dim}, rng);
    Tensor out = Tensor::empty({tokens, heads, head_dim}, DType::kBF16, Device::cuda(0));
    std::vector<int32_t> table(blocks);
    for (int b = 0; b < blocks; ++b) table[b] = b;
    const std::vector<ops::PagedSequence> seqs = {{0, tokens, 0, table}};
    const double sec = seconds_per_call([&] { ops::paged_attention(q, k_cache, v_cache, seqs, 0.088f, 0, out); });
    // Causal: about half of the T x T scores, 2 products of 2 * head_dim flops each.
    const double flops = 4.0 * heads * head_dim * (static_cast<double>(tokens) * (tokens + 1) / 2);
    report("prefill attention bf16 causal T=" + std::to_string(tokens), sec,
           2.0 * tokens * heads * head_dim * 2 + 2.0 * tokens * kv_heads * head_dim * 2, flops);
  }
}

// ops::attention on Z-Image-Turbo's shapes at 1024x1024 (30 heads of 128): the joint blocks' 4096
// image + 32 caption tokens, the noise refiner's 4096 image tokens; the fused kernel against the
// cuBLASLt path with its materialised scores.
void bench_dense_attention(std::mt19937& rng) {
  const int heads = 30, head_dim = 128;
  for (int tokens : {4128, 4096}) {
    Tensor q = random_bf16({tokens, heads, head_dim}, rng), k = random_bf16({tokens, heads, head_dim}, rng);
    Tensor v = random_bf16({tokens, heads, head_dim}, rng);
    Tensor out = Tensor::empty({tokens, heads, head_dim}, DType::kBF16, Device::cuda(0));
    const float scale = 0.088f;
    const double flops = 4.0 * heads * head_dim * static_cast<double>(tokens) * tokens;
    const double bytes = 4.0 * tokens * heads * head_dim * 2;
    const std::string at = " bf16 S=" + std::to_string(tokens) + " 30x128";
    report("dense attention flash" + at, seconds_per_call([&] { cuda::flash_attention(q, k, v, scale, out); }), bytes,
           flops);
    report("dense attention cuBLASLt, scores materialised" + at,
           seconds_per_call([&] { cuda::materialised_attention(q, k, v, scale, out); }), bytes, flops);
  }
}

// One Z-Image joint block's steps at 1024x1024 (4128 tokens, dim 3840, 30 heads of 128, ffn 10240):
// each elementwise step unfused (the ops of ops.h in sequence) and fused (tensor/dit_ops.h), the
// block's products, and the FLUX.1 VAE decoder's heaviest 3x3 convolutions.
void bench_z_image(std::mt19937& rng) {
  const int64_t tokens = 4128, dim = 3840, heads = 30, hd = 128, ffn = 10240;
  const auto cuda0 = Device::cuda(0);
  Tensor x = random_bf16({tokens, dim}, rng), y = random_bf16({tokens, dim}, rng);
  Tensor w = random_bf16({dim}, rng), vec = random_bf16({dim}, rng);
  Tensor out = Tensor::empty({tokens, dim}, DType::kBF16, cuda0),
         tmp = Tensor::empty({tokens, dim}, DType::kBF16, cuda0);
  const double pass = 2.0 * tokens * dim;
  report("z_image adaLN norm unfused (rms_norm, mul_columns)", seconds_per_call([&] {
           ops::rms_norm(x, w, 1e-6f, out);
           ops::mul_columns(out, vec, out);
         }),
         4 * pass);
  report("z_image adaLN norm fused (modulated_rms_norm)",
         seconds_per_call([&] { ops::modulated_rms_norm(x, w, vec, 1e-6f, out); }), 2 * pass);
  report("z_image gated residual unfused (rms_norm, add_scaled)", seconds_per_call([&] {
           ops::rms_norm(y, w, 1e-6f, tmp);
           ops::add_scaled(x, tmp, vec, x);
         }),
         5 * pass);
  report("z_image gated residual fused (gated_rms_norm_add)",
         seconds_per_call([&] { ops::gated_rms_norm_add(x, y, w, vec, 1e-6f); }), 3 * pass);
  Tensor qkv = random_bf16({tokens, 3 * dim}, rng);
  Tensor q = Tensor::empty({tokens, heads, hd}, DType::kBF16, cuda0);
  Tensor k = Tensor::empty({tokens, heads, hd}, DType::kBF16, cuda0);
  Tensor v = Tensor::empty({tokens, heads, hd}, DType::kBF16, cuda0);
  Tensor qn = random_bf16({hd}, rng), kn = random_bf16({hd}, rng);
  Tensor cos = Tensor::empty({tokens, hd / 2}, DType::kF32, cuda0),
         sin = Tensor::empty({tokens, hd / 2}, DType::kF32, cuda0);
  cudaMemset(cos.raw(), 0, cos.nbytes());
  cudaMemset(sin.raw(), 0, sin.nbytes());
  report("z_image q/k norm + rotation unfused (rms_norm x2, rotate_pairs x2)", seconds_per_call([&] {
           ops::rms_norm(q, qn, 1e-5f, q);
           ops::rms_norm(k, kn, 1e-5f, k);
           ops::rotate_pairs(q, cos, sin);
           ops::rotate_pairs(k, cos, sin);
         }),
         8 * pass);
  report("z_image q/k/v split + norm + rotation fused (qkv_norm_rotate)",
         seconds_per_call([&] { ops::qkv_norm_rotate(qkv, qn, kn, 1e-5f, cos, sin, q, k, v); }), 6 * pass);
  Tensor gate_up = random_bf16({tokens, 2 * ffn}, rng), act = Tensor::empty({tokens, ffn}, DType::kBF16, cuda0);
  report("z_image silu_and_mul [4128, 2x10240]", seconds_per_call([&] { ops::silu_and_mul(gate_up, act); }),
         2.0 * tokens * ffn * 3);
  Tensor w_qkv = random_bf16({3 * dim, dim}, rng, 0.02f), w_o = random_bf16({dim, dim}, rng, 0.02f);
  Tensor w13 = random_bf16({2 * ffn, dim}, rng, 0.02f), w2 = random_bf16({dim, ffn}, rng, 0.02f);
  const auto product = [&](const char* name, const Tensor& in, const Tensor& weight, Tensor& dst) {
    const double flops = 2.0 * in.dim(0) * in.dim(1) * weight.dim(0);
    report(name, seconds_per_call([&] { ops::linear(in, weight, Tensor(), dst); }),
           2.0 * (in.numel() + weight.numel() + dst.numel()), flops);
  };
  product("z_image product q/k/v fused [4128,3840]x[11520,3840]", x, w_qkv, qkv);
  Tensor q_flat = q.reshape({tokens, dim});
  report("z_image product q/k/v as three [4128,3840]x[3840,3840]", seconds_per_call([&] {
           for (int i = 0; i < 3; ++i) ops::linear(x, w_qkv.slice_rows(i * dim, (i + 1) * dim), Tensor(), q_flat);
         }),
         2.0 * (3 * x.numel() + w_qkv.numel() + 3 * q_flat.numel()), 2.0 * tokens * dim * 3 * dim);
  product("z_image product out [4128,3840]x[3840,3840]", x, w_o, out);
  product("z_image product w13 [4128,3840]x[20480,3840]", x, w13, gate_up);
  product("z_image product w2 [4128,10240]x[3840,10240]", act, w2, out);
  // The VAE decoder's 3x3 convolutions of most work (channels-last, padding 1).
  struct Conv {
    int64_t side, cin, cout;
  };
  const int saved = g_iterations;
  g_iterations = std::max(1, saved / 10);
  for (const Conv c : {Conv{1024, 128, 128}, Conv{1024, 256, 128}, Conv{1024, 256, 256}, Conv{512, 256, 256},
                       Conv{512, 512, 512}, Conv{256, 512, 512}}) {
    Tensor img = random_bf16({c.side, c.side, c.cin}, rng);
    Tensor cw = random_bf16({c.cout, c.cin, 3, 3}, rng, 0.05f), cb = random_bf16({c.cout}, rng);
    Tensor co = Tensor::empty({c.side, c.side, c.cout}, DType::kBF16, cuda0);
    const double flops = 2.0 * c.side * c.side * c.cin * c.cout * 9;
    report("vae conv2d 3x3 " + std::to_string(c.side) + "^2 " + std::to_string(c.cin) + "->" + std::to_string(c.cout),
           seconds_per_call([&] { ops::conv2d(img, cw, cb, 1, 1, co); }), 2.0 * (img.numel() + co.numel()), flops);
    Tensor flat = img.reshape({c.side * c.side, c.cin});
    Tensor nw = random_bf16({c.cin}, rng), nb = random_bf16({c.cin}, rng);
    Tensor no = Tensor::empty({c.side * c.side, c.cin}, DType::kBF16, cuda0);
    report("vae group_norm 32 + silu " + std::to_string(c.side) + "^2 x " + std::to_string(c.cin),
           seconds_per_call([&] {
             ops::group_norm(flat, 32, nw, nb, 1e-6f, no);
             ops::silu(no, no);
           }),
           2.0 * 5 * flat.numel());
  }
  g_iterations = saved;
}

void bench_sample(std::mt19937& rng) {
  const int vocab = 151936;
  for (int rows : {1, 32, 256}) {
    Tensor logits = random_bf16({rows, vocab}, rng, 3.0f);
    Tensor ids = Tensor::empty({rows}, DType::kI32, Device::cuda(0));
    std::vector<ops::SamplingParams> greedy(rows), full(rows), filtered(rows);
    for (int r = 0; r < rows; ++r) {
      greedy[r].temperature = 0.0f;
      full[r].seed = filtered[r].seed = r;
      filtered[r].top_k = 50;
      filtered[r].top_p = 0.9f;
      filtered[r].min_p = 0.05f;
    }
    const std::string at = " rows " + std::to_string(rows) + " V=151936";
    const double bytes = 2.0 * rows * vocab;
    report("sample greedy bf16" + at, seconds_per_call([&] { ops::sample(logits, greedy, ids); }), bytes);
    report("sample temperature 1 bf16" + at, seconds_per_call([&] { ops::sample(logits, full, ids); }), bytes);
    report("sample top-k 50 top-p 0.9 min-p 0.05 bf16" + at,
           seconds_per_call([&] { ops::sample(logits, filtered, ids); }), bytes);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (omni::tensor::cuda_device_count() == 0) {
    std::fprintf(stderr, "cuda_op_bench: no CUDA device visible\n");
    return 1;
  }
  g_iterations = argc > 1 ? std::atoi(argv[1]) : 200;
  const std::string only = argc > 2 ? argv[2] : "";
  const std::pair<const char*, void (*)(std::mt19937&)> sections[] = {
      {"elementwise", bench_elementwise},
      {"linear", bench_linear},
      {"gemv", bench_gemv},
      {"decode_attention", bench_decode_attention},
      {"prefill_attention", bench_prefill_attention},
      {"dense_attention", bench_dense_attention},
      {"sample", bench_sample},
      {"z_image", bench_z_image},
  };
  if (!only.empty() &&
      std::none_of(std::begin(sections), std::end(sections), [&](const auto& s) { return only == s.first; })) {
    std::fprintf(stderr,
                 "cuda_op_bench: unknown section '%s' (elementwise, linear, gemv, decode_attention, "
                 "prefill_attention, dense_attention, sample, z_image)\n",
                 only.c_str());
    return 2;
  }
  std::mt19937 rng(7);
  measure_copy_bandwidth();
  for (const auto& [name, run] : sections) {
    if (only.empty() || only == name) run(rng);
  }
  return 0;
}
