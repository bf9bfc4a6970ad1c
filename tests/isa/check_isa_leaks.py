#!/usr/bin/env python3
"""Fails if x86-64 binaries run AVX/AVX2/AVX-512/AMX (or BMI) instructions outside the kernels.

One binary runs on every x86-64 CPU: only src/kernels/x86/*.cc are compiled with -mavx2,
-mavx512*, -mamx-*, and their code runs only after select.cc has checked the CPU. An inline
function or a template instantiation (a std:: algorithm, a header helper) used by such a file is
emitted there as a weak (COMDAT) symbol; when another file emits the same symbol, the linker
keeps one copy, possibly the AVX one, and generic code on a baseline CPU then dies of SIGILL.

This disassembles each binary (objdump -d), splits it by symbol and lists every function that
uses an instruction beyond baseline x86-64 (SSE2) and is not in a kernel namespace:

  - VEX/EVEX-encoded instructions (every AVX, AVX2, FMA, F16C, AVX-512 mnemonic starts with 'v';
    VMX instructions excepted), any ymm/zmm/tmm register or AVX-512 mask register k0-k7, mask
    instructions (kmov*, kand*, ...), AMX tile instructions;
  - BMI1/BMI2 (VEX-encoded general-purpose: andn, bextr, blsi, ..., shlx), lzcnt, popcnt.

Plain SSE/SSE2 on xmm registers (non-VEX) is baseline and allowed everywhere. `tzcnt` is not
listed: compilers emit `rep bsf` for baseline code, which objdump shows as tzcnt and which old
CPUs run as bsf.

Allowed: functions in the kernel namespaces (default pocket::avx2, pocket::avx512, pocket::amx,
with their anonymous namespaces, lambdas and local classes: their mangled names start
_ZN6pocket4avx2 and the like), the tables' entry points (pocket::Avx2Kernels() and the like,
defined once each in the ISA files, called only after the CPU check), and implementation
symbols that glibc's ifunc variants carry when pieces of it are linked statically
(__memcpy_avx_unaligned_erms, __strlen_evex, ...: names beginning with "__" are reserved to the
implementation, and the variant is picked at run time from the CPU). Binaries linked
dynamically, as ours are, contain none of them.

Object files (--objects) are checked for what they export: a function with internal linkage
(nm type t: static, anonymous namespace) can only be called from its own file, so an ISA file's
local helper is safe, but a weak or global non-kernel function it defines may be the copy the
linker keeps, whatever the link order does today. Debug builds (no inlining) emit many more.

Usage: check_isa_leaks.py [--objdump OBJDUMP] [--nm NM] [--objects] BINARY_OR_OBJECT...
       check_isa_leaks.py --expect-leak REGEX... BINARY   (self test: exactly these must leak)
Exit status 0: no leaks (or exactly the expected ones); 1: leaks; 2: tool failure.
"""

import argparse
import re
import subprocess
import sys

KERNEL_NAMESPACES = ["pocket::avx2", "pocket::avx512", "pocket::amx"]
# The tables' entry points (kernels/tables.h), defined in the ISA files and called by select.cc
# only once the CPU has been checked; each is defined once (no weak copy to mix up).
KERNEL_ENTRY_POINTS = ["pocket::Avx2Kernels", "pocket::Avx512Kernels", "pocket::AmxKernels"]

# glibc's ifunc variants (static links only): __<name>_<isa>[_<more>].
IMPLEMENTATION_VARIANT = re.compile(r"^__\w+?_(avx|avx2|avx512\w*|evex\w*)(_\w+)?$")

