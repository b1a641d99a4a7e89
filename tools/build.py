#!/usr/bin/env python3
"""Builds pyautodiff: the native library, the cffi extension and the C tests.

    python tools/build.py              # release: -O3, warnings on
    python tools/build.py --debug      # -O0 -g
    python tools/build.py --sanitize   # AddressSanitizer + UBSan (+ LeakSanitizer)

Outputs go into pyautodiff/ (libpyautodiff.so and the _cffi extension) so the
package imports from the source tree; objects go under build/.  SIMD kernels
are compiled per file: *_avx2.c with -mavx2 -mfma, *_avx512.c with the
AVX-512 flags, and chosen at run time by cpuid, so what ships never needs
-march=native.
"""
import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "native", "src")
INCLUDE = os.path.join(ROOT, "native", "include")
PKG = os.path.join(ROOT, "pyautodiff")
LIBNAME = "libpyautodiff.so"

BASE_FLAGS = ["-std=c11", "-fPIC", "-Wall", "-Wextra", "-fvisibility=hidden", "-pthread",
              "-fwrapv",  # integer tensors wrap on overflow, as numpy's do (no UB)
              # nothing reads errno: without it sqrt's loops vectorise (a negative
              # input would otherwise call libm for errno's sake)
              "-fno-math-errno",
              "-I" + INCLUDE]
MODES = {
    "release": ["-O3", "-DNDEBUG"],
    "debug": ["-O0", "-g"],
    "sanitize": ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
                 "-fno-sanitize-recover=undefined"],
}
ISA_FLAGS = {
    "_avx2.c": ["-mavx2", "-mfma"],
    "_avx512.c": ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mfma"],
}


def cc():
    return os.environ.get("CC", "gcc")


def run(cmd, **kw):
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def mode_of(args):
    return "sanitize" if args.sanitize else "debug" if args.debug else "release"


def compile_objects(mode, objdir):
    os.makedirs(objdir, exist_ok=True)
    sources = sorted(f for f in os.listdir(SRC) if f.endswith(".c"))
    jobs = []
    for f in sources:
        extra = next((v for k, v in ISA_FLAGS.items() if f.endswith(k)), [])
        obj = os.path.join(objdir, f[:-2] + ".o")
        jobs.append([cc(), *BASE_FLAGS, *MODES[mode], *extra, "-c",
                     os.path.join(SRC, f), "-o", obj])
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        futs = [ex.submit(subprocess.run, j, capture_output=True, text=True) for j in jobs]
        objs, failed = [], False
        for j, fut in zip(jobs, futs):
            r = fut.result()
            sys.stdout.write(" ".join(j[-3:]) + "\n")
            if r.stdout or r.stderr:
                sys.stdout.write(r.stdout + r.stderr)
            if r.returncode:
                failed = True
            objs.append(j[-1])
    if failed:
        raise SystemExit("native compilation failed")
    return objs


def link_library(mode, objs):
    out = os.path.join(PKG, LIBNAME)
    tmp = out + ".tmp"
    run([cc(), "-shared", *MODES[mode], "-pthread", "-o", tmp, *objs, "-lm"])
    os.replace(tmp, out)  # a new inode: processes that loaded the old file keep it intact
    return out


def build_c_tests(mode, builddir):
    """The ABI test program: plain C, links the library, no Python."""
    exe = os.path.join(builddir, "test_abi")
    run([cc(), *BASE_FLAGS, *MODES[mode], os.path.join(ROOT, "native", "tests", "test_abi.c"),
         "-o", exe, "-L" + PKG, "-lpyautodiff", "-Wl,-rpath," + PKG, "-lm"])
    return exe


def build_bindings(mode, builddir):
    sys.path.insert(0, os.path.join(ROOT, "bindings"))
    import build_cffi  # noqa: E402

    ffi = build_cffi.make_ffi(extra_compile_args=MODES[mode] if mode != "release" else ["-O2"],
                              extra_link_args=(["-fsanitize=address,undefined"]
                                               if mode == "sanitize" else []))
    tmp = os.path.join(builddir, "cffi")
    os.makedirs(tmp, exist_ok=True)
    path = ffi.compile(tmpdir=tmp, verbose=False)
    target = os.path.join(PKG, os.path.basename(path))
    shutil.copy2(path, target + ".tmp")
    os.replace(target + ".tmp", target)
    print("built", os.path.relpath(target, ROOT))
    return target


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--debug", action="store_true", help="-O0 -g build")
    g.add_argument("--sanitize", action="store_true",
                   help="AddressSanitizer + UBSan build (run Python with LD_PRELOAD of libasan)")
    ap.add_argument("--no-bindings", action="store_true", help="native library only")
    args = ap.parse_args(argv)
    mode = mode_of(args)
    builddir = os.path.join(ROOT, "build", mode)
    objs = compile_objects(mode, os.path.join(builddir, "obj"))
    link_library(mode, objs)
    build_c_tests(mode, builddir)
    if not args.no_bindings:
        build_bindings(mode, builddir)
    with open(os.path.join(ROOT, "build", "MODE"), "w") as f:
        f.write(mode + "\n")
    print("pyautodiff native build:", mode)


if __name__ == "__main__":
    main()
