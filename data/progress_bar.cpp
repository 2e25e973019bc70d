#include "data/progress_bar.h"

#include <algorithm>
#include <cstdio>
#include <unistd.h>

namespace zt::data {

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      tty_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  finish();
}

void ProgressBar::add(int64_t n) {
  const int64_t done = done_.fetch_add(n) + n;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  if (tty_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(done, false);
}

void ProgressBar::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  draw(done_.load(), true);
  finished_ = true;
}

void ProgressBar::draw(int64_t done, bool final_draw) {
  const double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (!tty_) {
    const int decile = static_cast<int>(frac * 10);
    if (decile == last_decile_) return;
    last_decile_ = decile;
    std::fprintf(stderr, "%s %3d%% %lld/%lld %.1fs\n", label_.c_str(), static_cast<int>(frac * 100),
                 static_cast<long long>(done), static_cast<long long>(total_), secs);
    return;
  }
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r%s [%s] %3d%% %lld/%lld %.1fs%s", label_.c_str(), bar.c_str(),
               static_cast<int>(frac * 100), static_cast<long long>(done),
               static_cast<long long>(total_), secs, final_draw ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace zt::data
