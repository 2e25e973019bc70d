// zt_launch_gloo_probe: the launcher's rank program on the project's own stack. It discovers its
// place with zt::dist::Env::discover() (parallel/env.h), creates the job's Communicator
// (backend "auto": gloo over MASTER_ADDR under ztrun or srun, mpi under mpirun, or --backend) and
// checks two collectives with closed-form results:
//   all_reduce of (rank + 1) x 1000 floats      -> every element N(N+1)/2
//   all_gather of (rank, local_rank, local_world) -> ranks 0..N-1 in order, local ranks 0..L-1
// With --facts-dir it writes rank_<r>.txt like zt_launch_probe, so tests compare launch paths.
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include <ATen/ATen.h>

#include "base/error.h"
#include "base/main_guard.h"
#include "parallel/dist.h"
#include "parallel/env.h"

namespace {

namespace po = boost::program_options;

void check_gathered(const at::Tensor& all, const zt::dist::Env& env) {
  std::map<int, std::set<int>> local_ranks;  // node (rank / local_world) -> local ranks seen
  for (int r = 0; r < env.world_size; ++r) {
    const int rank = all[r][0].item<int>();
    const int local_rank = all[r][1].item<int>();
    const int local_world = all[r][2].item<int>();
    ZT_CHECK(rank == r, "all_gather slot ", r, " holds rank ", rank);
    ZT_CHECK(local_world == env.local_world_size, "rank ", r, " has local world ", local_world,
             ", rank ", env.rank, " has ", env.local_world_size);
    ZT_CHECK(local_ranks[r / local_world].insert(local_rank).second, "local rank ", local_rank,
             " twice on node ", r / local_world);
  }
  for (const auto& [node, ranks] : local_ranks) {
    ZT_CHECK(static_cast<int>(ranks.size()) == env.local_world_size &&
                 *ranks.rbegin() == env.local_world_size - 1,
             "node ", node, " has local ranks that are not 0..", env.local_world_size - 1);
  }
}

int probe(int argc, char** argv) {
  po::options_description desc("zt_launch_gloo_probe");
  desc.add_options()("backend", po::value<std::string>()->default_value("auto"))(
      "facts-dir", po::value<std::string>()->default_value(""))(
      "timeout-s", po::value<int>()->default_value(60), "communicator timeout");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  po::notify(vm);

  const zt::dist::Env env = zt::dist::Env::discover();
  std::cout << "gloo-probe " << env.describe() << std::endl;
  zt::dist::CommOptions options;
  options.backend = zt::dist::parse_backend(vm["backend"].as<std::string>());
  options.timeout = std::chrono::seconds(vm["timeout-s"].as<int>());
  auto comm = zt::dist::create_communicator(options, env);
  ZT_CHECK(comm->rank() == env.rank && comm->size() == env.world_size, "communicator is rank ",
           comm->rank(), "/", comm->size(), " but the environment says ", env.describe());

  at::Tensor t = at::full({1000}, static_cast<float>(env.rank + 1), at::kFloat);  // (1000,) fp32
  comm->all_reduce(t)->wait();
  const float expected = env.world_size * (env.world_size + 1) / 2.0f;
  ZT_CHECK(at::all(t == expected).item<bool>(), "all_reduce gave ", t[0].item<float>(),
           " (and maybe others), expected ", expected);

  at::Tensor mine = at::tensor({env.rank, env.local_rank, env.local_world_size}, at::kInt);
  at::Tensor all = at::zeros({env.world_size * 3}, at::kInt);  // flat, rank r at [3r, 3r+3)
  comm->all_gather(mine, all)->wait();
  check_gathered(all.view({env.world_size, 3}), env);

  std::cout << "gloo-probe rank " << env.rank << ": all_reduce sum " << expected << " on "
            << comm->backend() << " ok" << std::endl;
  const std::string dir = vm["facts-dir"].as<std::string>();
  if (!dir.empty()) {
    std::ofstream(dir + "/rank_" + std::to_string(env.rank) + ".txt")
        << "rank=" << env.rank << " world=" << env.world_size << " local_rank=" << env.local_rank
        << " local_world=" << env.local_world_size << " launcher=" << env.launcher
        << " backend=" << comm->backend() << "\n";
  }
  comm->barrier()->wait();  // nobody tears the store down while another rank still reads it
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt_launch_gloo_probe", [&] { return probe(argc, argv); });
}
