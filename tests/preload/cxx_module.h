/* SPDX-License-Identifier: MIT */
/*
 * cxx_module.h - the interface between cxx_dlopen.c (a C program) and cxx_module.cpp (a C++
 * module it loads with dlopen): what the module saw when operator new failed.
 */
#ifndef CXX_MODULE_H
#define CXX_MODULE_H

#include <stddef.h>

#define CXX_HANDLER_CALLS 3 /* the new_handler uninstalls itself on its third call */

struct cxx_module_result {
    int new_threw;             /* operator new(huge) threw std::bad_alloc */
    int new_array_threw;       /* operator new[](huge) threw std::bad_alloc */
    int new_aligned_threw;     /* operator new(huge, align_val_t(64)) threw std::bad_alloc */
    int handler_calls;         /* calls of the handler during one operator new(huge) */
    int handler_new_threw;     /* ... which then threw std::bad_alloc */
    int nothrow_null;          /* operator new(huge, nothrow) returned NULL */
    int nothrow_aligned_null;  /* operator new(huge, align_val_t(64), nothrow) returned NULL */
    int nothrow_handler_calls; /* calls of the handler during one nothrow new(huge) */
    int nothrow_handler_null;  /* ... which then returned NULL */
    int other_exception;       /* anything else was thrown */
    int small_ok;              /* new and delete of small objects still work afterwards */
};

/* cxx_module_run: runs the cases with the size `huge` (too large for any allocator). */
typedef void (*cxx_module_run_fn)(size_t huge, struct cxx_module_result *r);
/* cxx_module_ctor_threw: 1 if operator new(2^62) threw std::bad_alloc in the module's
 * constructor, which dlopen ran. */
typedef int (*cxx_module_ctor_threw_fn)(void);
/* cxx_module_operator_new: ::operator new(size_t) as the module calls it. */
typedef void *(*cxx_module_operator_new_fn)(void);

#endif
