// Asserts a Status's code and that its message names what it should (peers, values, fields).
#pragma once
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include <chorus/status.hpp>

namespace chorus {

inline ::testing::AssertionResult has(const Status& s, Errc code, const std::vector<std::string>& parts) {
  if (s.code() != code)
    return ::testing::AssertionFailure() << "expected " << to_string(code) << ", got " << s.to_string();
  for (const auto& p : parts)
    if (s.message().find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "message \"" << s.message() << "\" lacks \"" << p << "\"";
  return ::testing::AssertionSuccess();
}

} // namespace chorus
