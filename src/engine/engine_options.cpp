#include "shardtopk/engine.hpp"

namespace shardtopk {

EngineOptions engine_options(const Config& cfg, int device, int threads) {
  EngineOptions o;
  o.threads = threads;
  o.device = device;
  o.cuda_graphs = cfg.engine.cuda_graphs;
  o.scan_l2_hints = cfg.engine.scan_l2_hints;
  o.scan_rows = cfg.engine.scan_rows;
  o.scan_schedule = cfg.engine.scan_schedule;
  o.search_path = cfg.engine.search_path;
  o.filter_scan = cfg.engine.filter_scan;
  o.column_orders = cfg.engine.column_orders;
  o.cpu_isa = cfg.engine.cpu_isa;
  return o;
}

}  // namespace shardtopk
