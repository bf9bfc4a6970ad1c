#include "kernels/kernel_table.h"

namespace pocket {

// Only the reference table exists so far; the ISA tables plug in here, chosen from CPU features.
const KernelTable& SelectKernels() {
  return ReferenceKernels();
}

}  // namespace pocket
