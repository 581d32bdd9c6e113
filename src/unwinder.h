/* SPDX-License-Identifier: MIT */
/*
 * unwinder.h - the calling thread's stack (the symbols layer, rank 7, unwinder.c; docs/design.md
 * §9), for reports only.
 */
#ifndef USLAB_UNWINDER_H
#define USLAB_UNWINDER_H

#include <stdint.h>

#pragma GCC visibility push(hidden)

/* Writes the calling thread's stack into stack[0..max), innermost first, uslab's own frames
 * left out (those between a callback and the call that ran it too), and returns how many
 * frames it wrote: stack[0] is inside the function that called into uslab, each further entry
 * inside the function that called the one before (a return address less 1: the call's line).
 * uslab's own code is the shared library's object, or the static library's section uslab_text.
 * Reads the call frame information of the objects the frames are in (x86-64 .eh_frame through
 * .eh_frame_hdr, found by glibc's _dl_find_object) and a signal frame's saved context. Stops at the
 * outermost frame (a return address the CFI marks undefined), at a frame of no object or without
 * CFI, at a rule it does not read (a DWARF expression: glibc's stack-realigning frames), or at max.
 * Never allocates, takes no lock, makes no system call: safe under uslab's locks and in a signal
 * handler. */
uint32_t usi_unwind_stack(void **stack, uint32_t max);

#pragma GCC visibility pop

#endif