VMX = {
    "verr", "verw", "vmcall", "vmlaunch", "vmresume", "vmxoff", "vmxon", "vmread", "vmwrite",
    "vmptrld", "vmptrst", "vmclear", "vmfunc", "vmrun", "vmload", "vmsave", "vmmcall", "vmgexit",
}
BMI_AND_MORE = {
    "andn", "bextr", "blsi", "blsmsk", "blsr", "bzhi", "mulx", "pdep", "pext", "rorx", "sarx",
    "shlx", "shrx", "lzcnt", "popcnt",
}
PREFIXES = {
    "lock", "rep", "repz", "repnz", "repe", "repne", "notrack", "bnd", "data16", "addr32",
    "xacquire", "xrelease", "cs", "ds", "es", "ss", "fs", "gs", "{vex}", "{vex3}", "{evex}",
}
MASK_OP = re.compile(
    r"^k(mov|and|andn|or|xor|xnor|not|ortest|test|shiftl|shiftr|unpck|add)[bwdq]+$")
AMX_OP = re.compile(r"^(ldtilecfg|sttilecfg|tileloadd\w*|tilestored|tilerelease|tilezero|tdp\w+)$")
WIDE_REGISTER = re.compile(r"%(ymm|zmm|tmm)\d+|%k[0-7]\b")

SYMBOL_LINE = re.compile(r"^([0-9a-f]+) <(.+)>:$")
INSN_LINE = re.compile(r"^\s+[0-9a-f]+:\t(.*)$")


def encode(qualified):
    return "".join(f"{len(part)}{part}" for part in qualified.split("::"))


def mangled_prefixes(namespaces, entry_points):
    """pocket::avx2 -> the starts of mangled names of entities inside it (_ZN6pocket4avx2,
    _ZNK6pocket4avx2 for const members, _ZZN6pocket4avx2 for local entities and lambdas);
    pocket::AmxKernels -> the function taking no arguments, its clones and local entities."""
    out = []
    for ns in namespaces:
        for lead in ("_ZN", "_ZNK", "_ZNV", "_ZNKV", "_ZZN", "_ZZNK", "_ZNR", "_ZNO", "_ZNKR"):
            out.append(lead + encode(ns))
    for function in entry_points:
        out += ["_ZN" + encode(function) + "Ev", "_ZZN" + encode(function) + "Ev"]
    return tuple(out)


def non_baseline(text):
    """The reason an instruction (objdump's text, after the address) is beyond baseline, or None."""
    parts = text.split(None, 1)
    while parts and parts[0] in PREFIXES:
        parts = parts[1].split(None, 1) if len(parts) > 1 else []
    if not parts:
        return None
    mnemonic = parts[0]
    operands = parts[1] if len(parts) > 1 else ""
    if mnemonic.startswith("v") and mnemonic not in VMX:
        return "VEX/EVEX"
    if WIDE_REGISTER.search(operands):
        return "ymm/zmm/tmm/mask register"
    if MASK_OP.match(mnemonic):
        return "AVX-512 mask"
    if AMX_OP.match(mnemonic):
        return "AMX"
    if mnemonic in BMI_AND_MORE:
        return "BMI/LZCNT/POPCNT"
    return None


def run(command):
    try:
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"check_isa_leaks: {' '.join(command)}: {error}", file=sys.stderr)
        if getattr(error, "stderr", None):
            print(error.stderr, file=sys.stderr)
        sys.exit(2)


def bindings(nm, binary):
    """Mangled name -> nm's symbol type letter (t local, T global, W/V weak, u unique)."""
    out = {}
    for line in run([nm, "--defined-only", binary]).splitlines():
        fields = line.split()
        if len(fields) == 3:
            out.setdefault(fields[2], fields[1])
    return out


