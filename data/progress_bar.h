#pragma once
// ProgressBar: one line on stderr for long work in tools (`encoding [#####.....] 48% 15012/31102
// 1.2s`), redrawn at most 10 times a second; when stderr is not a terminal (CI logs), a plain line
// at every 10% instead, so logs stay readable. Thread-safe add().

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace zt::data {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  ~ProgressBar();  // finishes the line
  void add(int64_t n);
  void finish();

 private:
  void draw(int64_t done, bool final_draw);

  std::string label_;
  int64_t total_;
  std::atomic<int64_t> done_{0};
  std::mutex mutex_;
  bool tty_;
  bool finished_ = false;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace zt::data
