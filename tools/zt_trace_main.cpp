// zt-trace DIR [--verbose]: reads the flight recorder's dumps of every rank (DIR/flight_r*.json,
// parallel/flight_recorder.h) and says what went wrong: its first line is the verdict (where the
// ranks' collectives diverged, or which rank never entered a collective the others waited in),
// then every finding, then with --verbose one line per collective and rank.

#include <boost/program_options.hpp>
#include <iostream>
#include <string>

#include "base/main_guard.h"
#include "tools/trace_analysis.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  return zt::run_main("zt-trace", [&] {
    std::string dir;
    po::options_description desc("usage: zt-trace DIR [--verbose]");
    desc.add_options()("help,h", "this help")("verbose,v", "a table of every collective")(
        "dir", po::value(&dir), "the dumps' directory (ZT_FLIGHT_DIR of the job)");
    po::positional_options_description pos;
    pos.add("dir", 1);
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
    po::notify(vm);
    if (vm.count("help") || dir.empty()) {
      std::cout << desc;
      return vm.count("help") ? 0 : 2;
    }
    const auto dumps = zt::tools::read_dumps(dir);
    const auto report = zt::tools::analyze(dumps);
    std::cout << "zt-trace: " << report.verdict << "\n";
    std::cout << dumps.size() << " dump(s):";
    for (const auto& d : dumps) std::cout << " rank " << d.rank << " (" << d.reason << ")";
    std::cout << "\n";
    for (const auto& f : report.findings) std::cout << "  - " << f << "\n";
    if (vm.count("verbose")) std::cout << report.table;
    return 0;
  });
}