def demangle(names):
    if not names:
        return {}
    try:
        result = subprocess.run(["c++filt"], input="\n".join(names) + "\n", check=True,
                                capture_output=True, text=True)
        return dict(zip(names, result.stdout.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {name: name for name in names}


def scan(objdump, binary, allowed_prefixes):
    """([(mangled name, reason, first offending instruction, count)] of disallowed functions,
    number of functions, number of allowed functions beyond baseline)."""
    leaks = []
    name = None
    hits = []
    counts = {"functions": 0, "allowed": 0}

    def flush():
        if name is None:
            return
        counts["functions"] += 1
        if not hits:
            return
        if name.startswith(allowed_prefixes) or IMPLEMENTATION_VARIANT.match(name):
            counts["allowed"] += 1
            return
        leaks.append((name, hits[0][0], hits[0][1], len(hits)))

    for line in run([objdump, "-d", "--no-show-raw-insn", "-w", binary]).splitlines():
        symbol = SYMBOL_LINE.match(line)
        if symbol:
            flush()
            name = symbol.group(2)
            hits = []
            continue
        insn = INSN_LINE.match(line)
        if insn and name is not None:
            reason = non_baseline(insn.group(1))
            if reason:
                hits.append((reason, " ".join(insn.group(1).split())))
    flush()
    return leaks, counts["functions"], counts["allowed"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--objdump", default="objdump")
    parser.add_argument("--nm", default="nm")
    parser.add_argument("--allow-namespace", action="append", default=[],
                        help="another namespace whose functions may use any ISA")
    parser.add_argument("--expect-leak", action="append", default=[], metavar="REGEX",
                        help="self test: succeed only if the leaks are exactly those whose "
                             "demangled names match these (each at least once)")
    parser.add_argument("--objects", action="store_true",
                        help="the files are object files: report only the functions they export "
                             "(weak or global), not those with internal linkage")
    parser.add_argument("--require-kernels", action="store_true",
                        help="fail unless some kernel function is beyond baseline (the scan would "
                             "otherwise pass vacuously, e.g. on a changed objdump)")
    args = parser.parse_args()

    allowed = mangled_prefixes(KERNEL_NAMESPACES + args.allow_namespace, KERNEL_ENTRY_POINTS)
    all_leaks = []
    allowed_total = 0
    for binary in args.binaries:
        leaks, functions, allowed_isa = scan(args.objdump, binary, allowed)
        allowed_total += allowed_isa
        kinds = bindings(args.nm, binary) if leaks else {}
        if args.objects:  # internal linkage: only its own (ISA) file calls it
            leaks = [leak for leak in leaks if not kinds.get(leak[0], "?").islower()]
        names = demangle([leak[0] for leak in leaks])
        print(f"{binary}: {functions} functions, {allowed_isa} allowed ones beyond baseline, "
              f"{len(leaks)} leak(s)")
        for mangled, reason, example, count in leaks:
            all_leaks.append((binary, names.get(mangled, mangled), mangled,
                              kinds.get(mangled.split("@")[0], "?"), reason, example, count))

    for binary, name, mangled, kind, reason, example, count in all_leaks:
        weak = " (weak: an inline/template copy from an ISA file?)" if kind in "WVu" else ""
        print(f"LEAK {binary}: {name}\n    [{mangled}, nm type {kind}{weak}]\n"
              f"    {count} instruction(s) beyond baseline x86-64, first {reason}: {example}")

    if args.expect_leak:
        patterns = [re.compile(p) for p in args.expect_leak]
        unexpected = [leak[1] for leak in all_leaks
                      if not any(p.search(leak[1]) for p in patterns)]
        missing = [p.pattern for p in patterns
                   if not any(p.search(leak[1]) for leak in all_leaks)]
        for name in unexpected:
            print(f"UNEXPECTED leak: {name}")
        for pattern in missing:
            print(f"MISSING expected leak /{pattern}/ (the scan did not catch it)")
        ok = not unexpected and not missing
        print("self test " + ("passed: the scan catches the planted leak(s) and nothing else"
                              if ok else "FAILED"))
        return 0 if ok else 1

    if args.require_kernels and allowed_total == 0:
        print("no kernel function uses AVX: the kernels are missing or the scan is broken "
              "(--require-kernels)")
        return 1
    if all_leaks:
        print(f"{len(all_leaks)} function(s) outside {', '.join(KERNEL_NAMESPACES)} use "
              "instructions a baseline x86-64 CPU lacks. Keep ISA code in the kernel namespaces; "
              "helpers shared with ISA files must have internal linkage there (an anonymous "
              "namespace or static) or be always_inline.")
        return 1
    print(f"no ISA leaks in {' '.join(args.binaries)} "
          f"(allowed: {', '.join(KERNEL_NAMESPACES + args.allow_namespace)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
