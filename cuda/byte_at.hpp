// `off` bytes into a device or host buffer (buffers are untyped in the op descriptions).
#pragma once
#include <cstddef>

namespace chorus::gpu {

inline char* byte_at(void* p, std::size_t off) { return static_cast<char*>(p) + off; }
inline const char* byte_at(const void* p, std::size_t off) { return static_cast<const char*>(p) + off; }

} // namespace chorus::gpu
