// Which compute backends this build of omnistage contains and which devices it can see.
#pragma once

#include <string>

namespace omni::tensor {

// "cpu" or "cpu, cuda (sm_90)": the backends compiled into this binary.
std::string compiled_backends();

// Number of CUDA devices visible to this process; 0 without the CUDA backend, a driver or a GPU.
int cuda_device_count();

}  // namespace omni::tensor
