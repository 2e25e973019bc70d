#pragma once
// Slurm's compressed lists, as srun exports them to every task of a step (srun(1), OUTPUT
// ENVIRONMENT VARIABLES, Slurm 22.05 as Debian 12 ships it; unchanged through 24.05):
//
//   SLURM_STEP_TASKS_PER_NODE  tasks on each node of the step, in node order, runs of equal
//                              counts written "count(xrepeat)": "2(x3),1" = 2, 2, 2, 1
//   SLURM_STEP_NODELIST        the step's nodes in hostlist syntax: "node[01-02]" = node01, node02;
//                              "a[1,3-4]b,c" = a1b, a3b, a4b, c (zero padding kept, several
//                              bracket groups in one name expand left to right)
//
// Both throw zt::Error naming the variable and its value when it does not parse.

#include <string>
#include <vector>

namespace zt::dist {

std::vector<int> parse_slurm_tasks_per_node(const std::string& value, const char* name);
std::vector<std::string> expand_slurm_hostlist(const std::string& value, const char* name);

}  // namespace zt::dist
