#include "parallel/desync.h"

#include <cstdio>

#include "base/error.h"

namespace zt::dist {
namespace {

std::string key_of(int rank) {
  return "desync/" + std::to_string(rank);
}

std::string seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

}  // namespace

DesyncReporter::DesyncReporter(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                               std::string backend)
    : store_(std::move(store)), rank_(rank), size_(size), backend_(std::move(backend)) {}

void DesyncReporter::publish_waiting(const CollectiveInfo& info) noexcept {
  if (!store_) return;
  try {
    std::string v = std::to_string(info.seq) + " " + info.kind;
    store_->set(key_of(rank_), std::vector<uint8_t>(v.begin(), v.end()));
  } catch (...) {
    // The report will say the store is unreachable.
  }
}

void DesyncReporter::publish_done() noexcept {
  if (!store_) return;
  try {
    store_->deleteKey(key_of(rank_));
  } catch (...) {
  }
}

std::string DesyncReporter::report() noexcept {
  if (!store_) return "desync info unavailable (no store)";
  std::string out;
  try {
    for (int r = 0; r < size_; ++r) {
      if (!out.empty()) out += "; ";
      std::string key = key_of(r);
      if (store_->check({key})) {
        std::vector<uint8_t> v = store_->get(key);
        std::string s(v.begin(), v.end());
        auto space = s.find(' ');
        out += detail::str(
            "rank ", r, ": waiting at ",
            space == std::string::npos ? s : s.substr(space + 1) + " #" + s.substr(0, space));
      } else {
        out += detail::str("rank ", r,
                           ": no report (not waiting in a collective: never joined, dead or busy)");
      }
    }
  } catch (const std::exception& e) {
    std::string what = e.what();
    auto nl = what.find('\n');
    if (nl != std::string::npos) what.resize(nl);
    out += " [desync store unreachable: " + what + "]";
  }
  return out;
}

void DesyncReporter::throw_timeout(const CollectiveInfo& info, std::chrono::milliseconds elapsed,
                                   std::chrono::milliseconds timeout) {
  publish_waiting(info);
  ZT_THROW_KIND(ErrorKind::kTimeout, backend_, " ", info.describe(), " timed out on rank ", rank_,
                " of ", size_, " after ", seconds(elapsed), " (timeout ", seconds(timeout),
                "); desync: ", report());
}

}  // namespace zt::dist
