// The work buffer's bookkeeping of initial content (strategies/work_buffer.hpp): which ranges still
// read from the caller's input, as steps write into the start, the middle or the end of one, and
// what the caller sees at the end.
#include <gtest/gtest.h>

#include <vector>

#include "strategies/work_buffer.hpp"

namespace chorus {
namespace {

const std::byte* bytes_of(const std::vector<float>& v) { return reinterpret_cast<const std::byte*>(v.data()); }
std::byte* bytes_of(std::vector<float>& v) { return reinterpret_cast<std::byte*>(v.data()); }

struct OutOfPlace {
  std::vector<float> in{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> out = std::vector<float>(8, -1);
  WorkBuffer w = WorkBuffer::bind(OpKind::all_reduce, 0, 2, 0, 8, DType::f32, bytes_of(in), bytes_of(out));
  const std::byte* input_at(std::size_t i) const { return bytes_of(in) + i * sizeof(float); }
};

// A write into the middle of untouched input leaves two ranges that still read from the input.
TEST(WorkBuffer, AWriteIntoTheMiddleKeepsBothSidesReadingTheInput) {
  OutOfPlace b;
  const std::vector<float> ten(3, 10);
  b.w.reduce_from(2, 3, bytes_of(ten), ReduceOp::sum);
  EXPECT_EQ(b.w.read_ptr(0, 2), b.input_at(0));
  EXPECT_EQ(b.w.read_ptr(5, 3), b.input_at(5));
  EXPECT_NE(b.w.read_ptr(2, 3), b.input_at(2)) << "the reduced range lives in the output now";
  b.w.finish();
  EXPECT_EQ(b.out, (std::vector<float>{1, 2, 13, 14, 15, 6, 7, 8}));
}

// Writes at either end, then one across what is left: nothing still reads the input.
TEST(WorkBuffer, WritesAtBothEndsThenAcrossTheRestLeaveNothingPending) {
  OutOfPlace b;
  const std::vector<float> hundred(8, 100);
  b.w.copy_from(0, 2, bytes_of(hundred));
  EXPECT_EQ(b.w.read_ptr(2, 6), b.input_at(2));
  b.w.reduce_from(6, 2, bytes_of(hundred), ReduceOp::sum);
  EXPECT_EQ(b.w.read_ptr(2, 4), b.input_at(2));
  b.w.reduce_from(1, 6, bytes_of(hundred), ReduceOp::sum);  // overlaps both written ends
  for (std::size_t i = 0; i < 8; ++i) EXPECT_NE(b.w.read_ptr(i, 1), b.input_at(i)) << "element " << i;
  b.w.finish();
  EXPECT_EQ(b.out, (std::vector<float>{100, 200, 103, 104, 105, 106, 207, 108}));
}

// Two writes into the middle, one inside the other's remainder: three ranges, then two.
TEST(WorkBuffer, RepeatedSplitsKeepTheRangesInOrder) {
  OutOfPlace b;
  const std::vector<float> one(8, 1);
  b.w.reduce_from(3, 1, bytes_of(one), ReduceOp::sum);
  b.w.reduce_from(5, 1, bytes_of(one), ReduceOp::sum);
  for (std::size_t i : {0u, 1u, 2u, 4u, 6u, 7u}) EXPECT_EQ(b.w.read_ptr(i, 1), b.input_at(i)) << "element " << i;
  EXPECT_EQ(b.w.read_ptr(0, 3), b.input_at(0));
  EXPECT_EQ(b.w.read_ptr(6, 2), b.input_at(6));
  b.w.finish();
  EXPECT_EQ(b.out, (std::vector<float>{1, 2, 3, 5, 5, 7, 7, 8}));
}

} // namespace
} // namespace chorus
