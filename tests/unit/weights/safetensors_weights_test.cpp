// SafetensorsSet and SafetensorsWeights (core/checkpoint/): every element range of a parameter,
// stored in our layout or transposed, in F32, BF16 or F16, unaligned in the file or not, reads
// what slicing the whole tensor gives; a sharded set finds each tensor in its file; each bad
// input is one line naming the file and the tensor.

#include "weights/safetensors_weights.h"

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "tests/support/safetensors_file.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

using Named = testing::NamedTensorList;

fs::path fresh_dir(const std::string& name) {
  // Per process: ctest runs this binary's tests in parallel processes.
  const fs::path d = fs::path(ZT_BINARY_DIR) / "Testing" / "safetensors_weights" /
                     (name + "." + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_file(const fs::path& path, const Named& tensors) {
  testing::write_safetensors(path.string(), tensors);
}

void write_index(const fs::path& dir, const std::vector<std::pair<std::string, std::string>>& map) {
  std::ofstream o(dir / "model.safetensors.index.json");
  o << "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  for (size_t i = 0; i < map.size(); ++i) {
    o << (i ? ", " : "") << "\"" << map[i].first << "\": \"" << map[i].second << "\"";
  }
  o << "}}\n";
}

// The error `f` throws: one line, holding every one of `parts`.
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming " << parts.front();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' in " << m;
  }
}

StoredTensor same_name(const std::string& p) {
  return {p, p.rfind("t.", 0) == 0};  // "t.*" stored transposed
}

TEST(SafetensorsWeights, EveryRangeEqualsTheWholeTensorsSlice) {
  const fs::path d = fresh_dir("ranges");
  torch::manual_seed(3);
  const at::Tensor plain = torch::randn({5, 7});
  const at::Tensor trans = torch::randn({6, 4});  // ours (6, 4), stored (4, 6)
  // "odd" (3,) F16 puts every tensor after it 2 bytes off alignment: read, not mapped.
  write_file(d / "model.safetensors", {{"a", plain},
                                       {"t.a", trans.t().contiguous()},
                                       {"b16", plain.to(at::kBFloat16)},
                                       {"t.b16", trans.t().contiguous().to(at::kBFloat16)},
                                       {"odd", torch::randn({3}).to(at::kHalf)},
                                       {"f16", plain.to(at::kHalf)},
                                       {"t.f16", trans.t().contiguous().to(at::kHalf)}});
  SafetensorsSet files(d.string());
  EXPECT_EQ(files.where(), (d / "model.safetensors").string());
  SafetensorsWeights w(files, same_name);
  for (const std::string dtype : {"a", "b16", "f16"}) {
    for (bool transposed : {false, true}) {
      const std::string name = (transposed ? "t." : "") + dtype;
      const at::Tensor ours = transposed ? trans : plain;
      const at::Tensor expected =
          ours.to(files.find(name)->entry(name).dtype).to(at::kFloat).reshape({-1});
      const int64_t n = ours.numel();
      for (int64_t begin = 0; begin <= n; ++begin) {
        for (int64_t len = 0; begin + len <= n; ++len) {
          at::Tensor dst = torch::full({len}, -1.0f);
          w.fill(name, ours.sizes(), begin, dst);
          ASSERT_TRUE(torch::equal(dst, expected.narrow(0, begin, len)))
              << name << " [" << begin << ", " << begin + len << ")";
        }
      }
    }
  }
  EXPECT_EQ(w.parameters_filled(), 6);
  expect_error([&] { w.check_all_used([](const std::string&) { return false; }); },
               {(d / "model.safetensors").string(), "'odd'", "matches no parameter"});
  w.check_all_used([](const std::string& t) { return t == "odd"; });
}

