#pragma once
// Errors in zerotorch: one exception type, zt::Error, carrying where it was raised (file:line)
// and on which rank. User-facing programs catch it in main(), print its one-line what(), and
// exit non-zero (see zt::run_main in main_guard.h).
//
//   ZT_CHECK(stage >= 0 && stage <= 3, "zero_optimization.stage must be 0..3, got ", stage);
//   ZT_THROW("shard file ", path, " is truncated");
//   ZT_INTERNAL_ASSERT(offset + n <= numel, "view past the flat buffer");  // a bug, not user input
//
// Message pieces are streamed with operator<<, so any printable value can be passed.

#include <sstream>
#include <stdexcept>
#include <string>

namespace zt {

// Kind tells a user mistake from a bug in zerotorch or a failure of a backend (MPI, NCCL, gloo).
enum class ErrorKind { kUser, kInternal, kComm, kTimeout };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, const char* file, int line);

  ErrorKind kind() const { return kind_; }
  // The message without the location prefix.
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }
  int rank() const { return rank_; }

 private:
  ErrorKind kind_;
  std::string message_;
  const char* file_;
  int line_;
  int rank_;
};

// Rank of this process for error and log prefixes. Until set_process_rank() is called it is read
// once from the launcher's environment (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID);
// -1 means unknown (then no rank is printed).
int process_rank();
void set_process_rank(int rank);

// The first line of a message: a LibTorch error's what() goes on with its backtrace, which a
// one-line error leaves out.
std::string first_line(const std::string& message);
// The line of an exception's message that names what went wrong: its first line, except for an
// error raised inside TorchScript code, whose first line only says so and whose last line holds
// the error itself ("RuntimeError: ...").
std::string error_headline(const std::string& message);

namespace detail {

inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}

template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  append(os, args...);
  return os.str();
}

[[noreturn]] void throw_error(ErrorKind kind, const char* file, int line, const std::string& msg);

}  // namespace detail
}  // namespace zt

#define ZT_THROW_KIND(kind, ...) \
  ::zt::detail::throw_error((kind), __FILE__, __LINE__, ::zt::detail::str(__VA_ARGS__))

#define ZT_THROW(...) ZT_THROW_KIND(::zt::ErrorKind::kUser, __VA_ARGS__)

#define ZT_CHECK(cond, ...)                               \
  do {                                                    \
    if (!(cond)) {                                        \
      ZT_THROW_KIND(::zt::ErrorKind::kUser, __VA_ARGS__); \
    }                                                     \
  } while (false)

#define ZT_INTERNAL_ASSERT(cond, ...)                                      \
  do {                                                                     \
    if (!(cond)) {                                                         \
      ZT_THROW_KIND(::zt::ErrorKind::kInternal, "internal error: ", #cond, \
                    " failed: ", ##__VA_ARGS__);                           \
    }                                                                      \
  } while (false)
