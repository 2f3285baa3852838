#include "errors.hpp"

#include <array>
#include <cctype>
#include <string>

namespace chorus::python {

namespace {

// One class per Errc (index: the code), made once with the module.
std::array<PyObject*, static_cast<std::size_t>(last_errc) + 1> classes{};

// "shape_mismatch" -> "ShapeMismatch".
std::string class_name(Errc c) {
  std::string out;
  bool up = true;
  for (char ch : to_string(c)) {
    if (ch == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
    up = false;
  }
  return out;
}

} // namespace

void bind_errors(pybind11::module_& m) {
  PyObject* base = PyErr_NewExceptionWithDoc("chorus.Error", "A chorus operation failed (the subclass names how).",
                                             PyExc_RuntimeError, nullptr);
  if (!base) throw pybind11::error_already_set();
  m.add_object("Error", pybind11::handle(base));
  for (uint16_t i = 1; i < classes.size(); ++i) {
    const std::string name = class_name(static_cast<Errc>(i));
    PyObject* cls = PyErr_NewException(("chorus." + name).c_str(), base, nullptr);
    if (!cls) throw pybind11::error_already_set();
    classes[i] = cls;
    m.add_object(name.c_str(), pybind11::handle(cls));
  }
  classes[0] = base;
  pybind11::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      const auto i = static_cast<std::size_t>(e.status().code());
      PyErr_SetString(i < classes.size() && classes[i] ? classes[i] : classes[0], e.what());
    }
  });
}

} // namespace chorus::python
