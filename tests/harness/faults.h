/* SPDX-License-Identifier: MIT */
/*
 * faults.h - the fault-injection hooks of test builds (USLAB_FAULT_INJECTION, on unless
 * Release; src/os_linux.c, docs/design.md §2). Exported by libuslab and libuslab-preload of
 * those builds only, so they are not in uslab.h.
 */
#ifndef USLAB_FAULTS_H
#define USLAB_FAULTS_H

/* "rate[,seed[,calls]]" as USLAB_FAULTS (calls: letters of mmap, MAP_FIXED replacement,
 * mprotect, madvise, munmap: "mrpau", plus "h": a failed replacement unmaps first, and "g":
 * a failed madvise says EAGAIN, not EINVAL), or NULL to stop the faults. Returns 0, or -1
 * for a bad spec. */
int uslab_faults_set(const char *spec);
/* Failures injected so far into the calls of these letters. */
unsigned long uslab_faults_injected(const char *calls);

#endif
