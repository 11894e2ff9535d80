// EpComm: the NCCL resources of one rank (windows, device communicator) and the launches of the
// transfer kernels (ep_kernels.cuh).
#include "dist/nccl/ep_comm.h"

#include <algorithm>
#include <string>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/sm_count.h"
#include "dist/nccl/ep_kernels.cuh"
#include "dist/nccl/nccl_check.h"
#include "formats/fp8_row_record.h"
#include "moefuse/error.h"

namespace moefuse::dist {
namespace {

// Before NCCL 2.29 the device API's structs carry no version: the kernels read ncclDevComm at
// the offsets of the headers built against, and ncclDevCommCreate of 2.29+ rejects an
// ncclDevCommRequirements without its magic. So the very release built against is needed: run
// 12 built against 2.28.9 and loaded 2.28.3, and the first dispatch faulted (illegal address);
// with 2.28.9 loaded, the same binary passed. From 2.29 both structs are versioned and a
// library accepts the layouts of older headers.
void expect_device_api_abi(ncclComm_t comm) {
  int runtime = 0;
  MOEFUSE_NCCL_CHECK(comm, ncclGetVersion(&runtime));
  const bool versioned = NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0);
  const bool ok = versioned ? runtime >= NCCL_VERSION_CODE : runtime == NCCL_VERSION_CODE;
  if (!ok)
    throw NotSupported("EpComm: built against NCCL " + std::to_string(NCCL_VERSION_CODE) +
                       " but the loaded libnccl is " + std::to_string(runtime) +
                       "; the device API's structs differ between these releases");
}

void set_smem_limit(const void* kernel, size_t bytes) {
  MOEFUSE_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

}  // namespace

EpComm::EpComm(ncclComm_t comm, const EpPlan& plan, int hidden)
    : comm_(comm), plan_(plan), hidden_(hidden) {
  MOEFUSE_EXPECT(hidden > 0 && hidden % 8 == 0, "hidden",
                 "a positive multiple of 8 (16-byte rows)", std::to_string(hidden));
  MOEFUSE_EXPECT(comm != nullptr, "comm", "an NCCL communicator", "null");
  MOEFUSE_NCCL_CHECK(comm, ncclCommCount(comm, &ranks_));
  MOEFUSE_NCCL_CHECK(comm, ncclCommUserRank(comm, &rank_));
  const std::string r = std::to_string(ranks_);
  MOEFUSE_EXPECT(plan.ranks == ranks_, "plan.ranks", "the communicator's size, " + r,
                 std::to_string(plan.ranks));
  MOEFUSE_EXPECT(plan.rank == rank_, "plan.rank",
                 "the communicator's rank, " + std::to_string(rank_), std::to_string(plan.rank));

  const int device = cuda::expect_launchable(nullptr);
  MOEFUSE_NCCL_CHECK(comm, ncclCommCuDevice(comm, &device_));
  MOEFUSE_EXPECT(device_ == device, "comm", "a communicator of the current device (" +
                 std::to_string(device) + ")", "one of device " + std::to_string(device_));
  expect_device_api_abi(comm);
  const int lsa_ranks = ncclTeamLsa(comm).nRanks;
  if (lsa_ranks != ranks_)
    throw NotSupported("EpComm: " + std::to_string(lsa_ranks) + " of the " + r + " ranks are " +
                       "load/store-reachable (NCCL's LSA team); expert parallelism over the " +
                       "device API needs all ranks in one NVLink domain with P2P access");

  // Every rank must launch the same grid (CTA b meets CTA b of each peer at LSA barrier b):
  // identical GPUs and arguments give the same count.
  threads_ = detail::kEpThreads;
  dispatch_smem_ = detail::ep_dispatch_smem(plan.experts, ranks_);
  return_smem_ = detail::ep_return_smem(plan.experts);
  set_smem_limit(reinterpret_cast<const void*>(detail::ep_dispatch_kernel), dispatch_smem_);
  set_smem_limit(reinterpret_cast<const void*>(detail::ep_return_kernel), return_smem_);
  int per_sm = 0;
  MOEFUSE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, detail::ep_dispatch_kernel, threads_, dispatch_smem_));
  if (per_sm == 0)
    throw NotSupported("EpComm: the dispatch kernel's shared memory (" +
                       std::to_string(dispatch_smem_) + " bytes for E = " +
                       std::to_string(plan.experts) + ", R = " + r + ") does not fit an SM");
  ctas_ = std::min(per_sm, detail::kEpCtasPerSm) * cuda::device_sm_count();

  try {
    const size_t offsets_bytes = size_t(ranks_) * (plan.experts + 1) * sizeof(int32_t);
    const size_t row_bytes = size_t(hidden) * 2;
    const size_t recv_bytes = size_t(plan.receive_capacity_rows) * row_bytes;
    const size_t ret_bytes = size_t(plan.send_rows) * row_bytes;
    MOEFUSE_NCCL_CHECK(comm, ncclMemAlloc(&offsets_, offsets_bytes));
    MOEFUSE_NCCL_CHECK(comm, ncclMemAlloc(&recv_, recv_bytes));
    MOEFUSE_NCCL_CHECK(comm, ncclMemAlloc(&ret_, ret_bytes));
    MOEFUSE_CUDA_CHECK(cudaMalloc(&local_, (experts_local() + 2) * sizeof(int32_t)));
    // Zero offsets: a return_rows before any dispatch moves nothing. Synchronised, so that
    // kernels on any stream (non-blocking ones included) see the zeros.
    MOEFUSE_CUDA_CHECK(cudaMemset(offsets_, 0, offsets_bytes));
    MOEFUSE_CUDA_CHECK(cudaMemset(local_, 0, (experts_local() + 2) * sizeof(int32_t)));
    MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());

    // Collective, in the same order on every rank; symmetric windows need equal sizes.
    MOEFUSE_NCCL_CHECK(comm, ncclCommWindowRegister(comm, offsets_, offsets_bytes, &offsets_win_,
                                                    NCCL_WIN_COLL_SYMMETRIC));
    MOEFUSE_NCCL_CHECK(comm, ncclCommWindowRegister(comm, recv_, recv_bytes, &recv_win_,
                                                    NCCL_WIN_COLL_SYMMETRIC));
    MOEFUSE_NCCL_CHECK(comm, ncclCommWindowRegister(comm, ret_, ret_bytes, &ret_win_,
                                                    NCCL_WIN_COLL_SYMMETRIC));

    // LSA barriers only: no multimem (NVLink SHARP stays off), no GIN.
