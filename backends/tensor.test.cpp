#include "backends/tensor.hpp"

#include <catch2/catch.hpp>
#include <cstdint>

#include "backends/cpu/cpu_device.hpp"
#include "common/child_death.hpp"

namespace troupe {

TEST_CASE("CPU tensors are 64-byte aligned and zero-filled on request", "[tensor]") {
  CpuDevice cpu(1);
  auto t = Tensor::zeros(cpu, {3, 5});
  REQUIRE(t.ok());
  CHECK(reinterpret_cast<std::uintptr_t>(t->raw()) % 64 == 0);
  CHECK(t->numel() == 15);
  CHECK(t->nbytes() == 60);
  for (int i = 0; i < 15; ++i) CHECK(t->f32()[i] == 0.0f);
}

TEST_CASE("reading a tensor as another element type stops the process, naming both types", "[tensor]") {
  CpuDevice cpu(1);
  auto t = *Tensor::zeros(cpu, {2, 3});
  CHECK(t.data<float>() == t.f32());  // its own type: fine
  auto end = testing::run_in_child([&] { (void)t.data<std::int32_t>(); });
  CHECK(end.aborted);
  CHECK(end.err == "tensor: F32 data read as I32 (shape [2, 3])\n");
}

TEST_CASE("views share storage at an element offset", "[tensor]") {
  CpuDevice cpu(1);
  auto t = *Tensor::zeros(cpu, {10});
  auto v = t.view(4, {2, 3});
  v.f32()[0] = 7.0f;
  CHECK(t.f32()[4] == 7.0f);
  CHECK(v.dim(0) == 2);
  CHECK(v.dim(-1) == 3);
  auto r = v.reshaped({6});
  CHECK(r.f32() == v.f32());
}

TEST_CASE("negative dimensions are an error naming the shape", "[tensor]") {
  CpuDevice cpu(1);
  auto t = Tensor::empty(cpu, {2, -1});
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().message.find("[2, -1]") != std::string::npos);
}

TEST_CASE("bf16 rounds to nearest even and round-trips representable values", "[dtype]") {
  CHECK(from_bf16(to_bf16(1.0f)) == 1.0f);
  CHECK(from_bf16(to_bf16(-2.5f)) == -2.5f);
  // 1 + 2^-8 lies exactly between two bf16 values; ties go to the even one (1.0).
  CHECK(from_bf16(to_bf16(1.0f + 1.0f / 256)) == 1.0f);
  // 1 + 3*2^-8 rounds up to 1 + 2^-6.
  CHECK(from_bf16(to_bf16(1.0f + 3.0f / 256)) == 1.0f + 1.0f / 64);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_name(DType::u16) == "U16");
}

TEST_CASE("the CPU stream runs work in enqueue order and has finished it when an event is recorded", "[device]") {
  CpuDevice cpu(2);
  auto& s = cpu.default_stream();
  // A chain of copies, each reading what the previous one wrote: out of order,
  // a later copy would read zeros.
  float a[4] = {1, 2, 3, 4}, b[4] = {}, c[4] = {}, d[4] = {};
  REQUIRE(cpu.copy(b, a, sizeof a, s).ok());
  REQUIRE(cpu.copy(c, b, sizeof b, s).ok());
  REQUIRE(cpu.copy(d, c, sizeof c, s).ok());
  auto e = s.record();
  // The CPU stream completes work on enqueue (DESIGN: CPU is the in-order
  // reference), so the event is already complete and the data is there.
  CHECK(e->query());
  CHECK(d[0] == 1.0f);
  CHECK(d[3] == 4.0f);
  s.wait(*e);
  CHECK(&s.device() == &cpu);
  CHECK(cpu.capabilities().threads == 2);
}

}  // namespace troupe
