// Placeholder until the importers land (see include/shardtopk/importers.hpp).
#include "shardtopk/importers.hpp"
#include "shardtopk/error.hpp"
namespace shardtopk {
void import_fashion_mnist(const std::string&, const ImportOptions&) { throw Error("import fashion-mnist: not yet built"); }
void import_glove_wink(const std::string&, std::uint64_t, int, const ImportOptions&) { throw Error("import glove: not yet built"); }
void import_raw_f32(const std::string&, std::int64_t, const std::string&, Metric, const ImportOptions&) { throw Error("import raw: not yet built"); }
}  // namespace shardtopk
