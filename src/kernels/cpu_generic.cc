// Architectures without vector kernels: nothing to detect.
#include "kernels/cpu_features.h"

namespace pocket {

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures kFeatures;
  return kFeatures;
}

}  // namespace pocket
