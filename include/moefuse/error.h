// The error model at the C++ boundary.
//
// Every public entry point validates its arguments and throws InvalidArgument naming the argument,
// what was expected and what it got. CUDA failures throw CudaError with the failing call and its
// location. The C ABI (moefuse.h) turns both into a status code plus a thread-local message.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace moefuse {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InvalidArgument : public Error {
 public:
  InvalidArgument(std::string_view argument, std::string_view expected, std::string_view actual);
  const std::string& argument() const { return argument_; }
  const std::string& expected() const { return expected_; }
  const std::string& actual() const { return actual_; }

 private:
  std::string argument_, expected_, actual_;
};

class CudaError : public Error {
 public:
  CudaError(std::string_view call, std::string_view message, const char* file, int line);
};

class NotSupported : public Error {
 public:
  using Error::Error;
};

// Throws InvalidArgument unless `ok`. Use through MOEFUSE_EXPECT so the strings for `expected`
// and `actual` are only built on failure.
#define MOEFUSE_EXPECT(ok, argument, expected, actual)                      \
  do {                                                                      \
    if (!(ok)) throw ::moefuse::InvalidArgument((argument), (expected), (actual)); \
  } while (0)

}  // namespace moefuse
