#pragma once
// Names of every environment variable zerotorch reads or sets, in one place, and the one reader of
// the process environment: code outside base/ calls get, get_or or choice, never getenv, so what a
// program reads is listed here. A switch that changes what the engine does is read by the code
// that builds the engine's options (core/config/engine_config.h), never inside the engine.

#include <initializer_list>
#include <string>

namespace zt::env {

// The variable's value; null when it is unset.
const char* get(const char* name);
// The variable's value, or `fallback` when it is unset or empty.
std::string get_or(const char* name, const std::string& fallback);
// One of `allowed` (`fallback` when unset or empty); any other value is an error naming the
// variable, the values it takes and what it was given.
std::string choice(const char* name, const char* fallback,
                   std::initializer_list<const char*> allowed);

// torchrun / ztrun launch contract (docs/DESIGN.md, Launch environment).
inline constexpr const char* kRank = "RANK";
inline constexpr const char* kWorldSize = "WORLD_SIZE";
inline constexpr const char* kLocalRank = "LOCAL_RANK";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr const char* kGroupRank = "GROUP_RANK";
inline constexpr const char* kMasterAddr = "MASTER_ADDR";
inline constexpr const char* kMasterPort = "MASTER_PORT";
inline constexpr const char* kRestartCount = "ZT_RESTART_COUNT";
inline constexpr const char* kTorchElasticRestartCount = "TORCHELASTIC_RESTART_COUNT";

// OpenMPI.
inline constexpr const char* kOmpiRank = "OMPI_COMM_WORLD_RANK";
inline constexpr const char* kOmpiSize = "OMPI_COMM_WORLD_SIZE";
inline constexpr const char* kOmpiLocalRank = "OMPI_COMM_WORLD_LOCAL_RANK";
inline constexpr const char* kOmpiLocalSize = "OMPI_COMM_WORLD_LOCAL_SIZE";
// OpenMPI's collective tuning (parallel/mpi_runtime.cpp sets them unless the user did).
inline constexpr const char* kOmpiMcaDynamicRules = "OMPI_MCA_coll_tuned_use_dynamic_rules";
inline constexpr const char* kOmpiMcaReduceScatterBlock =
    "OMPI_MCA_coll_tuned_reduce_scatter_block_algorithm";

// Slurm.
inline constexpr const char* kSlurmProcId = "SLURM_PROCID";
inline constexpr const char* kSlurmNTasks = "SLURM_NTASKS";
inline constexpr const char* kSlurmLocalId = "SLURM_LOCALID";
inline constexpr const char* kSlurmNTasksPerNode = "SLURM_NTASKS_PER_NODE";
inline constexpr const char* kSlurmNodeId = "SLURM_NODEID";
inline constexpr const char* kSlurmStepTasksPerNode = "SLURM_STEP_TASKS_PER_NODE";
inline constexpr const char* kSlurmStepNodeList = "SLURM_STEP_NODELIST";

// Network interfaces (parallel/gloo_communicator.h); ztrun passes NCCL_*, GLOO_* to remote nodes.
inline constexpr const char* kGlooSocketIfname = "GLOO_SOCKET_IFNAME";
inline constexpr const char* kNcclSocketIfname = "NCCL_SOCKET_IFNAME";

// The system's: where programs are found, temporary files go, and the user's home.
inline constexpr const char* kPath = "PATH";
inline constexpr const char* kTmpDir = "TMPDIR";
inline constexpr const char* kHome = "HOME";

// Set by the launcher for its ranks.
inline constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";
inline constexpr const char* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";
// Intel OpenMP's thread pinning: ztrun --bind-cores-to-rank refuses it (launcher/core_binding.h).
inline constexpr const char* kKmpAffinity = "KMP_AFFINITY";

// zerotorch's own.
inline constexpr const char* kLogLevel = "ZT_LOG_LEVEL";
inline constexpr const char* kLogAllRanks = "ZT_LOG_ALL_RANKS";
inline constexpr const char* kVenv = "ZT_VENV";
inline constexpr const char* kCudaPlugin = "ZT_CUDA_PLUGIN";  // path of libzt_cuda.so
// Path of libzt_testdevice.so, the host-backed test device (train/device.h loads it when a
// program is given --device zttest); unset: beside libzt_train.so.
inline constexpr const char* kTestDeviceLib = "ZT_TESTDEVICE_LIBRARY";
// The flight recorder (parallel/flight_recorder.h): ring entries (0 = off) and dump directory.
inline constexpr const char* kFlightBufferSize = "ZT_FLIGHT_BUFFER_SIZE";
inline constexpr const char* kFlightDir = "ZT_FLIGHT_DIR";
// Two-level gradient reduction at stages 0-2 (core/zero/hierarchical_reduce.h): "auto" (unset:
// over gloo and MPI when the ranks span several nodes), "1" (NCCL too) or "0" (never).
inline constexpr const char* kHierarchicalReduce = "ZT_HIERARCHICAL_REDUCE";
// A CPU model's host caching allocator (core/zero/host_caching_allocator.h): "1" (unset) or "0"
// (LibTorch's default CPU allocator, glibc's malloc).
inline constexpr const char* kHostCache = "ZT_HOST_CACHE";
// Muon's Newton-Schulz compute dtype (optim/muon.h): "fp32", "fp16" or "bf16" for every method;
// unset or "auto": DeepSpeed's rule, which depends on what the CPU or GPU supports. fp16 rounds a
// gradient's last bits differently on every machine, so tests that compare against a reference to
// 1e-5 pin fp32.
inline constexpr const char* kMuonNsDtype = "ZT_MUON_NS_DTYPE";
// CPU bf16 matrix products on CPUs without bf16 GEMM support (core/precision/cpu_bf16_matmul.h):
// unset or "fp32" multiplies through fp32; "torch" keeps LibTorch's kernels.
inline constexpr const char* kCpuBf16Matmul = "ZT_CPU_BF16_MATMUL";

}  // namespace zt::env