#ifdef NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER
    ncclDevCommRequirements reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#else
    ncclDevCommRequirements reqs{};  // NCCL < 2.29: zero is "none" for every requirement
#endif
    reqs.lsaMultimem = false;
    reqs.lsaBarrierCount = ctas_;
    MOEFUSE_NCCL_CHECK(comm, ncclDevCommCreate(comm, &reqs, &dev_comm_));
    dev_comm_created_ = true;
  } catch (...) {
    release();
    throw;
  }
}

EpComm::~EpComm() { release(); }

// The reverse of construction; errors are ignored (a destructor cannot report them).
void EpComm::release() noexcept {
  if (dev_comm_created_) ncclDevCommDestroy(comm_, &dev_comm_);
  dev_comm_created_ = false;
  for (ncclWindow_t* w : {&ret_win_, &recv_win_, &offsets_win_}) {
    if (*w != nullptr) ncclCommWindowDeregister(comm_, *w);
    *w = nullptr;
  }
  for (void** p : {&ret_, &recv_, &offsets_}) {
    if (*p != nullptr) ncclMemFree(*p);
    *p = nullptr;
  }
  if (local_ != nullptr) cudaFree(local_);
  local_ = nullptr;
}

int EpComm::experts_local() const { return experts_per_rank(plan_.experts, ranks_); }

void EpComm::expect_stream(cudaStream_t stream) const {
  const int device = cuda::expect_launchable(stream);
  MOEFUSE_EXPECT(device == device_, "stream",
                 "launched with the communicator's device (" + std::to_string(device_) +
                     ") current", "current device " + std::to_string(device));
}

