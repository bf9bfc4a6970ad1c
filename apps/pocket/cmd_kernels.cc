// pocket kernels: which kernel tables this CPU runs and which one a command will use (the best,
// or the one POCKET_KERNELS forces), so a log says on what a run computed.
#include <nlohmann/json.hpp>

#include "common.h"
#include "kernels/cpu_features.h"

namespace pocket::cli {

Command AddKernelsCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "kernels", "list the kernel tables this CPU runs and the one commands use (POCKET_KERNELS)");
  auto json = std::make_shared<bool>(false);
  app->add_flag("--json", *json, "one JSON object: cpu_features, tables, best, default, forced_by");
  SetExamples(app, {"pocket kernels", "POCKET_KERNELS=avx2 pocket kernels --json"});
  return {app, [json]() {
            const std::string env = KernelsFromEnvironment();
            StatusOr<const KernelTable*> chosen = SelectKernels(KernelOptions());
            if (!chosen.ok()) return ReportError(chosen.status());
            std::vector<std::string> names;
            for (const KernelTable* t : AvailableKernelTables()) names.emplace_back(t->name);
            const std::string features = DetectCpuFeatures().ToString();
            const std::string best(BestKernels().name);
            const std::string used((*chosen)->name);
            if (*json) {
              nlohmann::json j;
              j["cpu_features"] = features;
              j["tables"] = names;
              j["best"] = best;
              j["default"] = used;
              j["forced_by"] = env.empty() ? nlohmann::json() : nlohmann::json(kKernelsEnvVar);
              std::printf("%s\n", j.dump().c_str());
              return 0;
            }
            std::string list;
            for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
            std::printf("cpu features: %s\n", features.c_str());
            std::printf("tables:       %s (best: %s)\n", list.c_str(), best.c_str());
            std::printf("in use:       %s%s\n", used.c_str(),
                        env.empty() ? "" : (" (" + std::string(kKernelsEnvVar) + ")").c_str());
            return 0;
          }};
}

}  // namespace pocket::cli
