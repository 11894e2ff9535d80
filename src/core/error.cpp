#include "moefuse/error.h"

#include <string>

namespace moefuse {

InvalidArgument::InvalidArgument(std::string_view argument, std::string_view expected,
                                 std::string_view actual)
    : Error("moefuse: invalid argument '" + std::string(argument) + "': expected " +
            std::string(expected) + ", got " + std::string(actual)),
      argument_(argument),
      expected_(expected),
      actual_(actual) {}

CudaError::CudaError(std::string_view call, std::string_view message, const char* file, int line)
    : Error("moefuse: CUDA error in " + std::string(call) + " at " + file + ":" +
            std::to_string(line) + ": " + std::string(message)) {}

}  // namespace moefuse
