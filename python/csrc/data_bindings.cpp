// data/ for Python: the same token shards, sampler and collator the C++ programs use, so a Python
// script batches exactly as train_gpt does (python/zerotorch/data.py wraps them in
// torch.utils.data's protocols).
#include <map>
#include <memory>
#include <pybind11/stl.h>
#include <string>
#include <vector>

#include <torch/python.h>

#include "data/batch_sampler.h"
#include "data/collator.h"
#include "data/token_dataset.h"
#include "data/token_shard_writer.h"
#include "python/csrc/bindings.h"

namespace py = pybind11;

namespace zt::python {
namespace {

py::dict batch_dict(const data::Batch& b) {
  py::dict d;
  d["input_ids"] = b.input_ids;
  d["attention_mask"] = b.attention_mask;
  d["labels"] = b.labels;
  if (b.sample_labels.defined()) d["sample_labels"] = b.sample_labels;
  d["indices"] = b.indices;
  return d;
}

}  // namespace

void bind_data(py::module_& m) {
  py::class_<data::TokenDataset>(m, "TokenShard")
      .def(py::init([](const std::string& path, bool verify_checksum) {
             data::TokenDatasetOptions o;
             o.verify_checksum = verify_checksum;
             return std::make_unique<data::TokenDataset>(path, o);
           }),
           py::arg("path"), py::arg("verify_checksum") = true)
      .def("__len__", &data::TokenDataset::size)
      .def("length", &data::TokenDataset::length, py::arg("index"))
      .def("lengths",
           [](const data::TokenDataset& d) {
             std::vector<int64_t> out(static_cast<size_t>(d.size()));
             for (int64_t i = 0; i < d.size(); ++i) out[static_cast<size_t>(i)] = d.length(i);
             return out;
           })
      .def("tokens", &data::TokenDataset::tensor, py::arg("index"))
      .def(
          "labels",
          [](const data::TokenDataset& d, int64_t i) {
            std::vector<int64_t> out(static_cast<size_t>(d.num_label_fields()));
            if (!out.empty()) d.read_labels(i, out.data());
            return out;
          },
          py::arg("index"))
      .def("meta_value", &data::TokenDataset::meta_value, py::arg("key"))
      .def_property_readonly("path", &data::TokenDataset::path)
      .def_property_readonly("label_fields", &data::TokenDataset::label_fields)
      .def_property_readonly("num_tokens", &data::TokenDataset::num_tokens)
      .def_property_readonly("vocab_size", &data::TokenDataset::vocab_size)
      .def_property_readonly("pad_id", &data::TokenDataset::pad_id);

  py::class_<data::LengthBucketedSampler>(m, "LengthBucketedSampler")
      .def(py::init([](std::vector<int64_t> lengths, int64_t batch_size, int64_t max_tokens,
                       int64_t max_batch_size, int64_t mega_batch_mult, uint64_t seed,
                       bool drop_last, int64_t rank, int64_t world_size, int64_t max_length,
                       int64_t pad_to_multiple, bool longest_first) {
             data::SamplerOptions o;
             o.batch_size = batch_size;
             o.max_tokens = max_tokens;
             o.max_batch_size = max_batch_size;
             o.mega_batch_mult = mega_batch_mult;
             o.seed = seed;
             o.tail = drop_last ? data::TailPolicy::kDrop : data::TailPolicy::kPadByRepeat;
             o.rank = rank;
             o.world_size = world_size;
             o.max_length = max_length;
             o.pad_to_multiple = pad_to_multiple;
             o.longest_first = longest_first;
             return std::make_unique<data::LengthBucketedSampler>(std::move(lengths), o);
           }),
           py::arg("lengths"), py::arg("batch_size"), py::arg("max_tokens"),
           py::arg("max_batch_size"), py::arg("mega_batch_mult"), py::arg("seed"),
           py::arg("drop_last"), py::arg("rank"), py::arg("world_size"), py::arg("max_length"),
           py::arg("pad_to_multiple"), py::arg("longest_first"))
      .def("set_epoch", &data::BatchSampler::set_epoch, py::arg("epoch"))
      .def_property_readonly("epoch", &data::BatchSampler::epoch)
      .def_property_readonly("position", &data::BatchSampler::position)
      .def("__len__", &data::BatchSampler::num_batches)
      .def("batches", &data::BatchSampler::batches)
      .def("has_next", &data::BatchSampler::has_next)
      .def("next", &data::BatchSampler::next)
      .def("padded_length", &data::BatchSampler::padded_length, py::arg("batch"))
      .def("state", [](const data::LengthBucketedSampler& s) { return s.state().to_string(); })
      .def(
          "load_state",
          [](data::LengthBucketedSampler& s, const std::string& text) {
            s.load_state(data::SamplerState::parse(text));
          },
          py::arg("state"));

  py::class_<data::Collator>(m, "Collator")
      .def(py::init([](int64_t pad_id, int64_t pad_to_multiple, int64_t max_length,
                       bool causal_lm_shift, int64_t ignore_index) {
             data::CollatorOptions o;
             o.pad_id = pad_id;
             o.pad_to_multiple = pad_to_multiple;
             o.max_length = max_length;
             o.causal_lm_shift = causal_lm_shift;
             o.ignore_index = ignore_index;
             return std::make_unique<data::Collator>(o);
           }),
           py::arg("pad_id"), py::arg("pad_to_multiple"), py::arg("max_length"),
           py::arg("causal_lm_shift"), py::arg("ignore_index"))
      .def(
          "collate",
          [](const data::Collator& c, const std::vector<std::vector<int64_t>>& samples,
             const std::vector<std::vector<int64_t>>& sample_labels,
             const std::vector<int64_t>& indices) {
            return batch_dict(c.collate(samples, sample_labels, indices));
          },
          py::arg("samples"), py::arg("sample_labels"), py::arg("indices"))
      .def(
          "collate_shard",
          [](const data::Collator& c, const data::TokenDataset& shard,
             const std::vector<int64_t>& indices) { return batch_dict(c.collate(shard, indices)); },
          py::arg("shard"), py::arg("indices"))
      .def("padded_length", &data::Collator::padded_length, py::arg("longest"));

  m.def(
      "write_token_shard",
      [](const std::string& path, const std::vector<std::vector<int>>& samples, uint32_t vocab_size,
         const std::vector<std::string>& label_fields,
         const std::vector<std::vector<int64_t>>& labels,
         const std::map<std::string, std::string>& meta) {
        data::ShardWriterOptions o;
        o.vocab_size = vocab_size;
        o.label_fields = label_fields;
        data::TokenShardWriter w(o);
        for (size_t i = 0; i < samples.size(); ++i) {
          w.add(samples[i], labels.empty() ? std::vector<int64_t>() : labels.at(i));
        }
        for (const auto& [key, value] : meta) w.set_meta(key, value);
        w.write(path);
      },
      py::arg("path"), py::arg("samples"), py::arg("vocab_size"), py::arg("label_fields"),
      py::arg("labels"), py::arg("meta"));
}

}  // namespace zt::python
