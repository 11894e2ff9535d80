// moefuse-bench --ep N: expert parallelism over N GPUs. Its code links NCCL, so it is a binary of
// its own, moefuse-ep-bench (tools/ep_bench/, built next to this one when configure finds NCCL);
// moefuse-bench stays NCCL-free and hands such a command line over to it.
#pragma once

namespace moefuse::bench {

// Whether the command line asks for expert parallelism (an `--ep` option, or the mode `ep`).
bool wants_ep(int argc, char** argv);

// Replaces this process with moefuse-ep-bench from this binary's folder, the options passed on
// (--ep N as --ranks N, the mode word `ep` dropped). Returns only on failure, with an exit status
// (2), having said why on stderr.
int exec_ep_bench(int argc, char** argv);

}  // namespace moefuse::bench
