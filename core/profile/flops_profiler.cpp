#include "core/profile/flops_profiler.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <sstream>
#include <vector>

#include "base/cuda_plugin.h"
#include "base/error.h"
#include "base/logging.h"
#include "core/profile/device_peak.h"

namespace zt::profile {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

FlopTotals minus(const FlopTotals& a, const FlopTotals& b) {
  return {a.forward - b.forward, a.backward - b.backward, a.recompute - b.recompute,
          a.other - b.other};
}

// 124.44 M, 3.1 G: DeepSpeed's number_to_string.
std::string with_suffix(double v, const std::string& unit = "") {
  static const char* kSuffix[] = {"", " K", " M", " G", " T", " P"};
  int i = 0;
  while (std::abs(v) >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << v << kSuffix[i];
  if (!unit.empty()) s << (i == 0 ? " " : "") << unit;
  return s.str();
}

std::string duration(double seconds) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2);
  if (seconds >= 1) {
    s << seconds << " s";
  } else if (seconds >= 1e-3) {
    s << seconds * 1e3 << " ms";
  } else {
    s << seconds * 1e6 << " us";
  }
  return s.str();
}

std::string percent(double part, double whole) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << (whole > 0 ? 100 * part / whole : 0) << "%";
  return s.str();
}

// "zt::models::GptBlockImpl" -> "GptBlock": the class as a user wrote it.
std::string class_name(const torch::nn::Module& m) {
  std::string n = m.name();
  const size_t colon = n.rfind("::");
  if (colon != std::string::npos) n = n.substr(colon + 2);
  if (n.size() > 4 && n.compare(n.size() - 4, 4, "Impl") == 0) n.resize(n.size() - 4);
  return n;
}

// A module's aggregate over its subtree.
struct Node {
  std::string name, cls;
  int depth = 0;
  int64_t params = 0;
  double matmul = 0, other = 0, seconds = 0;
  bool timed = false;
  double flops() const { return matmul + other; }
};

// Depth-first over the module tree; `out` in print order.
Node walk(const torch::nn::Module& m, const std::string& name, int depth,
          const std::unordered_map<const torch::nn::Module*, ModuleFlops>& charged,
          std::vector<Node>& out) {
  const size_t at = out.size();
  out.push_back({});
  Node n;
  n.name = name;
  n.cls = class_name(m);
  n.depth = depth;
  for (const auto& p : m.named_parameters(/*recurse=*/false)) n.params += p.value().numel();
  const auto it = charged.find(&m);
  if (it != charged.end()) {
    n.matmul = it->second.matmul;
    n.other = it->second.other;
    n.seconds = it->second.seconds;
    n.timed = it->second.calls > 0;
  }
  for (const auto& child : m.named_children()) {
    const Node c = walk(*child.value(), child.key(), depth + 1, charged, out);
    n.params += c.params;
    n.matmul += c.matmul;
    n.other += c.other;
  }
  out[at] = n;
  return n;
}

}  // namespace

FlopsProfiler::FlopsProfiler(FlopsProfilerOptions options, const torch::nn::Module& model,
                             ProfileContext ctx)
    : options_(std::move(options)), model_(model), ctx_(ctx) {
  peak_ = options_.peak_tflops > 0 ? options_.peak_tflops
                                   : known_peak_tflops(device_name(ctx_.device), ctx_.dtype);
  if (ctx_.device.is_cuda()) {
    counter_.set_scope_sync(reinterpret_cast<void (*)()>(cuda::find_symbol("zt_cuda_synchronize")));
  }
  last_.peak_tflops = peak_;
  counter_.start();
}

void FlopsProfiler::begin_forward(int64_t global_step) {
  if (!window_started_) {
    window_started_ = true;
    window_start_ = Clock::now();
  }
  if (profiling_ == Profiling::kNo && global_step == options_.profile_step && ctx_.rank == 0) {
    profiling_ = Profiling::kForward;
    before_profile_ = counter_.totals();
    counter_.track_modules(&model_);
  }
  phase_start_ = Clock::now();
  counter_.set_phase(Phase::kForward);
}

