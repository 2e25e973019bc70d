// zt_abort_probe: a rank fails inside a save, an all-gather or an all-reduce; the others must stop
// within seconds, not after the communicator timeout (600 s here). Driven by abort_test.sh under
// ztrun (gloo) and mpirun (mpi).
//
//   zt_abort_probe --phase save|gather|reduce --how kill|raise --dir DIR
//
// Rank 1 is the victim. It writes DIR/acting (the time it fails, seconds since the epoch) just
// before it fails:
//   gather / reduce  the others enter the collective and wait in it; the victim, instead of
//                    its part, SIGKILLs itself (kill) or throws a zt::Error (raise);
//   save             every rank calls save_checkpoint; the victim is SIGKILLed from a thread while
//                    its shard is written (held under its temporary name: the test preloads
//                    tests/support/hold_shard_writes.cpp), or
//                    its shard cannot be created (raise: a directory sits at its temporary name).
// A surviving rank that gets past the failure prints "probe: rank R passed PHASE" and exits 3.

#include <boost/program_options.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <torch/torch.h>

#include "base/error.h"
#include "base/main_guard.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/format.h"
#include "core/engine.h"
#include "parallel/dist.h"
#include "tests/multirank/core/engine/test_models.h"

namespace {
namespace fs = std::filesystem;
namespace po = boost::program_options;
constexpr int kVictim = 1;

void mark_acting(const std::string& dir) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::ofstream(dir + "/acting.tmp") << std::fixed << now << "\n";
  fs::rename(dir + "/acting.tmp", dir + "/acting");
}

void fail(const std::string& how, const std::string& dir, const std::string& where) {
  mark_acting(dir);
  if (how == "kill") std::raise(SIGKILL);
  ZT_THROW("injected failure inside ", where);
}

int probe(int argc, char** argv) {
  std::string phase, how, dir;
  po::options_description desc("zt_abort_probe");
  desc.add_options()("phase", po::value(&phase)->required(), "save | gather | reduce")(
      "how", po::value(&how)->required(), "kill | raise")("dir", po::value(&dir)->required(),
                                                          "scratch directory (shared)");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  po::notify(vm);

  zt::dist::CommOptions co;
  co.backend = zt::dist::Backend::kAuto;
  co.timeout = std::chrono::seconds(600);
  auto comm = zt::dist::create_communicator(co);
  const int rank = comm->rank();
  ZT_CHECK(comm->size() > kVictim, "zt_abort_probe needs at least 2 ranks");

  torch::manual_seed(1);
  zt::EngineOptions o;
  o.stage = 3;
  // Stage 3 shards every buffer, however small (DeepSpeed's default threshold would keep
  // this test's small buffers gathered).
  o.stage3_param_persistence_threshold = 0;
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  zt::Engine engine(zt::testing::Mlp().ptr(), o, comm);
  auto& model = static_cast<zt::testing::MlpImpl&>(*engine.model());
  torch::Tensor loss = engine.forward([&] {
    return model.forward(torch::randn({4, 7})).square().mean();
  });
  engine.backward(loss);
  engine.step();
  comm->barrier()->wait();

  if (phase == "gather" || phase == "reduce") {
    torch::Tensor in = torch::ones({1000});
    torch::Tensor out = torch::empty({1000 * comm->size()});
    if (rank == kVictim) {
      // The others are inside the collective by now, waiting for the victim's part.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      fail(how, dir, phase == "gather" ? "all_gather" : "all_reduce");
    }
    auto work = phase == "gather" ? comm->all_gather(in, out) : comm->all_reduce(in);
    work->wait();
  } else if (phase == "save") {
    const std::string ckpt = dir + "/ckpt";
    if (rank == kVictim && how == "raise") {
      // The victim's shard cannot be created: its temporary name is taken by a directory.
      fs::create_directories(fs::path(ckpt) / "t" / (zt::ckpt::shard_file_name(kVictim) + ".tmp"));
      mark_acting(dir);
    }
    if (rank == kVictim && how == "kill") {
      setenv("ZT_TEST_HOLD_SHARD_RENAME_S", "30", 1);  // the shard stays under its temp name
      std::thread([dir] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        fail("kill", dir, "save");
      }).detach();
    }
    zt::save_checkpoint(engine, ckpt, "t");
  } else {
    ZT_THROW("--phase must be save, gather or reduce, got ", phase);
  }
  std::cout << "probe: rank " << rank << " passed " << phase << std::endl;
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt_abort_probe", [&] { return probe(argc, argv); });
}
