#pragma once
// csv_monitor, in DeepSpeed's layout (deepspeed/monitor/csv_monitor.py): one file per scalar
// name in <output_path>/<job_name>/, named after the scalar with '/' and ' ' turned into '_'
// ("Train/Samples/train_loss" -> Train_Samples_train_loss.csv). The first write of a name by
// this monitor appends the header `step,<last path component of the name>`, each write one row
// `<step>,<value>`; rows end in "\r\n" and values are written as Python's repr(float) writes
// them (1e-05, 0.5, 3.0), since DeepSpeed writes with Python's csv module. Files are appended
// to, as DeepSpeed's are.

#include <cstdio>
#include <map>
#include <string>

#include "train/monitor/monitor.h"

namespace zt {

class CsvMonitor : public Monitor {
 public:
  explicit CsvMonitor(std::string log_dir);  // creates log_dir
  ~CsvMonitor() override;
  void write(int64_t step, const std::string& name, double value) override;
  void flush() override;

  const std::string& log_dir() const { return log_dir_; }

 private:
  std::string log_dir_;
  std::map<std::string, std::FILE*> files_;  // by file name; opened on first write
};

// A double as Python's repr() writes it: the shortest text that reads back to the same value,
// in fixed notation for exponents -4..15 (with ".0" when integral), else d.ddde+XX.
std::string python_float_repr(double v);

}  // namespace zt
