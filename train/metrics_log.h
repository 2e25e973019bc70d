#pragma once
// JSON Lines metrics of a training run: one object per line, numbers only, flushed per line so
// a crashed run still leaves every finished step on disk. Written by rank 0.
//
//   MetricsLog log("out/metrics.jsonl");
//   log.write({{"step", 1}, {"loss", 7.9}});   // {"step": 1, "loss": 7.9}

#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace zt::train {

class MetricsLog {
 public:
  // An empty path makes every write a no-op (ranks other than 0). `append`: keep what the file
  // holds (a resumed run adds its steps after those of the run it resumes).
  explicit MetricsLog(const std::string& path, bool append = false);
  // Fields in the given order; non-finite numbers are written as null (JSON has no NaN), others
  // in the fewest digits that read back as the same double.
  void write(const std::vector<std::pair<std::string, double>>& fields);

 private:
  std::ofstream out_;
  std::string path_;
};

}  // namespace zt::train