void FlopsProfiler::end_forward() {
  counter_.set_phase(Phase::kIdle);
  if (profiling_ != Profiling::kForward) return;
  profile_fwd_seconds_ = seconds_since(phase_start_);
  const FlopTotals now = counter_.totals();
  profile_forward_ = minus(now, before_profile_);
  before_profile_ = now;
  profile_modules_ = counter_.module_flops();
  counter_.track_modules(nullptr);
  profiling_ = Profiling::kBackward;
}

void FlopsProfiler::begin_backward() {
  phase_start_ = Clock::now();
  counter_.set_phase(Phase::kBackward);
}

void FlopsProfiler::end_backward() {
  counter_.set_phase(Phase::kIdle);
  if (profiling_ != Profiling::kBackward) return;
  profile_bwd_seconds_ = seconds_since(phase_start_);
  profile_backward_ = minus(counter_.totals(), before_profile_);
  profiling_ = Profiling::kDone;
}

void FlopsProfiler::end_step(int64_t global_step, double step_seconds) {
  last_.step = global_step;
  last_.flops = counter_.totals();
  last_.seconds = window_started_ ? seconds_since(window_start_) : 0;
  counter_.reset();
  window_started_ = true;
  window_start_ = Clock::now();
  if (profiling_ == Profiling::kDone) {
    profile_step_seconds_ = step_seconds;
    print_profile(global_step - 1);
    profiling_ = Profiling::kNo;
    options_.profile_step = -1;  // once
  }
}

