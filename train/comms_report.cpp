#include "train/comms_report.h"

#include "base/logging.h"
#include "parallel/recording_communicator.h"

namespace zt::train {

void report_comms(dist::Communicator& comm, Monitor* monitor, int64_t x, const std::string& when) {
  dist::CommsLogger* logger = dist::comms_logger_of(comm);
  if (logger == nullptr) return;
  if (comm.rank() == 0) ZT_LOG_INFO("comms logger (", when, "):\n", logger->table());
  if (monitor == nullptr) return;
  for (const auto& [op, row] : logger->per_op()) {
    const std::string tag = "Comms/" + op + "/";
    monitor->write(x, tag + "count", static_cast<double>(row.count));
    monitor->write(x, tag + "total_bytes", static_cast<double>(row.total_bytes));
    monitor->write(x, tag + "avg_latency_ms", row.avg_latency_ms);
    monitor->write(x, tag + "algbw_gbps", row.algbw_gbps);
    monitor->write(x, tag + "busbw_gbps", row.busbw_gbps);
  }
}

}  // namespace zt::train