detail::EpKernelParams EpComm::params() const {
  return {.comm = dev_comm_,
          .offsets_win = offsets_win_,
          .recv_win = recv_win_,
          .ret_win = ret_win_,
          .experts = plan_.experts,
          .row_vecs = hidden_ / 8,
          .send_bound = plan_.send_rows,
          .capacity = plan_.receive_capacity_rows,
          .recv_offsets = local_,
          .flags = local_ + experts_local() + 1,
          .lo = 0,
          .hi = experts_local()};
}

detail::EpKernelParams EpComm::params(const TransferPart& part) const {
  MOEFUSE_EXPECT(part.first_expert >= 0 && part.first_expert < part.end_expert &&
                     part.end_expert <= experts_local(),
                 "part", "a non-empty range of local experts within [0, " +
                     std::to_string(experts_local()) + ")",
                 "[" + std::to_string(part.first_expert) + ", " +
                     std::to_string(part.end_expert) + ")");
  MOEFUSE_EXPECT(part.ctas >= 0 && part.ctas <= ctas_, "part.ctas",
                 "0 (all) or at most " + std::to_string(ctas_), std::to_string(part.ctas));
  detail::EpKernelParams p = params();
  p.lo = part.first_expert;
  p.hi = part.end_expert;
  return p;
}

int EpComm::grid(const TransferPart& part) const { return part.ctas > 0 ? part.ctas : ctas_; }

TransferPart EpComm::whole() const { return {.first_expert = 0, .end_expert = experts_local()}; }

void EpComm::dispatch(const TensorView& xs, const TensorView& offsets, cudaStream_t stream) {
  dispatch(xs, offsets, stream, whole());
}

void EpComm::dispatch(const TensorView& xs, const TensorView& offsets, cudaStream_t stream,
                      const TransferPart& part) {
  const bool records = xs.dtype == DType::kUInt8;
  const int64_t row_bytes = records ? formats::fp8_record_bytes(hidden_) : 2 * int64_t{hidden_};
  if (records)
    expect_tensor(xs, "xs", DType::kUInt8, Device::kCuda, {plan_.send_rows, row_bytes});
  else
    expect_tensor(xs, "xs", DType::kBFloat16, Device::kCuda, {plan_.send_rows, hidden_});
  expect_aligned(xs, "xs");
  expect_tensor(offsets, "offsets", DType::kInt32, Device::kCuda, {plan_.experts + 1});
  detail::EpKernelParams p = params(part);
  p.row_vecs = row_bytes / 16;
  expect_stream(stream);
  detail::ep_dispatch_kernel<<<grid(part), threads_, dispatch_smem_, stream>>>(
      p, xs.as<const uint4>(), offsets.as<const int32_t>());
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

void EpComm::return_rows(const TensorView& ys_recv, cudaStream_t stream) {
  return_rows(ys_recv, stream, whole());
}

void EpComm::return_rows(const TensorView& ys_recv, cudaStream_t stream,
                         const TransferPart& part) {
  expect_tensor(ys_recv, "ys_recv", DType::kBFloat16, Device::kCuda,
                {plan_.receive_capacity_rows, hidden_});
  expect_aligned(ys_recv, "ys_recv");
  const detail::EpKernelParams p = params(part);
  expect_stream(stream);
  detail::ep_return_kernel<<<grid(part), threads_, return_smem_, stream>>>(
      p, ys_recv.as<const uint4>());
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

TensorView EpComm::received() const {
  return TensorView::contiguous(recv_, DType::kBFloat16, {plan_.receive_capacity_rows, hidden_},
                                Device::kCuda);
}

TensorView EpComm::received_records() const {
  return TensorView::contiguous(recv_, DType::kUInt8,
                                {plan_.receive_capacity_rows, formats::fp8_record_bytes(hidden_)},
                                Device::kCuda);
}

TensorView EpComm::receive_offsets() const {
  return TensorView::contiguous(local_, DType::kInt32, {experts_local() + 1}, Device::kCuda);
}

TensorView EpComm::returned() const {
  return TensorView::contiguous(ret_, DType::kBFloat16, {plan_.send_rows, hidden_},
                                Device::kCuda);
}

TensorView EpComm::flags() const {
  return TensorView::contiguous(local_ + experts_local() + 1, DType::kInt32, {1}, Device::kCuda);
}

}  // namespace moefuse::dist
