#!/usr/bin/env python3
"""SASS census of the FP8 grouped GEMM's consumer K loop, one line per loop and instantiation.

    scripts/sass_kloop.py BINARY_OR_OBJECT [-v]

Finds each kernel's steady-state K loops (innermost backward branches around exactly 4 QGMMA:
one per consumer slab) and counts their instructions by kind. The loop is issue-bound (docs/fp8.md,
"Speed"), so its count per K block is a performance number of its own: CUDA 13.0 gives 108-113
(64 FFMA, 4 QGMMA, 40-45 others). A jump back towards 150 means the compiler lost the warp-uniform
stage and descriptor arithmetic (fp8/kernel.cuh, warp_uniform). -v lists the non-FFMA instructions.
CUOBJDUMP names the tool (default: cuobjdump on PATH).
"""
import collections
import os
import re
import subprocess
import sys

KINDS = [  # (kind, opcode regex), first match wins
    ("QGMMA", r"QGMMA"), ("FFMA", r"FFMA"), ("FMUL", r"FMUL"),
    ("WARPGROUP", r"WARPGROUP"), ("loads", r"(LDS|LD|LDG)\b"), ("mbarrier", r"SYNCS"),
    ("named barrier", r"BAR\b"), ("R2UR", r"R2UR"), ("branch", r"(BRA|BSSY|BSYNC|WARPSYNC)"),
    ("uniform ALU", r"U[A-Z]"), ("moves", r"(MOV|IMAD\.MOV)"), ("vector ALU", r"."),
]


def kind(instruction):
    opcode = instruction.split()[1] if instruction.startswith("@") else instruction.split()[0]
    return next(k for k, pattern in KINDS if re.match(pattern, opcode))


def main():
    path, verbose = sys.argv[1], "-v" in sys.argv
    sass = subprocess.run([os.environ.get("CUOBJDUMP", "cuobjdump"), "-sass", path],
                          capture_output=True, text=True, check=True).stdout
    for function in re.split(r"\n\s*Function : ", sass)[1:]:
        name = function.split("\n", 1)[0].strip()
        if "grouped_gemm_fp8_kernel" not in name:
            continue
        code = [(int(a, 16), t)
                for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", function)]
        index = {a: i for i, (a, _) in enumerate(code)}
        loops = []
        for i, (address, text) in enumerate(code):
            target = re.search(r"\bBRA\s+0x([0-9a-f]+)", text)
            if target and int(target.group(1), 16) in index and int(target.group(1), 16) < address:
                body = code[index[int(target.group(1), 16)]:i + 1]
                # The retry paths of the barrier waits, placed after the kernel's code, branch
                # back into it too: a K loop is short.
                if sum("QGMMA" in t for _, t in body) == 4 and len(body) < 400:
                    loops.append(body)
        # Innermost: no other such loop nested inside.
        inner = [b for b in loops
                 if not any(o is not b and b[0][0] <= o[0][0] and o[-1][0] <= b[-1][0]
                            for o in loops)]
        instance = re.search(r"grouped_gemm_fp8_kernelI(.*?)EEv", name).group(1)
        for body in sorted(inner):
            counts = collections.Counter(kind(t) for _, t in body)
            print(f"{instance} loop 0x{body[0][0]:x}: {len(body)} instructions per K block, "
                  f"{len(body) - counts['FFMA'] - counts['QGMMA']} besides FFMA and QGMMA: "
                  + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
            if verbose:
                print("\n".join(f"    {a:05x}  {t}" for a, t in body if "FFMA" not in t))


if __name__ == "__main__":
    main()
