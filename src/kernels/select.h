// Choosing the kernel table: the best one the CPU runs, unless options forbid some ISAs.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/kernel_table.h"

namespace pocket {

// The environment variable that forces a table for a whole process: the CLI, the tests and the
// C API alike (`POCKET_KERNELS=avx2 ctest ...` runs the suite on the AVX2 table of an AVX-512
// machine). An explicit KernelOptions::force (the CLI's --kernels) takes precedence over it.
inline constexpr const char* kKernelsEnvVar = "POCKET_KERNELS";

struct KernelOptions {
  // "" (POCKET_KERNELS when it is set and not empty, else the best available), or a table name
  // to use exactly: "reference", "avx2", "avx512", "amx", "neon", "dotprod", "i8mm". A name
  // the CPU cannot run is an error, from the option or from the environment.
  std::string force;
  bool allow_amx = true;  // false: the best table without AMX tiles (for benchmarking VNNI)
};

StatusOr<const KernelTable*> SelectKernels(const KernelOptions& options);
// The default table: POCKET_KERNELS's when it names one this CPU runs, else the best available
// (an unusable POCKET_KERNELS is reported by the StatusOr form, which Model::Load calls).
const KernelTable& SelectKernels();
// The best table this CPU runs, whatever POCKET_KERNELS says.
const KernelTable& BestKernels();
// POCKET_KERNELS's value ("" when unset).
std::string KernelsFromEnvironment();
// Every table this CPU can run, reference first (for differential tests).
std::vector<const KernelTable*> AvailableKernelTables();

}  // namespace pocket
