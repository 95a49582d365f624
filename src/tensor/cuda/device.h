// CUDA device discovery. Safe on machines without a driver or a GPU (reports zero devices).
#pragma once

namespace omni::tensor::cuda {

int visible_device_count();

}  // namespace omni::tensor::cuda
