// The slot bookkeeping both engines share (src/engine/slots.hpp): the dead count a search scans
// (the CPU engine scans up to its high-water mark, the CUDA engine every slot), the words a
// set_live changes, and the checks of write_rows, set_live and read_rows, each refusing without
// changing anything.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/slots.hpp"
#include "shardtopk/error.hpp"
#include "test_support.hpp"

namespace shardtopk::engine_detail {
namespace {

using ::testing::HasSubstr;

TEST(Slots, DeadCountCoversTheScannedSlotsOnly) {
  Slots high_water(100, 40, 40);  // reserved slots are not scanned yet
  Slots every_slot(100, 40, 100);
  EXPECT_EQ(high_water.dead(), 0);
  EXPECT_EQ(every_slot.dead(), 60);
  EXPECT_TRUE(high_water.is_live(39));
  EXPECT_FALSE(high_water.is_live(40));

  high_water.scan_through(44);  // slot 44 written: slots 40..44 join the scan, dead
  EXPECT_EQ(high_water.scanned(), 45);
  EXPECT_EQ(high_water.dead(), 5);
  high_water.scan_through(10);  // already scanned: nothing changes
  EXPECT_EQ(high_water.scanned(), 45);

  const std::vector<std::int64_t> on{40, 44, 90};
  const WordSpan w = high_water.set_live(on.data(), 3, true);
  EXPECT_EQ(w.lo, 1);
  EXPECT_EQ(w.hi, 2);
  EXPECT_EQ(high_water.dead(), 3);  // slot 90 is past the scan
  EXPECT_TRUE(high_water.set_live(on.data(), 3, true).empty()) << "no slot changed";
  const std::vector<std::int64_t> off{0, 1, 31};
  const WordSpan w0 = high_water.set_live(off.data(), 3, false);
  EXPECT_EQ(w0.lo, 0);
  EXPECT_EQ(w0.hi, 0);
  EXPECT_EQ(high_water.dead(), 6);
  EXPECT_EQ(high_water.live_mask()[0], ~((1u << 0) | (1u << 1) | (1u << 31)));
}

TEST(Slots, BadCallsAreRefusedAndChangeNothing) {
  Slots s(64, 10, 64);
  const std::vector<std::uint32_t> before = s.live_mask();
  const std::vector<std::int64_t> bad{3, 64};
  EXPECT_THAT(test::error_of([&] { s.set_live(bad.data(), 2, false); }), HasSubstr("set_live: slot 64 outside [0, 64)"));
  EXPECT_EQ(s.live_mask(), before) << "slot 3 stays live: nothing changes on error";
  EXPECT_EQ(s.dead(), 54);
  EXPECT_THAT(test::error_of([&] { s.set_live(nullptr, 1, true); }), HasSubstr("null slots"));
  float out[2];
  EXPECT_THAT(test::error_of([&] { s.check_read(bad.data(), 2, out); }), HasSubstr("read_rows: slot 64"));
  EXPECT_THAT(test::error_of([&] { s.check_read(bad.data(), 1, nullptr); }), HasSubstr("null slots or output"));

  const std::vector<std::int64_t> ids{7, 8};
  const std::vector<float> vec{1.0f, 2.0f, 3.0f, 1e6f};  // [2, dim 2]; 1e6 overflows float16
  SlotRows w;
  w.n = 2;
  w.ids = ids.data();
  w.vectors = vec.data();
  const std::vector<std::int64_t> live_slot{20, 5};
  w.slots = live_slot.data();
  EXPECT_THAT(test::error_of([&] { s.check_write(w, 2, Dtype::kFloat32); }), HasSubstr("slot 5 is live"));
  const std::vector<std::int64_t> dead_slots{20, 21};
  w.slots = dead_slots.data();
  EXPECT_NO_THROW(s.check_write(w, 2, Dtype::kFloat32));
  EXPECT_NO_THROW(s.check_write(w, 2, Dtype::kBFloat16));
  EXPECT_THAT(test::error_of([&] { s.check_write(w, 2, Dtype::kFloat16); }),
              HasSubstr("row id 8 value 1e+06 at column 1 overflows float16"));
  w.vectors = nullptr;
  EXPECT_THAT(test::error_of([&] { s.check_write(w, 2, Dtype::kFloat32); }), HasSubstr("null slots, ids or vectors"));
  w.n = 0;
  EXPECT_NO_THROW(s.check_write(w, 2, Dtype::kFloat32)) << "nothing to write, nothing to check";
}

}  // namespace
}  // namespace shardtopk::engine_detail
