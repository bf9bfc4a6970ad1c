// The ISA-specific tables, defined in kernels/x86 and kernels/arm (only what the target builds).
#pragma once

#include "kernels/kernel_table.h"

namespace pocket {

const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();
const KernelTable& AmxKernels();
const KernelTable& NeonKernels();
const KernelTable& DotprodKernels();
const KernelTable& I8mmKernels();

}  // namespace pocket
