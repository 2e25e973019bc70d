#include "train/monitor/tensorboard_writer.h"

#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <unistd.h>

#include "base/error.h"

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

// The protobuf wire format of tensorboard_event.proto, written by hand: linking libprotobuf next
// to Debian's libsentencepiece (which carries its own protobuf-lite symbols) crashes at load
// (libprotobuf's static initialisers bind into sentencepiece's copy), and the GPT example loads
// both. Fields: (number << 3) | wire type; 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event{wall_time = 1, step = 2} plus its `what` (file_version = 3 or summary = 5), already
// encoded as `what`.
std::string encode_event(double wall_time, int64_t step, const std::string& what) {
  std::string e;
  uint64_t bits = 0;
  std::memcpy(&bits, &wall_time, sizeof(bits));
  put_varint(e, (1 << 3) | 1);
  put_le(e, bits, 8);
  put_varint(e, (2 << 3) | 0);
  put_varint(e, static_cast<uint64_t>(step));
  return e + what;
}

// Summary{value = 1: Value{tag = 1, simple_value = 2}}.
std::string encode_scalar_summary(const std::string& tag, float value) {
  std::string v;
  put_bytes(v, 1, tag);
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  put_varint(v, (2 << 3) | 5);
  put_le(v, bits, 4);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string what;
  put_bytes(what, 5, summary);
  return what;
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
  std::string version;
  put_bytes(version, 3, "brain.Event:2");
  write_record(encode_event(t, 0, version));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::write(int64_t step, const std::string& name, double value) {
  write_record(
      encode_event(now_seconds(), step, encode_scalar_summary(name, static_cast<float>(value))));
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
