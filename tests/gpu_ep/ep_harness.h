// The multi-GPU harness of the EP tests: one process, one thread per rank, since the ranks'
// kernels wait on each other's barriers and must all be launched. A watchdog ends the process
// with a message instead of hanging when a rank never finishes (a barrier that never completes).
#pragma once

#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda/device.h"
#include "moefuse/error.h"

// Skips the test unless there are >= 2 GPUs, all sm_90; `gpus` holds their number.
#define MOEFUSE_REQUIRE_HOPPER_GPUS(gpus)                                       \
  std::string moefuse_why_;                                                     \
  const int gpus = ::moefuse::cuda::hopper_devices(2, &moefuse_why_);           \
  if (gpus == 0) GTEST_SKIP() << "needs >= 2 sm_90 GPUs: " << moefuse_why_

namespace moefuse::test {

inline constexpr auto kRankDeadline = std::chrono::seconds(60);

// Runs body(rank, stage) on one thread per rank. Exceptions fail the test; a rank still running
// after kRankDeadline ends the process (its kernels cannot be cancelled) naming each late rank's
// stage.
inline void run_ranks(int ranks, const std::function<void(int, std::atomic<const char*>&)>& body) {
  std::vector<std::atomic<const char*>> stage(ranks);
  std::vector<std::string> errors(ranks);
  std::mutex mutex;
  std::condition_variable finished;
  int done = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    stage[r] = "start";
    threads.emplace_back([&, r] {
      try {
        body(r, stage[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
      stage[r] = "done";
      std::lock_guard lock(mutex);
      ++done;
      finished.notify_all();
    });
  }
  {
    std::unique_lock lock(mutex);
    if (!finished.wait_for(lock, kRankDeadline, [&] { return done == ranks; })) {
      std::string late;
      for (int r = 0; r < ranks; ++r) late += " rank " + std::to_string(r) + ": " + stage[r].load();
      std::fprintf(stderr, "EP test: ranks still running after %llds (hang?);%s\n",
                   static_cast<long long>(kRankDeadline.count()), late.c_str());
      std::fflush(stderr);
      std::_Exit(EXIT_FAILURE);
    }
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r)
    EXPECT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
}

// Communicators over devices 0..ranks-1; NVLink multicast stays off (device policy).
inline std::vector<ncclComm_t> make_comms(int ranks) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  std::vector<ncclComm_t> comms(ranks);
  std::vector<int> devices(ranks);
  for (int r = 0; r < ranks; ++r) devices[r] = r;
  const ncclResult_t status = ncclCommInitAll(comms.data(), ranks, devices.data());
  if (status != ncclSuccess)
    throw Error(std::string("ncclCommInitAll: ") + ncclGetErrorString(status));
  return comms;
}

// The rank counts to run: all GPUs (at most 8), and 2 when there are more.
inline std::vector<int> rank_counts(int gpus) {
  const int all = std::min(gpus, 8);
  return all > 2 ? std::vector<int>{all, 2} : std::vector<int>{all};
}

}  // namespace moefuse::test
