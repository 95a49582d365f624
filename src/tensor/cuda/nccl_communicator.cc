#include "tensor/cuda/nccl_communicator.h"

#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/error.h"
#include "tensor/cuda/device.h"

namespace omni::tensor::cuda {

// The NCCL entry points omnistage uses, resolved once per process.
struct NcclLibrary {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

namespace {

template <typename T>
void resolve(void* library, const char* name, const std::string& path, T& out) {
  out = reinterpret_cast<T>(dlsym(library, name));
  if (!out) throw_error(ErrorCode::kUnavailable, "NCCL library {} has no {}", path, name);
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    default:
      fail_dtype(dtype);
  }
}

const NcclLibrary* load_nccl() {
  static std::once_flag once;
  static NcclLibrary* nccl = nullptr;
  static std::string failure;
  std::call_once(once, [] {
    const char* configured = std::getenv("OMNI_NCCL_LIBRARY");
    const std::string path = configured && *configured ? configured : "libnccl.so.2";
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      failure = fmt::format(
          "cannot load NCCL ({}): {}; tensor parallelism on CUDA needs it (set OMNI_NCCL_LIBRARY to libnccl.so.2)",
          path, dlerror());
      return;
    }
    auto* loaded = new NcclLibrary;
    try {
      resolve(library, "ncclGetUniqueId", path, loaded->get_unique_id);
      resolve(library, "ncclCommInitRank", path, loaded->comm_init_rank);
      resolve(library, "ncclCommDestroy", path, loaded->comm_destroy);
      resolve(library, "ncclAllReduce", path, loaded->all_reduce);
      resolve(library, "ncclAllGather", path, loaded->all_gather);
      resolve(library, "ncclGetErrorString", path, loaded->error_string);
    } catch (const Error& e) {
      failure = e.what();
      delete loaded;
      return;
    }
    nccl = loaded;
  });
  if (!nccl) throw Error(ErrorCode::kUnavailable, failure);
  return nccl;
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> host, int device)
    : host_(std::move(host)), device_(device), nccl_(load_nccl()) {
  ncclUniqueId id{};
  std::string bytes;
  if (host_->rank() == 0) {
    if (ncclResult_t r = nccl_->get_unique_id(&id); r != ncclSuccess) {
      throw_error(ErrorCode::kUnavailable, "ncclGetUniqueId: {}", nccl_->error_string(r));
    }
    bytes.assign(reinterpret_cast<const char*>(&id), sizeof id);
  }
  host_->broadcast_bytes(bytes);
  if (bytes.size() != sizeof id) {
    throw_error(ErrorCode::kUnavailable, "tensor-parallel rank {}: NCCL id of {} bytes from rank 0", rank(),
                bytes.size());
  }
  std::memcpy(&id, bytes.data(), sizeof id);
  stream_for(device_);  // makes the device current for NCCL
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = nccl_->comm_init_rank(&comm, world_size(), id, rank()); r != ncclSuccess) {
    throw_error(ErrorCode::kUnavailable, "tensor-parallel rank {} on cuda:{}: ncclCommInitRank: {}", rank(), device_,
                nccl_->error_string(r));
  }
  comm_ = comm;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) nccl_->comm_destroy(static_cast<ncclComm_t>(comm_));
}

void NcclCommunicator::check_tensor(const Tensor& t, const char* op) const {
  if (t.device() != Device::cuda(device_) || !t.is_contiguous() ||
      (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16 && t.dtype() != DType::kF16)) {
    throw_error(ErrorCode::kInvalidArgument,
                "{}: NCCL takes contiguous float32/bfloat16/float16 tensors on cuda:{}, got {} {} on {}", op, device_,
                dtype_name(t.dtype()), shape_to_string(t.shape()), device_name(t.device()));
  }
}

void NcclCommunicator::all_reduce_sum(Tensor& x) {
  check_tensor(x, "all_reduce_sum");
  ncclResult_t r = nccl_->all_reduce(x.raw(), x.raw(), static_cast<size_t>(x.numel()), nccl_type(x.dtype()), ncclSum,
                                     static_cast<ncclComm_t>(comm_), stream_for(device_));
  if (r != ncclSuccess) {
    throw_error(ErrorCode::kInternal, "ncclAllReduce on cuda:{}: {}", device_, nccl_->error_string(r));
  }
}

void NcclCommunicator::all_gather(const Tensor& in, Tensor& out) {
  check_tensor(in, "all_gather");
  check_tensor(out, "all_gather");
  if (in.dtype() != out.dtype() || out.numel() != in.numel() * world_size()) {
    throw_error(ErrorCode::kInvalidArgument, "all_gather: out {} must hold {} x in {} of one dtype",
                shape_to_string(out.shape()), world_size(), shape_to_string(in.shape()));
  }
  ncclResult_t r = nccl_->all_gather(in.raw(), out.raw(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()),
                                     static_cast<ncclComm_t>(comm_), stream_for(device_));
  if (r != ncclSuccess) {
    throw_error(ErrorCode::kInternal, "ncclAllGather on cuda:{}: {}", device_, nccl_->error_string(r));
  }
}

}  // namespace omni::tensor::cuda
