#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "base/error.h"
#include "base/json.h"
#include "base/splitmix64.h"
#include "tensor/convert.h"
#include "tensor/uniform_fill.h"
#include "tensor/upload.h"

namespace omni::model {
namespace {

using tensor::DType;

bool parse_dtype(const std::string& name, DType& out) {
  static const std::map<std::string, DType> kTypes = {
      {"F32", DType::kF32}, {"BF16", DType::kBF16}, {"F16", DType::kF16}, {"I32", DType::kI32}, {"I64", DType::kI64}};
  auto it = kTypes.find(name);
  if (it == kTypes.end()) return false;
  out = it->second;
  return true;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  const std::string where = path.string();
  int fd = ::open(where.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_error(ErrorCode::kNotFound, "{}: cannot open: {}", where, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw_error(ErrorCode::kLoadFailed, "{}: cannot stat: {}", where, std::strerror(errno));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    throw_error(ErrorCode::kLoadFailed, "{}: {} bytes is too short for a safetensors file", where, size_);
  }
  mapping_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapping_ == MAP_FAILED) {
    ::close(fd);
    mapping_ = nullptr;
    throw_error(ErrorCode::kLoadFailed, "{}: mmap failed: {}", where, std::strerror(errno));
  }
  try {
    const auto* bytes = static_cast<const unsigned char*>(mapping_);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
    if (header_len > size_ - 8) {
      throw_error(ErrorCode::kLoadFailed, "{}: header length {} runs past the end of the file ({} bytes)", where,
                  header_len, size_);
    }
    const Json header = parse_json(std::string_view(reinterpret_cast<const char*>(bytes + 8), header_len), where);
    if (!header.is_object()) throw_error(ErrorCode::kLoadFailed, "{}: header is not a JSON object", where);
    const unsigned char* data = bytes + 8 + header_len;
    const size_t data_size = size_ - 8 - header_len;
    for (const auto& [name, info] : header.items()) {
      if (name == "__metadata__") continue;
      SafetensorsEntry e;
      try {
        const std::string dtype = info.at("dtype").get<std::string>();
        if (!parse_dtype(dtype, e.dtype)) {
          throw_error(ErrorCode::kLoadFailed, "{}: tensor '{}' has unsupported dtype {} (F32, BF16, F16, I32, I64)",
                      where, name, dtype);
        }
        e.shape = info.at("shape").get<tensor::Shape>();
        const auto offsets = info.at("data_offsets").get<std::vector<uint64_t>>();
        // The shape's bytes, computed without overflow: a shape whose product wraps around
        // could otherwise match small offsets and let a load read far past the mapping.
        uint64_t want = tensor::dtype_size(e.dtype);
        for (int64_t d : e.shape) {
          if (d < 0) {
            throw_error(ErrorCode::kLoadFailed, "{}: tensor '{}' has a negative dimension in shape {}", where, name,
                        tensor::shape_to_string(e.shape));
          }
          if (__builtin_mul_overflow(want, static_cast<uint64_t>(d), &want)) {
            throw_error(ErrorCode::kLoadFailed, "{}: tensor '{}' has shape {}, whose size in bytes overflows 64 bits",
                        where, name, tensor::shape_to_string(e.shape));
          }
        }
        if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size ||
            offsets[1] - offsets[0] != want) {
          throw_error(ErrorCode::kLoadFailed,
                      "{}: tensor '{}' has data_offsets that do not fit its shape {} or the file", where, name,
                      tensor::shape_to_string(e.shape));
        }
        e.data = data + offsets[0];
      } catch (const Json::exception& ex) {
        throw_error(ErrorCode::kLoadFailed, "{}: tensor '{}' has a malformed header entry: {}", where, name, ex.what());
      }
      entries_.emplace(name, std::move(e));
    }
  } catch (...) {
    ::munmap(mapping_, size_);
    ::close(fd);
    mapping_ = nullptr;
    throw;
  }
  fd_ = fd;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) ::munmap(mapping_, size_);
  if (fd_ >= 0) ::close(fd_);
}

