#pragma once
// tensorboard: scalars as TensorBoard event files, written without TensorFlow or PyTorch's
// SummaryWriter. File: <output_path>/<job_name>/events.out.tfevents.<unix time>.<host>, a
// TFRecord stream:
//
//   per record:  uint64 length (little-endian) | uint32 masked CRC32C of those 8 bytes
//                | `length` bytes of a serialized Event | uint32 masked CRC32C of them
//   masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8
//
// The first Event carries file_version "brain.Event:2"; then one Event per scalar
// (wall_time, step, summary { value { tag, simple_value } }). The messages are the few fields
// of TensorFlow's event.proto / summary.proto that scalars need, in tensorboard_event.proto
// (field numbers as TensorFlow's, so any TensorBoard reads them). CRC32C is Boost.CRC's.

#include <cstdint>
#include <cstdio>
#include <string>

#include "train/monitor/monitor.h"

namespace zt {

class TensorBoardWriter : public Monitor {
 public:
  explicit TensorBoardWriter(std::string log_dir);  // creates log_dir and the event file
  ~TensorBoardWriter() override;
  void write(int64_t step, const std::string& name, double value) override;
  void flush() override;

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::FILE* file_ = nullptr;
};

// CRC-32C (Castagnoli) of data, and TFRecord's masked form of a CRC.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace zt
