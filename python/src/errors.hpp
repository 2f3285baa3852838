// chorus's errors in Python: one exception class per error code (chorus.ShapeMismatch,
// chorus.NodeLost, ...), each a subclass of chorus.Error, itself a RuntimeError (what callers of
// torch.distributed catch). The message is chorus's own, the same on every rank of a failed op.
#pragma once
#include <stdexcept>
#include <utility>

#include <pybind11/pybind11.h>

#include <chorus/result.hpp>
#include <chorus/status.hpp>

namespace chorus::python {

// A failed Status as a C++ exception. It may cross torch's own bindings (Work.wait from
// torch.distributed): the translator bind_errors() installs is pybind11's, shared with torch's
// module, so it turns into its Python class there too.
class Error : public std::runtime_error {
 public:
  explicit Error(Status s) : std::runtime_error(s.message()), status_(std::move(s)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

inline void check(Status s) {
  if (!s) throw Error(std::move(s));
}
template <class T> T value_of(Result<T> r) {
  if (!r) throw Error(r.status());
  return std::move(*r);
}
// An error of the caller's own making, found before any peer is involved.
[[noreturn]] inline void invalid(std::string message) { throw Error(Status(Errc::invalid_argument, std::move(message))); }

// Adds chorus.Error and its subclasses to the module and translates Error into them.
void bind_errors(pybind11::module_& m);

} // namespace chorus::python
