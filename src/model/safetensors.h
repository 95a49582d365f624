// Reading Hugging Face checkpoints in the safetensors format, memory-mapped.
//
// A SafetensorsFile maps one file read-only and indexes its header; a Checkpoint is a model
// folder holding either `model.safetensors` or shards listed by `model.safetensors.index.json`.
// Tensors come out as float32 CPU tensors whatever their on-disk type (F32, BF16, F16).
// Both classes are immutable after opening and safe to read from several threads. Errors are
// omni::Error: kNotFound for a missing file, kLoadFailed for anything malformed, missing or
// mis-shaped, always naming the file and the tensor.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"
#include "tensor/upload.h"

namespace omni::model {

struct SafetensorsEntry {
  tensor::DType dtype = tensor::DType::kF32;
  tensor::Shape shape;
  const void* data = nullptr;  // into the mapping; valid while the file is open
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // nullptr when the file has no tensor of that name.
  const SafetensorsEntry* find(const std::string& name) const;
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  // Bytes at `data` (inside the mapping) as a copy source: the mapping, and the same bytes in the
  // file, which stays open for reading them without first-touching the mapping.
  tensor::HostSource source(const void* data) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  void* mapping_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
};

class Checkpoint {
 public:
  // Opens `dir`/model.safetensors.index.json when present (every shard it names), else
  // `dir`/model.safetensors.
  static Checkpoint open(const std::filesystem::path& dir);
  // The same for files named `stem`.safetensors(.index.json): diffusers names its models'
  // weights "diffusion_pytorch_model".
  static Checkpoint open(const std::filesystem::path& dir, const std::string& stem);
  // Whether `dir` holds `stem`.safetensors or its index: a folder without them serves only with
  // random weights (`--load-format dummy`), and the optional towers a loader looks for are absent.
  static bool has_files(const std::filesystem::path& dir, const std::string& stem = "model");

  // A checkpoint without files for `dir`'s config.json (vLLM's `--load-format dummy`): it holds
  // every tensor a loader asks for, of the shape it asks for, with values made on the destination
  // device by tensor/uniform_fill.h from (seed, the tensor's name, the element's index): uniform in
  // [-kRandomWeightScale, kRandomWeightScale), norm weights (names ending in "norm.weight") in
  // [1 - kRandomWeightScale, 1 + kRandomWeightScale). contains() answers true for every name, so a
  // loader that can read two layouts takes the one it tries first. For benchmarks of shapes too
  // large to write to disk; the numbers it computes mean nothing.
  static constexpr float kRandomWeightScale = 0.05f;
  static Checkpoint random(const std::filesystem::path& dir, uint64_t seed);
  bool is_random() const { return random_; }

  const std::filesystem::path& dir() const { return dir_; }
  bool contains(const std::string& name) const;
  std::vector<std::string> tensor_names() const;

  // The tensor as float32, checked against `expected` ("tensor 'x' is missing" / "has shape
  // [a] in FILE, expected [b]").
  tensor::Tensor load_f32(const std::string& name, const tensor::Shape& expected) const;
  // Same, converted into `dst`, which holds shape_numel(expected) floats.
  void load_f32_into(const std::string& name, const tensor::Shape& expected, float* dst) const;
  // Only indices [begin, begin + count) of dimension `dim` (0 or 1 of a 1-D or 2-D tensor),
  // converted into `dst` (the slice, contiguous): a tensor-parallel rank touches only its shard
  // of the mapping. kInvalidArgument for a slice outside the tensor.
  void load_f32_slice_into(const std::string& name, const tensor::Shape& expected, int dim, int64_t begin,
                           int64_t count, float* dst) const;
  // Same as `dtype` (float32, bfloat16 or float16) into `dst`, which holds the slice in that dtype.
  void load_slice_into(const std::string& name, const tensor::Shape& expected, int dim, int64_t begin, int64_t count,
                       tensor::DType dtype, void* dst) const;
  // Same into the contiguous tensor `dst` on any device, in dst's dtype, from element `dst_offset`
  // on (tensor::copy_from_host: on a GPU through pinned staging with the conversion on the device).
  // A slice of dimension 1 is gathered on the host first.
  void load_slice_into(const std::string& name, const tensor::Shape& expected, int dim, int64_t begin, int64_t count,
                       tensor::Tensor& dst, size_t dst_offset) const;
  // The tensor as `dtype` (float32, bfloat16 or float16) on `device`: the file's bytes when it
  // stores that dtype, else converted (rounding to nearest even), on the host or on the GPU.
  tensor::Tensor load(const std::string& name, const tensor::Shape& expected, tensor::DType dtype,
                      tensor::Device device = tensor::Device::cpu()) const;

 private:
  void check_random_slice(const std::string& name, const tensor::Shape& expected, int dim, int64_t begin,
                          int64_t count) const;
  void fill_random_slice(const std::string& name, const tensor::Shape& expected, int dim, int64_t begin, int64_t count,
                         tensor::Tensor& dst, size_t dst_offset) const;
  // kInternal unless `dtype` is one the loaders convert to.
  void check_load_dtype(const std::string& name, tensor::DType dtype) const;
  const SafetensorsEntry& entry(const std::string& name, const tensor::Shape& expected,
                                const SafetensorsFile** file) const;

  // Fills elements [offset, offset + count) of dst with the random tensor `name`'s elements from
  // `first` on.
  void fill_random(const std::string& name, tensor::Tensor& dst, size_t offset, size_t count, uint64_t first) const;

  std::filesystem::path dir_;
  bool random_ = false;
  uint64_t seed_ = 0;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> file_of_;  // tensor name -> index into files_
};

}  // namespace omni::model