TEST(SafetensorsWeights, MappedViewIsTheFilesBytes) {
  const fs::path d = fresh_dir("mapped");
  const at::Tensor v = torch::arange(12, at::kFloat).view({3, 4});
  write_file(d / "model.safetensors", {{"v", v}, {"h", torch::ones({3}, at::kHalf)}, {"w", v}});
  SafetensorsReader r((d / "model.safetensors").string());
  EXPECT_TRUE(torch::equal(r.map("v"), v));
  // A view of the one mapping (the same bytes every time), not a copy.
  EXPECT_EQ(r.map("v").data_ptr(), r.map("v").data_ptr());
  EXPECT_NE(r.read("v").data_ptr(), r.map("v").data_ptr());
  // Dropping the pages from the resident set leaves the values readable (faulted in again).
  const at::Tensor m = r.map("v");
  r.drop_pages("v");
  EXPECT_TRUE(torch::equal(m, v));
  // "w" starts 6 bytes after "h": not aligned for float, so read into memory (a fresh copy).
  EXPECT_TRUE(torch::equal(r.map("w"), v));
  EXPECT_NE(r.map("w").data_ptr(), r.map("w").data_ptr());
}

TEST(SafetensorsWeights, ErrorsNameFileAndTensor) {
  const fs::path d = fresh_dir("errors");
  const std::string file = (d / "model.safetensors").string();
  write_file(d / "model.safetensors", {{"w", torch::zeros({2, 3})},
                                       {"t.w", torch::zeros({3, 2})},
                                       {"ids", torch::zeros({4}, at::kLong)}});
  SafetensorsSet files(d.string());
  SafetensorsWeights w(files, same_name);
  at::Tensor none = torch::empty({0});
  expect_error([&] { w.fill("missing", {2}, 0, none); },
               {file, "no tensor 'missing'", "parameter missing"});
  expect_error([&] { w.fill("w", {3, 2}, 0, none); }, {file, "'w'", "[2, 3]", "[3, 2]"});
  expect_error(
      [&] {
        w.fill("t.w", {3, 2}, 0, none);
      },
      {file, "'t.w'", "[3, 2]", "needs [2, 3]", "transposed"});
  expect_error([&] { w.fill("ids", {4}, 0, none); }, {file, "'ids'", "floating-point"});
  // An empty range still checks, and counts the parameter as taken.
  w.fill("w", {2, 3}, 0, none);
  EXPECT_EQ(w.parameters_filled(), 1);
}

TEST(SafetensorsSet, ShardedSetFindsEachTensorInItsFile) {
  const fs::path d = fresh_dir("sharded");
  write_file(d / "model-00001-of-00002.safetensors", {{"a", torch::ones({2})}});
  write_file(d / "model-00002-of-00002.safetensors",
             {{"b", torch::full({3}, 2.0f)}, {"c", torch::full({1}, 3.0f)}});
  write_index(d, {{"a", "model-00001-of-00002.safetensors"},
                  {"b", "model-00002-of-00002.safetensors"},
                  {"c", "model-00002-of-00002.safetensors"}});
  SafetensorsSet files(d.string());
  ASSERT_EQ(files.files().size(), 2u);
  EXPECT_EQ(files.where(), (d / "model.safetensors.index.json").string());
  EXPECT_EQ(files.find("a"), files.files()[0].get());
  EXPECT_EQ(files.find("c"), files.files()[1].get());
  EXPECT_EQ(files.find("z"), nullptr);
  SafetensorsWeights w(files, same_name);
  at::Tensor dst = torch::empty({2});
  w.fill("b", {3}, 1, dst);
  EXPECT_TRUE(torch::equal(dst, torch::full({2}, 2.0f)));
  expect_error([&] { w.fill("z", {1}, 0, dst.narrow(0, 0, 0)); }, {files.where(), "no tensor 'z'"});

  // The index puts a tensor in a file that does not hold it.
  write_index(
      d, {{"a", "model-00002-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}});
  expect_error([&] { SafetensorsSet bad(d.string()); },
               {"model.safetensors.index.json", "'a'", "model-00002-of-00002.safetensors"});
  // One tensor in two files.
  write_file(d / "model-00001-of-00002.safetensors",
             {{"a", torch::ones({2})}, {"c", torch::ones({1})}});
  write_index(
      d, {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}});
  expect_error([&] { SafetensorsSet bad(d.string()); },
               {"model-00002-of-00002.safetensors", "'c'", "appears twice"});
  fs::remove(d / "model.safetensors.index.json");
  expect_error([&] { SafetensorsSet bad(d.string()); }, {d.string(), "model.safetensors"});
}

}  // namespace
}  // namespace zt
