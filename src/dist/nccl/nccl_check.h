// NCCL error checks that throw moefuse::Error with the failing call, NCCL's message and the
// location (NCCL's last-error string names the cause, e.g. a failed peer mapping).
#pragma once

#include <nccl.h>

#include <string>

#include "moefuse/error.h"

#define MOEFUSE_NCCL_CHECK(comm, call)                                                     \
  do {                                                                                     \
    const ncclResult_t moefuse_nccl_ = (call);                                             \
    if (moefuse_nccl_ != ncclSuccess)                                                      \
      throw ::moefuse::Error(std::string(#call) + " failed at " + __FILE__ + ":" +         \
                             std::to_string(__LINE__) + ": " +                             \
                             ncclGetErrorString(moefuse_nccl_) + " (" +                    \
                             ncclGetLastError(comm) + ")");                                \
  } while (0)
