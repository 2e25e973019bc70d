#pragma once
// The comms logger's report (parallel/comms_logger.h) for a training run: DeepSpeed's log_summary
// table on rank 0, and per op its totals in the monitors as "Comms/<op>/<field>" (count,
// total_bytes, avg_latency_ms, algbw_gbps, busbw_gbps), cumulative since the start. TrainingRun
// calls it every steps_per_print steps and once at the end. Nothing happens when the config has
// no enabled comms_logger.

#include <cstdint>
#include <string>

#include "parallel/communicator.h"
#include "train/monitor/monitor.h"

namespace zt::train {

// monitor may be null; x is the monitors' x axis (samples, as the other scalars).
void report_comms(dist::Communicator& comm, Monitor* monitor, int64_t x, const std::string& when);

}  // namespace zt::train
