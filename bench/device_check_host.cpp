// The CUDA-free half of device_check.hpp: without SHARDTOPK_WITH_CUDA the device count pass is
// never available, and check_samples scans the rows on the host.
#include "device_check.hpp"

namespace shardtopk::bench {

#ifndef SHARDTOPK_WITH_CUDA
bool device_count_available(Metric, int, std::string* why) {
  *why = "built without CUDA";
  return false;
}

bool device_count_missed(const DeviceCountInput&, long long*, double*) { return false; }
#endif

}  // namespace shardtopk::bench
