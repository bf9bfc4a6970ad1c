// AMX kernels: placeholder table reusing AVX-512 while the tile code is written.
#include "kernels/kernel_table.h"
#include "kernels/tables.h"

namespace pocket {

const KernelTable& AmxKernels() {
  static const KernelTable kTable = [] {
    KernelTable t = Avx512Kernels();
    t.name = "amx";
    return t;
  }();
  return kTable;
}

}  // namespace pocket
