// GPU tensors where an op needs host memory (ops across nodes, the by-data forms, object
// collectives, send/recv to another node): the input is copied to (pinned, pooled) host memory for
// the op and the result copied back into the caller's GPU tensor afterwards. CUDA failures become
// device_error.
#pragma once
#include <chorus/status.hpp>
#include <chorus/tensor.hpp>

namespace chorus {

// `host` = t itself when t is undefined or on the host, else a host copy of it.
Status stage_to_host(const Tensor& t, Tensor& host);
// dst = host's bytes when dst is a GPU tensor (no-op when dst is host or undefined).
Status stage_back(const Tensor& host, const Tensor& dst);

// The GPU layer's teardown: the idle pinned buffers kept for staging are freed (those in use come
// back later and are kept again). Returns their bytes; staging_bytes_kept() says how many are idle now.
std::size_t release_staging_buffers();
std::size_t staging_bytes_kept();

// dst += src elementwise (same dtype, element count and device; on a GPU through its device actor).
Status accumulate(const Tensor& dst, const Tensor& src);

} // namespace chorus
