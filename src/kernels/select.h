// Choosing the kernel table: the best one the CPU runs, unless options forbid some ISAs.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/kernel_table.h"

namespace pocket {

struct KernelOptions {
  // "" (best available), or a table name to use exactly: "reference", "avx2", "avx512",
  // "amx", "neon", "dotprod", "i8mm". A name the CPU cannot run is an error.
  std::string force;
  bool allow_amx = true;  // false: the best table without AMX tiles (for benchmarking VNNI)
};

StatusOr<const KernelTable*> SelectKernels(const KernelOptions& options);
const KernelTable& SelectKernels();  // the best available
// Every table this CPU can run, reference first (for differential tests).
std::vector<const KernelTable*> AvailableKernelTables();

}  // namespace pocket
