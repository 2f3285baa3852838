#include "cuda/reduce_kernel.hpp"

#include "cuda/cuda_error.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace chorus::gpu {

namespace {

struct Args {
  const void* src[kMaxFan];
  void* dst[kMaxFan];
  const void* const* src_table;  // non-null: the pointers are in device memory (fan-in > kMaxFan)
  void* const* dst_table;
  int nsrc, ndst;
  std::size_t count;
  unsigned long long divisor;
  std::size_t block_stride;  // bytes; non-zero: grid row y reduces block y of every source into dst y
  __device__ const void* source(int k) const { return src_table ? src_table[k] : src[k]; }
  __device__ void* destination(int k) const { return dst_table ? dst_table[k] : dst[k]; }
};

// Element traits: storage type S, accumulation type A, and the conversions between them.
template <class T>
struct Native {
  using S = T;
  using A = T;
  __device__ static A load(S v) { return v; }
  __device__ static S store(A v) { return v; }
};
struct F16 {
  using S = unsigned short;
  using A = float;
  __device__ static A load(S v) { return __half2float(__ushort_as_half(v)); }
  __device__ static S store(A v) { return __half_as_ushort(__float2half_rn(v)); }
};
struct BF16 {
  using S = unsigned short;
  using A = float;
  __device__ static A load(S v) { return __bfloat162float(__ushort_as_bfloat16(v)); }
  __device__ static S store(A v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
};

template <class A>
__device__ bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return v != v;
  else return false;
}

// Integer sum and product wrap: computed in the unsigned type, never signed overflow.
template <class A, bool = std::is_integral_v<A>>
struct WrapOf {
  using type = A;
};
template <class A>
struct WrapOf<A, true> {
  using type = std::make_unsigned_t<A>;
};
template <class A>
using Wrap = typename WrapOf<A>::type;

struct Sum {
  template <class A> __device__ static A f(A a, A b) { return static_cast<A>(static_cast<Wrap<A>>(a) + static_cast<Wrap<A>>(b)); }
};
struct Prod {
  template <class A> __device__ static A f(A a, A b) { return static_cast<A>(static_cast<Wrap<A>>(a) * static_cast<Wrap<A>>(b)); }
};
// NaN wins; ties return the second operand (as strategies/reduce_kernels.cpp does).
struct Min {
  template <class A> __device__ static A f(A a, A b) { return is_nan(a) ? a : (a < b ? a : b); }
};
struct Max {
  template <class A> __device__ static A f(A a, A b) { return is_nan(a) ? a : (a > b ? a : b); }
};
struct BAnd {
  template <class A> __device__ static A f(A a, A b) { return a & b; }
};
struct BOr {
  template <class A> __device__ static A f(A a, A b) { return a | b; }
};
struct BXor {
  template <class A> __device__ static A f(A a, A b) { return a ^ b; }
};

template <class A>
__device__ A divide(A v, unsigned long long d) {
  if (d <= 1) return v;
  if constexpr (std::is_floating_point_v<A>) return v / static_cast<A>(d);
  else if constexpr (std::is_signed_v<A>) return static_cast<A>(static_cast<long long>(v) / static_cast<long long>(d));
  else return static_cast<A>(static_cast<unsigned long long>(v) / d);
}

template <class S, int V>
struct alignas(sizeof(S) * V) Pack {
  S e[V];
};

// One pack of V elements at index `v` (in packs) of every source (`off` bytes in), folded and
// written to destinations [d0, d1).
template <class E, class Op, int V>
__device__ void reduce_pack(const Args& a, std::size_t v, std::size_t off, int d0, int d1) {
  using S = typename E::S;
  using A = typename E::A;
  using P = Pack<S, V>;
  A acc[V];
  auto src = [&](int k) { return reinterpret_cast<const P*>(static_cast<const unsigned char*>(a.source(k)) + off); };
  P p = src(0)[v];
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = E::load(p.e[e]);
  // Sources in batches whose loads are all issued before the first is folded.
  constexpr int kBatch = 4;
  for (int k0 = 1; k0 < a.nsrc; k0 += kBatch) {
    P q[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (k0 + j < a.nsrc) q[j] = src(k0 + j)[v];
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (k0 + j < a.nsrc)
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = Op::f(acc[e], E::load(q[j].e[e]));
  }
#pragma unroll
  for (int e = 0; e < V; ++e) p.e[e] = E::store(divide(acc[e], a.divisor));
  for (int k = d0; k < d1; ++k) static_cast<P*>(a.destination(k))[v] = p;
}

template <class E, class Op, int V>
__global__ void reduce_kernel(Args a) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t packs = a.count / V;
  const std::size_t off = a.block_stride * blockIdx.y;
  const int d0 = a.block_stride ? static_cast<int>(blockIdx.y) : 0;
  const int d1 = a.block_stride ? d0 + 1 : a.ndst;
  for (std::size_t v = first; v < packs; v += stride) reduce_pack<E, Op, V>(a, v, off, d0, d1);
  // The tail that does not fill a pack, element by element.
  for (std::size_t i = packs * V + first; i < a.count; i += stride) reduce_pack<E, Op, 1>(a, i, off, d0, d1);
}

int blocks_for(std::size_t work, int threads) {
  static thread_local int sms = 0;  // the worker thread's device never changes
  if (sms == 0) {
    int d = 0;
    cudaGetDevice(&d);
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d) != cudaSuccess || sms <= 0) sms = 80;
  }
  std::size_t want = (work + threads - 1) / threads;
  // A thread per pack up to a million blocks (past that the grid strides): on an H200 the 4-peer
  // 256 MiB all_reduce's kernel took 0.99x the copy-bound ideal so, 1.05x with 4 blocks an SM.
  std::size_t cap = std::size_t{1} << 20;
  return static_cast<int>(want < 1 ? 1 : (want < cap ? want : cap));
}

