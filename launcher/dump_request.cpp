#include "launcher/dump_request.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <signal.h>

#include "base/error.h"

namespace zt::launcher {

int request_dump(const std::string& pid_text) {
  char* end = nullptr;
  const long pid = std::strtol(pid_text.c_str(), &end, 10);
  ZT_CHECK(end != pid_text.c_str() && *end == '\0' && pid > 1,
           "ztrun --dump: PID must be the process id of a running ztrun, got '", pid_text, "'");
  ZT_CHECK(::kill(static_cast<pid_t>(pid), SIGUSR1) == 0, "ztrun --dump: cannot signal pid ", pid,
           ": ", std::strerror(errno));
  std::cout << "ztrun --dump: sent SIGUSR1 to ztrun " << pid
            << "; each rank writes <ZT_FLIGHT_DIR>/flight_r<rank>.json (default ./zt_flight)\n";
  return 0;
}

}  // namespace zt::launcher
