#include "core/monitor/tensorboard_writer.h"

#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <unistd.h>

#include "core/base/error.h"
#include "core/monitor/tensorboard_event.pb.h"

namespace zt {
namespace {

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  // Castagnoli polynomial, reflected in and out, initial and final XOR all ones.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(std::string log_dir) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  ZT_CHECK(!ec, "tensorboard: cannot create ", log_dir, " (output_path/job_name): ", ec.message());
  const double t = now_seconds();
  path_ = log_dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(t)) + "." +
          host_name();
  file_ = std::fopen(path_.c_str(), "wb");
  ZT_CHECK(file_ != nullptr, "tensorboard: cannot open ", path_, ": ", std::strerror(errno));
  tensorboard::Event first;
  first.set_wall_time(t);
  first.set_step(0);
  first.set_file_version("brain.Event:2");
  write_record(first.SerializeAsString());
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::write(int64_t step, const std::string& name, double value) {
  tensorboard::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(name);
  v->set_simple_value(static_cast<float>(value));
  write_record(event.SerializeAsString());
}

void TensorBoardWriter::flush() {
  std::fflush(file_);
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string header;
  put_le(header, data.size(), 8);
  std::string record = header;
  put_le(record, masked_crc32c(header.data(), header.size()), 4);
  record += data;
  put_le(record, masked_crc32c(data.data(), data.size()), 4);
  ZT_CHECK(std::fwrite(record.data(), 1, record.size(), file_) == record.size(),
           "tensorboard: write to ", path_, " failed");
}

}  // namespace zt