tensor::HostSource SafetensorsFile::source(const void* data) const {
  return {data, fd_, static_cast<const char*>(data) - static_cast<const char*>(mapping_)};
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

Checkpoint Checkpoint::open(const std::filesystem::path& dir) { return open(dir, "model"); }

bool Checkpoint::has_files(const std::filesystem::path& dir, const std::string& stem) {
  return std::filesystem::exists(dir / (stem + ".safetensors.index.json")) ||
         std::filesystem::exists(dir / (stem + ".safetensors"));
}

Checkpoint Checkpoint::open(const std::filesystem::path& dir, const std::string& stem) {
  Checkpoint c;
  c.dir_ = dir;
  const auto index_path = dir / (stem + ".safetensors.index.json");
  if (std::filesystem::exists(index_path)) {
    const Json index = read_json_file(index_path);
    if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw_error(ErrorCode::kLoadFailed, "{}: no 'weight_map' object", index_path.string());
    }
    std::map<std::string, size_t> shard_index;
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) {
        throw_error(ErrorCode::kLoadFailed, "{}: weight_map entry '{}' is not a file name", index_path.string(), name);
      }
      const std::string file = shard.get<std::string>();
      auto [it, added] = shard_index.emplace(file, c.files_.size());
      if (added) c.files_.push_back(std::make_shared<SafetensorsFile>(dir / file));
      if (!c.files_[it->second]->find(name)) {
        throw_error(ErrorCode::kLoadFailed, "{}: names tensor '{}' in {}, which does not hold it", index_path.string(),
                    name, file);
      }
      c.file_of_[name] = it->second;
    }
    return c;
  }
  const auto single = dir / (stem + ".safetensors");
  if (!std::filesystem::exists(single)) {
    throw_error(ErrorCode::kNotFound, "{}: no {}.safetensors or {}.safetensors.index.json", dir.string(), stem, stem);
  }
  c.files_.push_back(std::make_shared<SafetensorsFile>(single));
  for (const auto& [name, entry] : c.files_[0]->entries()) c.file_of_[name] = 0;
  return c;
}

Checkpoint Checkpoint::random(const std::filesystem::path& dir, uint64_t seed) {
  Checkpoint c;
  c.dir_ = dir;
  c.random_ = true;
  c.seed_ = seed;
  return c;
}

void Checkpoint::fill_random(const std::string& name, tensor::Tensor& dst, size_t offset, size_t count,
                             uint64_t first) const {
  // FNV-1a of the name, mixed with the seed: each tensor its own stream.
  uint64_t key = 0xcbf29ce484222325ull;
  for (const char ch : name) key = (key ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
  const bool norm = name.size() >= 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0;
  const float lo = norm ? 1.0f - kRandomWeightScale : -kRandomWeightScale;
  const float hi = norm ? 1.0f + kRandomWeightScale : kRandomWeightScale;
  tensor::fill_uniform(dst, offset, count, splitmix64_mix(key ^ seed_), first, lo, hi);
}

bool Checkpoint::contains(const std::string& name) const { return random_ || file_of_.count(name) != 0; }

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, index] : file_of_) names.push_back(name);
  return names;
}

const SafetensorsEntry& Checkpoint::entry(const std::string& name, const tensor::Shape& expected,
                                          const SafetensorsFile** file) const {
  auto it = file_of_.find(name);
  if (it == file_of_.end()) {
    throw_error(ErrorCode::kLoadFailed, "checkpoint {}: tensor '{}' is missing (expected shape {})", dir_.string(),
                name, tensor::shape_to_string(expected));
  }
  *file = files_[it->second].get();
  const SafetensorsEntry& e = *(*file)->find(name);
  if (e.shape != expected) {
    throw_error(ErrorCode::kLoadFailed, "checkpoint {}: tensor '{}' has shape {} in {}, expected {}", dir_.string(),
                name, tensor::shape_to_string(e.shape), (*file)->path().filename().string(),
                tensor::shape_to_string(expected));
  }
  if (e.dtype != DType::kF32 && e.dtype != DType::kBF16 && e.dtype != DType::kF16) {
    throw_error(ErrorCode::kLoadFailed, "checkpoint {}: tensor '{}' is {}, expected a floating type", dir_.string(),
                name, tensor::dtype_name(e.dtype));
  }
  return e;
}