void FlopsProfiler::print_profile(int64_t step) const {
  std::vector<Node> nodes;
  const Node root = walk(model_, class_name(model_), 0, profile_modules_, nodes);
  const FlopTotals& f = profile_forward_;
  const FlopTotals& b = profile_backward_;
  const double fwd_flops = f.forward + f.other;
  const double bwd_flops = b.backward + b.other + b.recompute;
  const double iter = last_.seconds;
  std::ostringstream o;
  auto line = [&](const std::string& k, const std::string& v) {
    o << std::left << std::setw(70) << k << "  " << v << "\n";
  };
  o << "\n-------------------------- zerotorch FLOPs profiler --------------------------\n";
  o << "Profile summary at step " << step << " (first micro-batch; the step's "
    << ctx_.gradient_accumulation_steps << " micro-batches in the iteration figures):\n";
  o << "Flops are counted from the ATen ops that ran: matmul = matrix products and attention, "
       "other = elementwise and reductions; MACs = matmul / 2.\n\n";
  line("world size: ", std::to_string(ctx_.world_size));
  line("batch size per rank: ", std::to_string(options_.micro_batch_size));
  line("params of model: ", with_suffix(static_cast<double>(root.params)));
  line("fwd MACs per rank: ", with_suffix(f.forward / 2, "MACs"));
  line("fwd flops per rank (matmul + other): ",
       with_suffix(fwd_flops) + " (" + with_suffix(f.forward) + " + " + with_suffix(f.other) + ")");
  line("fwd latency: ", duration(profile_fwd_seconds_));
  line("fwd FLOPS per rank = fwd flops / fwd latency: ",
       with_suffix(profile_fwd_seconds_ > 0 ? fwd_flops / profile_fwd_seconds_ : 0, "FLOPS"));
  line("bwd flops per rank (matmul + other + recompute, counted): ",
       with_suffix(bwd_flops) + " (" + with_suffix(b.backward) + " + " + with_suffix(b.other) +
           " + " + with_suffix(b.recompute) + ")");
  line("bwd / fwd matmul flops (DeepSpeed assumes 2): ",
       f.forward > 0 ? std::to_string(b.backward / f.forward) : "-");
  line("bwd latency: ", duration(profile_bwd_seconds_));
  line("bwd FLOPS per rank = bwd flops / bwd latency: ",
       with_suffix(profile_bwd_seconds_ > 0 ? bwd_flops / profile_bwd_seconds_ : 0, "FLOPS"));
  line("step latency: ", duration(profile_step_seconds_));
  line("iter latency (all micro-batches and the step): ", duration(iter));
  line("model flops per rank in the iteration: ", with_suffix(last_.flops.model()));
  line("FLOPS per rank = model flops / iter latency: ",
       with_suffix(iter > 0 ? last_.flops.model() / iter : 0, "FLOPS"));
  line("device: ", device_name(ctx_.device) + ", " + c10::toString(ctx_.dtype));
  line("MFU = model FLOPS / peak: ",
       peak_ > 0 ? percent(last_.tflops(), peak_) + " of " + with_suffix(peak_ * 1e12, "FLOPS")
                 : "- (peak unknown: set flops_profiler.peak_tflops)");
  line("samples/second: ",
       iter > 0 ? std::to_string(static_cast<double>(options_.micro_batch_size * ctx_.world_size *
                                                     ctx_.gradient_accumulation_steps) /
                                 iter)
                : "-");

  // Aggregated: per depth, module classes summed, top N by params, MACs and latency.
  int max_depth = 0;
  for (const Node& n : nodes) max_depth = std::max(max_depth, n.depth);
  const int depth_limit =
      options_.module_depth < 0 ? max_depth : std::min(options_.module_depth, max_depth);
  o << "\n----------------------------- Aggregated profile per rank "
       "-----------------------------\n";
  o << "Top " << options_.top_modules
    << " modules in terms of params, MACs or fwd latency at different model depths:\n";
  for (int d = 0; d <= depth_limit; ++d) {
    std::map<std::string, Node> by_class;
    for (const Node& n : nodes) {
      if (n.depth != d) continue;
      Node& agg = by_class[n.cls];
      agg.cls = n.cls;
      agg.params += n.params;
      agg.matmul += n.matmul;
      agg.seconds += n.seconds;
      agg.timed = agg.timed || n.timed;
    }
    std::vector<Node> v;
    for (auto& kv : by_class) v.push_back(kv.second);
    auto top = [&](const std::function<double(const Node&)>& key,
                   const std::function<std::string(const Node&)>& show) {
      std::sort(v.begin(), v.end(), [&](const Node& a, const Node& c) { return key(a) > key(c); });
      std::string s = "{";
      for (size_t i = 0; i < v.size() && i < static_cast<size_t>(options_.top_modules); ++i) {
        s += (i ? ", '" : "'") + v[i].cls + "': '" + show(v[i]) + "'";
      }
      return s + "}";
    };
    o << "depth " << d << ":\n";
    o << "    params      - "
      << top([](const Node& n) { return double(n.params); },
             [](const Node& n) { return with_suffix(double(n.params)); })
      << "\n";
    o << "    MACs        - "
      << top([](const Node& n) { return n.matmul; },
             [](const Node& n) { return with_suffix(n.matmul / 2, "MACs"); })
      << "\n";
    o << "    fwd latency - "
      << top([](const Node& n) { return n.seconds; },
             [](const Node& n) { return n.timed ? duration(n.seconds) : std::string("-"); })
      << "\n";
  }
  if (options_.detailed) {
    o << "\n------------------------------ Detailed profile per rank "
         "------------------------------\n";
    o << "Each module: params, % of params, MACs, % of MACs, flops (matmul + other), fwd "
         "latency, % of fwd latency, fwd FLOPS.\nLatency is known for the model and its units "
         "(zt::call_unit); ops that read no parameter of a module are charged to the innermost "
         "unit.\n\n";
    for (const Node& n : nodes) {
      if (options_.module_depth >= 0 && n.depth > options_.module_depth) continue;
      o << std::string(2 * static_cast<size_t>(n.depth), ' ') << "(" << n.name << "): " << n.cls
        << "(" << with_suffix(double(n.params)) << " = "
        << percent(double(n.params), double(root.params)) << " params, "
        << with_suffix(n.matmul / 2, "MACs") << " = " << percent(n.matmul, root.matmul) << " MACs, "
        << with_suffix(n.flops()) << " flops";
      if (n.timed) {
        o << ", " << duration(n.seconds) << " = " << percent(n.seconds, profile_fwd_seconds_)
          << " latency, " << with_suffix(n.seconds > 0 ? n.flops() / n.seconds : 0, "FLOPS");
      }
      o << ")\n";
    }
  }
  o << "------------------------------------------------------------------------------\n";
  if (options_.output_file.empty()) {
    ZT_LOG_INFO(o.str());
    return;
  }
  const std::filesystem::path path(options_.output_file);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream file(path);
  file << o.str();
  file.close();
  if (!file) {
    ZT_LOG_WARN("flops_profiler.output_file ", options_.output_file,
                ": cannot be written; the profile follows\n", o.str());
  }
}

}  // namespace zt::profile
