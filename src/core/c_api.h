// Helpers for the C ABI implementation files: exception-to-status translation and config
// conversion. Internal; not installed.
#pragma once

#include <utility>

#include "moefuse/config.h"
#include "moefuse/moefuse.h"

namespace moefuse::capi {

void set_last_error(const char* message);

// Runs `body`, mapping moefuse exceptions to their status and keeping the message.
template <class F>
moefuse_status_t guarded(F&& body) noexcept;

MoeConfig from_c(const moefuse_config_t& c);
moefuse_config_t to_c(const MoeConfig& c);

moefuse_status_t status_of_current_exception() noexcept;

template <class F>
moefuse_status_t guarded(F&& body) noexcept {
  try {
    std::forward<F>(body)();
    return MOEFUSE_STATUS_OK;
  } catch (...) {
    return status_of_current_exception();
  }
}

}  // namespace moefuse::capi
