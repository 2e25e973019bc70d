#include "core/engine_options.h"

#include "base/env_vars.h"

namespace zt {

void read_environment_switches(EngineOptions& o) {
  // Every rank reads the same values: ztrun, mpirun and srun pass the environment on.
  o.host_cache = env::choice(env::kHostCache, "1", {"0", "1"}) == "1";
  const std::string two_level = env::choice(env::kHierarchicalReduce, "auto", {"auto", "0", "1"});
  o.hierarchical_reduce = two_level == "auto" ? EngineOptions::TwoLevelReduce::kAuto
                          : two_level == "1"  ? EngineOptions::TwoLevelReduce::kOn
                                              : EngineOptions::TwoLevelReduce::kOff;
}

}  // namespace zt
