#include "kernels/select.h"

#include <cstdlib>

#include "kernels/cpu_features.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/tables.h"

namespace pocket {

std::string CpuFeatures::ToString() const {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += " ";
    s += name;
  };
  add(avx2, "avx2");
  add(avx512, "avx512");
  add(avx512_vnni, "avx512-vnni");
  add(avx512_bf16, "avx512-bf16");
  add(avx512_vbmi, "avx512-vbmi");
  add(amx_int8, "amx-int8");
  add(amx_bf16, "amx-bf16");
  add(neon, "neon");
  add(dotprod, "dotprod");
  add(i8mm, "i8mm");
  return s.empty() ? "none" : s;
}

std::vector<const KernelTable*> AvailableKernelTables() {
  std::vector<const KernelTable*> tables = {&ReferenceKernels()};
  const CpuFeatures& f = DetectCpuFeatures();
  (void)f;
#if defined(POCKET_HAVE_X86_KERNELS)
  if (f.avx2) tables.push_back(&Avx2Kernels());
  if (f.avx512_vnni) tables.push_back(&Avx512Kernels());
  if (f.amx_int8) tables.push_back(&AmxKernels());
#endif
#if defined(POCKET_HAVE_ARM_KERNELS)
  tables.push_back(&NeonKernels());
  if (f.dotprod) tables.push_back(&DotprodKernels());
  if (f.i8mm) tables.push_back(&I8mmKernels());
#endif
  return tables;
}

std::string KernelsFromEnvironment() {
  const char* value = std::getenv(kKernelsEnvVar);
  return value == nullptr ? std::string() : std::string(value);
}

StatusOr<const KernelTable*> SelectKernels(const KernelOptions& options) {
  const std::vector<const KernelTable*> tables = AvailableKernelTables();
  const bool from_env = options.force.empty();
  const std::string force = from_env ? KernelsFromEnvironment() : options.force;
  if (!force.empty()) {
    for (const KernelTable* t : tables) {
      if (t->name == force) return t;
    }
    std::string names;
    for (const KernelTable* t : tables) names += (names.empty() ? "" : ", ") + std::string(t->name);
    return InvalidArgumentError(from_env ? StrCat(kKernelsEnvVar, "=") : std::string("kernels "),
                                QuoteBytes(force),
                                " are not available on this CPU (available: ", names, ")");
  }
  for (auto it = tables.rbegin(); it != tables.rend(); ++it) {
    if (!options.allow_amx && (*it)->name == "amx") continue;
    return *it;
  }
  return &ReferenceKernels();
}

const KernelTable& BestKernels() {
  static const KernelTable* const kBest = AvailableKernelTables().back();
  return *kBest;
}

const KernelTable& SelectKernels() {
  static const KernelTable* const kDefault = [] {
    StatusOr<const KernelTable*> chosen = SelectKernels(KernelOptions());
    return chosen.ok() ? *chosen : &BestKernels();
  }();
  return *kDefault;
}

double LogSumExp(const KernelTable& k, const float* x, int64_t n) {
  return k.log_sum_exp != nullptr ? k.log_sum_exp(x, n) : reference::LogSumExp(x, n);
}

}  // namespace pocket
