#include <chorus/status.hpp>

namespace chorus {

std::string_view to_string(Errc c) {
  switch (c) {
    case Errc::ok: return "ok";
    case Errc::invalid_config: return "invalid_config";
    case Errc::register_twice: return "register_twice";
    case Errc::unregister_twice: return "unregister_twice";
    case Errc::not_registered: return "not_registered";
    case Errc::config_mismatch: return "config_mismatch";
    case Errc::shape_mismatch: return "shape_mismatch";
    case Errc::dtype_mismatch: return "dtype_mismatch";
    case Errc::op_mismatch: return "op_mismatch";
    case Errc::reduce_op_mismatch: return "reduce_op_mismatch";
    case Errc::root_mismatch: return "root_mismatch";
    case Errc::no_data: return "no_data";
    case Errc::multiple_data: return "multiple_data";
    case Errc::timeout: return "timeout";
    case Errc::finished: return "finished";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::reset: return "reset";
    case Errc::internal: return "internal";
    case Errc::node_lost: return "node_lost";
    case Errc::auth_failed: return "auth_failed";
    case Errc::version_mismatch: return "version_mismatch";
    case Errc::busy: return "busy";
    case Errc::unreachable: return "unreachable";
    case Errc::device_mismatch: return "device_mismatch";
    case Errc::device_error: return "device_error";
    case Errc::revoked: return "revoked";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(chorus::to_string(code_)) + ": " + message_;
}

} // namespace chorus
