// How close a test's errors come to their bounds. A check that passes at 90% of its bound fails
// by chance sooner or later (run 49's ReGLU case, session 50's finite differences); recorded over
// many runs, the margins name such checks before CI meets them.
#pragma once

#include <string>

namespace moefuse::test {

// With MOEFUSE_TEST_MARGINS=<file> in the environment, appends one line
//   <test>\t<what>\t<error>\t<bound>\t<error / bound>\t<seed>
// to that file, in one write (O_APPEND), so that the processes of a parallel run can share it;
// <test> is the running test's full name ("-" outside a test). Without the variable: nothing.
// scripts/test_margins.py summarises such a file.
void record_margin(const std::string& what, double error, double bound);

}  // namespace moefuse::test
