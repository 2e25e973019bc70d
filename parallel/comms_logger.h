#pragma once
// zt::dist::CommsLogger: DeepSpeed's comms logger (deepspeed/utils/comms_logging.py), counting
// every profiled collective per op and message size with its latency and bandwidths, for the
// config's `comms_logger` block (docs/DESIGN.md, Comms logger).
//
// Semantics follow DeepSpeed's:
//  - an op is profiled when `prof_all`, or when its name is in `prof_ops` (op names as ours:
//    all_reduce, reduce_scatter, all_gather, broadcast, barrier, all_to_all);
//  - a profiled op is made blocking (the recording communicator waits for it at once), as
//    DeepSpeed synchronizes the device after each logged op: latency is issue to completion;
//  - message size is the bytes of the tensor DeepSpeed sizes: all_reduce and broadcast the
//    tensor, all_gather its input shard, reduce_scatter its full input, all_to_all its input,
//    barrier 0;
//  - algorithmic and bus bandwidth (Gbps) from calc_bw_log with n = the communicator's size:
//      all_gather, reduce_scatter   algbw = size*n/t      busbw = algbw*(n-1)/n
//      all_reduce                   algbw = 2*size/t      busbw = size/t * 2(n-1)/n
//      all_to_all                   algbw = size/t        busbw = algbw*(n-1)/n
//      broadcast, barrier           algbw = busbw = size/t
//  - averages are 10% trimmed means (DeepSpeed's trim_mean), totals are plain sums;
//  - `verbose` prints one line per op on rank 0; `debug` appends the calling function to the
//    record name ("all_gather | [Caller Func: zt::zero::Bucket::start_param_gather]").
// One difference: DeepSpeed turns the logger on whenever the block is present (it never reads
// `enabled`); zerotorch honours `enabled`.
//
// Thread-safe: ops may be appended from the communicator's thread while another reads.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/comms_logger_options.h"

namespace zt::dist {

// DeepSpeed's calc_bw_log: {algbw, busbw} in Gbps for `bytes` moved in `latency_ms` among n.
struct Bandwidth {
  double algbw_gbps = 0, busbw_gbps = 0;
};
Bandwidth calc_bw_log(const std::string& op, int64_t bytes, double latency_ms, int n);
// DeepSpeed's convert_size: "0B", "512.0 B", "1.5 KB", "4.0 MB" (1024-based, 2 decimals).
std::string convert_size(int64_t bytes);

class CommsLogger {
 public:
  explicit CommsLogger(CommsLoggerOptions options, int rank = 0);

  const CommsLoggerOptions& options() const { return options_; }
  bool profiles(const std::string& op) const;

  // One profiled op. record_name is op, or op plus the caller under `debug`.
  void append(const std::string& op, const std::string& record_name, double latency_ms,
              int64_t msg_bytes, int n);

  struct Row {
    std::string record_name;
    int64_t msg_bytes = 0;
    int64_t count = 0;
    int64_t total_bytes = 0;  // msg_bytes * count (summed over sizes in per_op())
    double total_latency_ms = 0, avg_latency_ms = 0, algbw_gbps = 0, busbw_gbps = 0;
  };
  // Records in first-seen order, message sizes ascending within each (DeepSpeed's order).
  std::vector<Row> summary() const;
  // DeepSpeed's log_all table: a header line, then per record its name and one line per size.
  std::string table() const;
  // Totals per record name (summed over message sizes; msg_bytes 0), for the monitors.
  std::map<std::string, Row> per_op() const;
  void reset();

 private:
  struct Samples {
    int64_t count = 0;
    std::vector<double> latency_ms, algbw, busbw;
  };
  CommsLoggerOptions options_;
  int rank_;
  mutable std::mutex mutex_;
  std::vector<std::string> order_;
  std::map<std::string, std::map<int64_t, Samples>> records_;
};

}  // namespace zt::dist