// With a null args pointer, launch() loads the kernel's two forms instead (preload_reduce_kernels).
template <class E, class Op>
Status launch(cudaStream_t s, const Args* args, bool aligned) {
  constexpr int V = 16 / sizeof(typename E::S);
  constexpr int threads = 256;
  if (!args) {
    cudaFuncAttributes attr{};
    cudaError_t e = cudaFuncGetAttributes(&attr, reduce_kernel<E, Op, V>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, reduce_kernel<E, Op, 1>);
    return e == cudaSuccess ? Status::ok() : cuda_error("loading the reduction kernel", e);
  }
  const Args& a = *args;
  (void)cudaGetLastError();  // only this launch's error counts below
  const unsigned rows = a.block_stride ? static_cast<unsigned>(a.ndst) : 1u;
  if (aligned)
    reduce_kernel<E, Op, V><<<dim3(blocks_for(a.count / V + 1, threads), rows), threads, 0, s>>>(a);
  else
    reduce_kernel<E, Op, 1><<<dim3(blocks_for(a.count, threads), rows), threads, 0, s>>>(a);
  if (auto e = cudaGetLastError(); e != cudaSuccess)
    return cuda_error("reduction kernel launch", e);
  return Status::ok();
}

template <class E>
Status by_op(cudaStream_t s, ReduceOp op, const Args* a, bool al) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return launch<E, Sum>(s, a, al);
    case ReduceOp::prod: return launch<E, Prod>(s, a, al);
    case ReduceOp::min: return launch<E, Min>(s, a, al);
    case ReduceOp::max: return launch<E, Max>(s, a, al);
    default: break;
  }
  if constexpr (std::is_integral_v<typename E::A>) {
    switch (op) {
      case ReduceOp::band: return launch<E, BAnd>(s, a, al);
      case ReduceOp::bor: return launch<E, BOr>(s, a, al);
      case ReduceOp::bxor: return launch<E, BXor>(s, a, al);
      default: break;
    }
  }
  return {Errc::invalid_argument, "reduction kernel: reduce op " + std::string(to_string(op)) + " is not defined for this dtype"};
}

Status dispatch(cudaStream_t s, DType dtype, ReduceOp op, const Args* a, bool al) {
  switch (dtype) {
    case DType::f16: return by_op<F16>(s, op, a, al);
    case DType::bf16: return by_op<BF16>(s, op, a, al);
    case DType::f32: return by_op<Native<float>>(s, op, a, al);
    case DType::f64: return by_op<Native<double>>(s, op, a, al);
    case DType::i8: return by_op<Native<int8_t>>(s, op, a, al);
    case DType::u8: return by_op<Native<uint8_t>>(s, op, a, al);
    case DType::i32: return by_op<Native<int32_t>>(s, op, a, al);
    case DType::i64: return by_op<Native<int64_t>>(s, op, a, al);
  }
  return {Errc::invalid_argument, "reduction kernel: unknown dtype"};
}

} // namespace

Status launch_reduce(void* stream, DType dtype, ReduceOp op, void* const* dsts, int ndst,
                          const void* const* srcs, int nsrc, std::size_t count, std::size_t divisor,
                          const void* device_table, std::size_t block_stride) {
  const bool wide = nsrc > kMaxFan || ndst > kMaxFan;
  if (nsrc < 1 || ndst < 1 || (wide && !device_table))
    return {Errc::internal, "reduction kernel: " + std::to_string(nsrc) + " sources and " + std::to_string(ndst) +
                                " destinations (1.." + std::to_string(kMaxFan) + " each without a device table)"};
  if (count == 0) return Status::ok();
  Args a{};
  bool al = true;
  for (int k = 0; k < nsrc; ++k) al &= reinterpret_cast<std::uintptr_t>(srcs[k]) % 16 == 0;
  for (int k = 0; k < ndst; ++k) al &= reinterpret_cast<std::uintptr_t>(dsts[k]) % 16 == 0;
  al &= block_stride % 16 == 0;
  if (wide) {
    // The table is an array of pointers: sources first, then destinations.
    auto* table = static_cast<void* const*>(const_cast<void*>(device_table));
    a.src_table = const_cast<const void* const*>(table);
    a.dst_table = table + nsrc;
  } else {
    for (int k = 0; k < nsrc; ++k) a.src[k] = srcs[k];
    for (int k = 0; k < ndst; ++k) a.dst[k] = dsts[k];
  }
  a.nsrc = nsrc;
  a.ndst = ndst;
  a.count = count;
  a.divisor = divisor;
  a.block_stride = block_stride;
  return dispatch(static_cast<cudaStream_t>(stream), dtype, op, &a, al);
}

Status preload_reduce_kernels() {
  for (DType d : {DType::f16, DType::bf16, DType::f32, DType::f64, DType::i8, DType::u8, DType::i32, DType::i64})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::band, ReduceOp::bor,
                        ReduceOp::bxor}) {
      Status st = dispatch(nullptr, d, op, nullptr, true);
      if (!st.is_ok() && st.code() != Errc::invalid_argument) return st;  // an op the dtype lacks: none to load
    }
  return Status::ok();
}

} // namespace chorus::gpu