void Checkpoint::load_f32_into(const std::string& name, const tensor::Shape& expected, float* dst) const {
  if (random_) {
    tensor::Tensor view = tensor::Tensor::borrow(dst, expected, DType::kF32);
    fill_random(name, view, 0, static_cast<size_t>(view.numel()), 0);
    return;
  }
  const SafetensorsFile* file = nullptr;
  const SafetensorsEntry& e = entry(name, expected, &file);
  tensor::convert_to_f32(e.dtype, e.data, dst, static_cast<size_t>(tensor::shape_numel(e.shape)));
}

void Checkpoint::load_f32_slice_into(const std::string& name, const tensor::Shape& expected, int dim, int64_t begin,
                                     int64_t count, float* dst) const {
  load_slice_into(name, expected, dim, begin, count, DType::kF32, dst);
}

void Checkpoint::load_slice_into(const std::string& name, const tensor::Shape& expected, int dim, int64_t begin,
                                 int64_t count, DType dtype, void* dst) const {
  if (random_) {
    check_load_dtype(name, dtype);
    check_random_slice(name, expected, dim, begin, count);
    const int64_t other = expected.size() == 2 ? expected[1 - dim] : 1;
    tensor::Tensor view = tensor::Tensor::borrow(dst, {count * other}, dtype);
    fill_random_slice(name, expected, dim, begin, count, view, 0);
    return;
  }
  const SafetensorsFile* file = nullptr;
  const SafetensorsEntry& e = entry(name, expected, &file);
  const int rank = static_cast<int>(e.shape.size());
  if (rank < 1 || rank > 2 || dim < 0 || dim >= rank || begin < 0 || count < 0 || begin + count > e.shape[dim]) {
    throw_error(ErrorCode::kInvalidArgument, "checkpoint {}: tensor '{}' {} has no slice [{}, {}) of dimension {}",
                dir_.string(), name, tensor::shape_to_string(e.shape), begin, begin + count, dim);
  }
  check_load_dtype(name, dtype);
  const size_t in_size = tensor::dtype_size(e.dtype), out_size = tensor::dtype_size(dtype);
  const auto* bytes = static_cast<const unsigned char*>(e.data);
  auto* out = static_cast<unsigned char*>(dst);
  if (dim == 0) {
    const int64_t row = rank == 2 ? e.shape[1] : 1;
    tensor::convert_elements(e.dtype, bytes + begin * row * in_size, dtype, out, static_cast<size_t>(count * row));
    return;
  }
  const int64_t rows = e.shape[0], cols = e.shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    tensor::convert_elements(e.dtype, bytes + (r * cols + begin) * in_size, dtype, out + r * count * out_size,
                             static_cast<size_t>(count));
  }
}

tensor::Tensor Checkpoint::load_f32(const std::string& name, const tensor::Shape& expected) const {
  tensor::Tensor t = tensor::Tensor::empty(expected, DType::kF32);
  load_f32_into(name, expected, t.data<float>());
  return t;
}

