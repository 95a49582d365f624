#include "tensor/upload.h"

#include <cstring>

#include "base/error.h"
#include "tensor/convert.h"

#ifdef OMNI_HAVE_CUDA
#include "tensor/cuda/upload.h"
#endif

namespace omni::tensor {
namespace {

bool is_float(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16; }

}  // namespace

void copy_from_host(const HostSource& src, DType src_dtype, size_t count, Tensor& dst, size_t dst_offset) {
  if (!dst.defined() || !dst.is_contiguous()) {
    throw_error(ErrorCode::kInvalidArgument, "copy_from_host: the destination must be a defined, contiguous tensor");
  }
  if (dst_offset + count > static_cast<size_t>(dst.numel())) {
    throw_error(ErrorCode::kInvalidArgument, "copy_from_host: elements [{}, {}) are past the end of {} {}", dst_offset,
                dst_offset + count, dtype_name(dst.dtype()), shape_to_string(dst.shape()));
  }
  if (src_dtype != dst.dtype() && !(is_float(src_dtype) && is_float(dst.dtype()))) {
    throw_error(ErrorCode::kInvalidArgument, "copy_from_host: cannot convert {} to {}", dtype_name(src_dtype),
                dtype_name(dst.dtype()));
  }
  if (count == 0) return;
  void* at = static_cast<char*>(dst.raw()) + dst_offset * dtype_size(dst.dtype());
  if (dst.device().type == DeviceType::kCpu) {
    convert_elements(src_dtype, src.memory, dst.dtype(), at, count);
    return;
  }
#ifdef OMNI_HAVE_CUDA
  const int error =
      cuda::upload_elements(at, dst.dtype(), src.memory, src.fd, src.offset, src_dtype, count, dst.device().index);
  if (error != 0) {
    throw_error(ErrorCode::kLoadFailed, "copy_from_host: reading {} bytes at offset {} of file descriptor {}: {}",
                count * dtype_size(src_dtype), src.offset, src.fd, std::strerror(error));
  }
#else
  throw_error(ErrorCode::kUnsupported, "copy_from_host to {}: this build has no CUDA backend",
              device_name(dst.device()));
#endif
}

}  // namespace omni::tensor
