/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Kernel types for the BPF programs, pinned to the oldest supported kernel
 * (Debian 12's 6.1) rather than the build host's: a type or field that only
 * newer kernels have fails the build here instead of the load there.  CO-RE
 * relocates field accesses to the running kernel's layout at load time. */
#if defined(__TARGET_ARCH_x86)
#include "vmlinux-6.1-amd64.h"
#else
#error "no pinned kernel BTF for this architecture: generate one with scripts/gen-vmlinux-h.sh"
#endif
