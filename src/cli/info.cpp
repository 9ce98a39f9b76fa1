// `shardtopk info`: the datasets and root attributes of an HDF5 file, as a table or as JSON.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk::cli {
namespace {

// A numeric attribute as a JSON number (an array when it holds several values); text otherwise.
template <class T>
nlohmann::json json_number(const std::vector<T>& v) {
  return v.size() == 1 ? nlohmann::json(v[0]) : nlohmann::json(v);
}

// 1-D integer or float datasets (attribute_dtype) with one value per row of `train`: what
// corpus.attributes may name (docs/FILTERS.md), by their path.
std::vector<std::string> attribute_candidates(const FileInfo& fi) {
  std::int64_t rows = -1;
  for (const auto& d : fi.datasets)
    if (d.name == "train" && d.dims.size() == 2) rows = d.dims[0];
  std::vector<std::string> out;
  for (const auto& d : fi.datasets)
    if (rows >= 0 && d.dims.size() == 1 && d.dims[0] == rows && attribute_dtype(d.dtype))
      out.push_back(d.name);
  return out;
}

}  // namespace

int run_info(const InfoArgs& a) {
  const FileInfo fi = inspect_file(a.path);
  const std::vector<std::string> filterable = attribute_candidates(fi);
  if (a.json) {
    nlohmann::json j;
    j["path"] = fi.path;
    j["datasets"] = nlohmann::json::array();
    for (const auto& d : fi.datasets)
      j["datasets"].push_back({{"name", d.name}, {"shape", d.dims}, {"dtype", d.dtype}, {"chunked", d.chunked},
                               {"filters", d.filters}});
    j["filterable"] = filterable;  // datasets corpus.attributes may name
    j["attributes"] = nlohmann::json::object();
    for (const auto& kv : fi.attributes) {
      const auto i = fi.int_attributes.find(kv.first);
      const auto f = fi.float_attributes.find(kv.first);
      j["attributes"][kv.first] = i != fi.int_attributes.end()     ? json_number(i->second)
                                  : f != fi.float_attributes.end() ? json_number(f->second)
                                                                   : nlohmann::json(kv.second);
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("%s\n", fi.path.c_str());
  std::printf("  %-28s %-20s %-9s %s\n", "dataset", "shape", "dtype", "layout");
  for (const auto& d : fi.datasets) {
    std::string shape = "[";
    for (size_t i = 0; i < d.dims.size(); ++i) shape += (i ? ", " : "") + std::to_string(d.dims[i]);
    shape += "]";
    std::string layout = d.chunked ? "chunked" : "contiguous";
    if (!d.filters.empty()) layout += " " + d.filters;
    std::printf("  %-28s %-20s %-9s %s\n", d.name.c_str(), shape.c_str(), d.dtype.c_str(), layout.c_str());
  }
  std::string list;
  for (const std::string& f : filterable) list += (list.empty() ? "" : ", ") + f;
  std::printf("  filterable (one integer or float value per train row; name them in corpus.attributes): %s\n",
              list.empty() ? "none" : list.c_str());
  if (!fi.attributes.empty()) {
    std::printf("  attributes:\n");
    for (const auto& kv : fi.attributes) std::printf("    %s = %s\n", kv.first.c_str(), kv.second.c_str());
  }
  return 0;
}

}  // namespace shardtopk::cli
