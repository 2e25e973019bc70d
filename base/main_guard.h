#pragma once
// zt::run_main: the catch-all every zerotorch program wraps its main in. Any exception becomes
// one line on stderr (`<program>: error: <message>`) and exit code 1; a LibTorch error's
// backtrace is cut to its headline (error_headline, base/error.h), since users need the culprit,
// not our stack. In a job whose backend can stop every rank at once (MPI_Abort), it then does so
// (fatal_exit.h).

#include <cstdio>
#include <exception>
#include <string>

#include "base/error.h"
#include "base/fatal_exit.h"

namespace zt {

template <typename Fn>
int run_main(const char* program, Fn&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    const std::string what = error_headline(e.what());
    std::fprintf(stderr, "%s: error: %s\n", program, what.c_str());
    std::fflush(stderr);
    call_fatal_exit_hook(1);
    return 1;
  } catch (...) {
    std::fprintf(stderr, "%s: error: unknown exception\n", program);
    std::fflush(stderr);
    call_fatal_exit_hook(1);
    return 1;
  }
}

}  // namespace zt
