#pragma once

#include <bpf/libbpf.h>

namespace egressd {

// Logs, at info level (`egressctl -v load`), how many instructions the
// verifier processed for each program of a loaded object (every path it
// walked, not the program's length; the kernel keeps the figure, 5.16+) and
// how long the load took: what a program costs each load, on a node's start,
// in every test that loads, and in CI under emulation.
void LogVerifierCost(bpf_object* obj, double load_seconds);

}  // namespace egressd
