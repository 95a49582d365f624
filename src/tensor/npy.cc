#include "tensor/npy.h"

#include <algorithm>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "base/error.h"

namespace omni::tensor {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

std::string descr_of(DType dtype) {
  if (dtype == DType::kF32) return "<f4";
  if (dtype == DType::kI32) return "<i4";
  return "";
}

}  // namespace

void save_npy(const std::filesystem::path& path, const Tensor& tensor) {
  const std::string descr = descr_of(tensor.dtype());
  if (descr.empty()) {
    throw_error(ErrorCode::kInvalidArgument, "{}: .npy output supports float32 and int32, not {}", path.string(),
                dtype_name(tensor.dtype()));
  }
  if (!tensor.is_contiguous() || tensor.device() != Device::cpu()) {
    throw_error(ErrorCode::kInvalidArgument, "{}: only contiguous CPU tensors can be saved", path.string());
  }
  // Python tuple syntax: "()", "(n,)", "(a, b)".
  std::string shape = "(";
  for (int i = 0; i < tensor.rank(); ++i) shape += (i ? ", " : "") + std::to_string(tensor.dim(i));
  shape += tensor.rank() == 1 ? ",)" : ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + length (2) + header + newline is padded to a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) throw_error(ErrorCode::kInternal, "{}: cannot open for writing", path.string());
  out.write(kMagic, 6);
  const char version[2] = {1, 0};
  out.write(version, 2);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(tensor.raw()), static_cast<std::streamsize>(tensor.nbytes()));
  if (!out) throw_error(ErrorCode::kInternal, "{}: write failed", path.string());
}

Tensor load_npy(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorCode::kNotFound, "{}: cannot open", path.string());
  char prefix[10];
  in.read(prefix, 10);
  if (!in || std::string(prefix, 6) != std::string(kMagic, 6)) {
    throw_error(ErrorCode::kLoadFailed, "{}: not a .npy file", path.string());
  }
  size_t header_len;
  if (prefix[6] == 1) {
    header_len = static_cast<uint8_t>(prefix[8]) | (static_cast<size_t>(static_cast<uint8_t>(prefix[9])) << 8);
  } else {
    char more[2];
    in.read(more, 2);
    header_len = static_cast<uint8_t>(prefix[8]) | (static_cast<size_t>(static_cast<uint8_t>(prefix[9])) << 8) |
                 (static_cast<size_t>(static_cast<uint8_t>(more[0])) << 16) |
                 (static_cast<size_t>(static_cast<uint8_t>(more[1])) << 24);
  }
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']*)'"))) {
    throw_error(ErrorCode::kLoadFailed, "{}: header has no descr", path.string());
  }
  DType dtype;
  bool bytes = false;  // uint8, widened to int32
  if (m[1] == "<f4") {
    dtype = DType::kF32;
  } else if (m[1] == "<i4") {
    dtype = DType::kI32;
  } else if (m[1] == "<i8") {
    dtype = DType::kI64;
  } else if (m[1] == "|u1") {
    dtype = DType::kI32;
    bytes = true;
  } else {
    throw_error(ErrorCode::kLoadFailed, "{}: dtype '{}' is not supported (float32, int32, int64, uint8)", path.string(),
                m[1].str());
  }
  if (header.find("'fortran_order': False") == std::string::npos) {
    throw_error(ErrorCode::kLoadFailed, "{}: Fortran-order arrays are not supported", path.string());
  }
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)"))) {
    throw_error(ErrorCode::kLoadFailed, "{}: header has no shape", path.string());
  }
  Shape shape;
  const std::string dims = m[1];
  const std::regex number("\\d+");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
    shape.push_back(std::stoll(it->str()));
  }
  Tensor t = Tensor::empty(shape, dtype);
  if (bytes) {
    std::vector<uint8_t> raw(static_cast<size_t>(t.numel()));
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
    std::copy(raw.begin(), raw.end(), t.data<int32_t>());
  } else {
    in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  }
  if (!in)
    throw_error(ErrorCode::kLoadFailed, "{}: data is shorter than shape {}", path.string(), shape_to_string(shape));
  return t;
}

}  // namespace omni::tensor
