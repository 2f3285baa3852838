// Reading chorus's settings from the environment, strictly: a value that is not what the variable
// takes is an error naming the variable, never a silent default.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <chorus/result.hpp>

namespace chorus {

// The variable's value; nullopt when it is unset or empty.
std::optional<std::string> env_text(const char* name);
// A whole number in [min, max]; nullopt when unset or empty; an error naming the variable, its
// value and the range otherwise.
Result<std::optional<uint64_t>> env_number(const char* name, uint64_t min, uint64_t max);

} // namespace chorus
