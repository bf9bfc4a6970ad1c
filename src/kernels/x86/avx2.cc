// AVX2 kernels (with FMA and F16C): placeholder table reusing the reference while the AVX2 code
// is written.
#include "kernels/kernel_table.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/tables.h"

namespace pocket {

const KernelTable& Avx2Kernels() {
  static const KernelTable kTable = [] {
    KernelTable t = ReferenceKernels();
    t.name = "avx2";
    return t;
  }();
  return kTable;
}

}  // namespace pocket
