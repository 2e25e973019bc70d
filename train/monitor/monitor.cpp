#include "train/monitor/monitor.h"

#include "base/error.h"
#include "base/logging.h"
#include "train/monitor/csv_monitor.h"
#ifdef ZT_HAVE_TENSORBOARD
#include "train/monitor/tensorboard_writer.h"
#endif

namespace zt {

Monitor::~Monitor() = default;

void MonitorList::write(int64_t step, const std::string& name, double value) {
  for (auto& m : monitors_) m->write(step, name, value);
}

void MonitorList::flush() {
  for (auto& m : monitors_) m->flush();
}

std::string monitor_log_dir(const MonitorConfig& config) {
  if (config.output_path.empty()) return config.job_name;
  std::string dir = config.output_path;
  if (dir.back() != '/') dir += '/';
  return dir + config.job_name;
}

std::shared_ptr<Monitor> make_monitor(const Config& config, int rank) {
  auto list = std::make_shared<MonitorList>();
  if (rank != 0) return list;
  if (config.tensorboard.enabled) {
#ifdef ZT_HAVE_TENSORBOARD
    auto tb = std::make_shared<TensorBoardWriter>(monitor_log_dir(config.tensorboard));
    ZT_LOG_INFO("tensorboard: writing ", tb->path());
    list->add(tb);
#else
    ZT_THROW("tensorboard.enabled: this is a reduced build without the TensorBoard writer");
#endif
  }
  if (config.csv_monitor.enabled) {
    auto csv = std::make_shared<CsvMonitor>(monitor_log_dir(config.csv_monitor));
    ZT_LOG_INFO("csv_monitor: writing ", csv->log_dir(), "/*.csv");
    list->add(csv);
  }
  return list;
}

}  // namespace zt