void Checkpoint::load_slice_into(const std::string& name, const tensor::Shape& expected, int dim, int64_t begin,
                                 int64_t count, tensor::Tensor& dst, size_t dst_offset) const {
  if (random_) {
    check_load_dtype(name, dst.dtype());
    check_random_slice(name, expected, dim, begin, count);
    fill_random_slice(name, expected, dim, begin, count, dst, dst_offset);
    return;
  }
  const SafetensorsFile* file = nullptr;
  const SafetensorsEntry& e = entry(name, expected, &file);
  const int rank = static_cast<int>(e.shape.size());
  if (rank < 1 || rank > 2 || dim < 0 || dim >= rank || begin < 0 || count < 0 || begin + count > e.shape[dim]) {
    throw_error(ErrorCode::kInvalidArgument, "checkpoint {}: tensor '{}' {} has no slice [{}, {}) of dimension {}",
                dir_.string(), name, tensor::shape_to_string(e.shape), begin, begin + count, dim);
  }
  check_load_dtype(name, dst.dtype());
  const size_t in_size = tensor::dtype_size(e.dtype);
  const auto* bytes = static_cast<const unsigned char*>(e.data);
  if (dim == 0) {
    const int64_t row = rank == 2 ? e.shape[1] : 1;
    tensor::copy_from_host(file->source(bytes + begin * row * in_size), e.dtype, static_cast<size_t>(count * row), dst,
                           dst_offset);
    return;
  }
  const int64_t rows = e.shape[0], cols = e.shape[1];
  std::vector<unsigned char> gathered(static_cast<size_t>(rows * count) * in_size);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(gathered.data() + r * count * in_size, bytes + (r * cols + begin) * in_size,
                static_cast<size_t>(count) * in_size);
  }
  tensor::copy_from_host({gathered.data()}, e.dtype, static_cast<size_t>(rows * count), dst, dst_offset);
}

tensor::Tensor Checkpoint::load(const std::string& name, const tensor::Shape& expected, DType dtype,
                                tensor::Device device) const {
  if (random_) {
    check_load_dtype(name, dtype);
    tensor::Tensor t = tensor::Tensor::empty(expected, dtype, device);
    fill_random(name, t, 0, static_cast<size_t>(t.numel()), 0);
    return t;
  }
  const SafetensorsFile* file = nullptr;
  const SafetensorsEntry& e = entry(name, expected, &file);
  check_load_dtype(name, dtype);
  tensor::Tensor t = tensor::Tensor::empty(expected, dtype, device);
  tensor::copy_from_host(file->source(e.data), e.dtype, static_cast<size_t>(tensor::shape_numel(expected)), t, 0);
  return t;
}

void Checkpoint::check_random_slice(const std::string& name, const tensor::Shape& expected, int dim, int64_t begin,
                                    int64_t count) const {
  const int rank = static_cast<int>(expected.size());
  if (rank < 1 || rank > 2 || dim < 0 || dim >= rank || begin < 0 || count < 0 || begin + count > expected[dim]) {
    throw_error(ErrorCode::kInvalidArgument, "checkpoint {}: tensor '{}' {} has no slice [{}, {}) of dimension {}",
                dir_.string(), name, tensor::shape_to_string(expected), begin, begin + count, dim);
  }
}

// The elements of the slice are those of the whole random tensor at the same places.
void Checkpoint::fill_random_slice(const std::string& name, const tensor::Shape& expected, int dim, int64_t begin,
                                   int64_t count, tensor::Tensor& dst, size_t dst_offset) const {
  const int64_t rows = expected[0], cols = expected.size() == 2 ? expected[1] : 1;
  if (dim == 0) {
    fill_random(name, dst, dst_offset, static_cast<size_t>(count * cols), static_cast<uint64_t>(begin * cols));
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    fill_random(name, dst, dst_offset + static_cast<size_t>(r * count), static_cast<size_t>(count),
                static_cast<uint64_t>(r * cols + begin));
  }
}

void Checkpoint::check_load_dtype(const std::string& name, DType dtype) const {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    throw_error(ErrorCode::kInternal, "checkpoint {}: cannot load '{}' as {}", dir_.string(), name,
                tensor::dtype_name(dtype));
  }
}

}  // namespace omni::model
