/* SPDX-License-Identifier: MIT */
/*
 * cxx_dlopen.c - a C program that starts without a C++ runtime and then loads the C++ module
 * cxx_module.so (and with it libstdc++) by dlopen(RTLD_NOW | RTLD_LOCAL), as Python loads an
 * extension. The module makes operator new fail in each form (cxx_module.cpp); this program
 * checks that the throwing forms threw std::bad_alloc that the module caught, that an
 * installed new_handler was called until it uninstalled itself, and that the nothrow forms
 * returned NULL, also in the module's constructor, which dlopen runs holding the dynamic
 * linker's lock. An operator new that aborts instead kills the process (SIGABRT); one that
 * deadlocks hangs until ctest's timeout.
 *
 *   cxx_dlopen MODULE uslab   under LD_PRELOAD=libuslab-preload.so: the module's operator new
 *                             must be uslab's
 *   cxx_dlopen MODULE glibc   without it: the module's operator new is libstdc++'s, the
 *                             reference the same checks hold for
 *
 * Exit status 0 and one line per check on success; a failed check prints it and exits 1.
 */
#define _GNU_SOURCE
#include "cxx_module.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STDCXX "libstdc++.so.6"

static int failures;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    if (!ok)
        failures++;
}

static int stdcxx_loaded(void)
{
    void *h = dlopen(STDCXX, RTLD_LAZY | RTLD_NOLOAD);
    if (h)
        dlclose(h);
    return h != NULL;
}

static void run_cases(cxx_module_run_fn run, size_t huge, const char *name)
{
    struct cxx_module_result r;
    memset(&r, 0, sizeof r);
    printf("size %s\n", name);
    fflush(stdout); /* the lines so far stay visible if operator new aborts */
    run(huge, &r);
    check(r.new_threw, "operator new: std::bad_alloc caught");
    check(r.new_array_threw, "operator new[]: std::bad_alloc caught");
    check(r.new_aligned_threw, "operator new(align_val_t): std::bad_alloc caught");
    check(r.nothrow_null, "operator new(nothrow): NULL");
    check(r.nothrow_aligned_null, "operator new(align_val_t, nothrow): NULL");
    check(r.handler_calls == CXX_HANDLER_CALLS,
          "operator new: the new_handler was called until it uninstalled itself");
    check(r.handler_new_threw, "operator new: then std::bad_alloc caught");
    check(r.nothrow_handler_calls == CXX_HANDLER_CALLS,
          "operator new(nothrow): the new_handler was called until it uninstalled itself");
    check(r.nothrow_handler_null, "operator new(nothrow): then NULL");
    check(r.other_exception == 0, "no other exception");
    check(r.small_ok, "small new[] and delete[] work afterwards");
    if (r.handler_calls != CXX_HANDLER_CALLS || r.nothrow_handler_calls != CXX_HANDLER_CALLS)
        printf("  handler calls: %d and %d, expected %d\n", r.handler_calls,
               r.nothrow_handler_calls, CXX_HANDLER_CALLS);
}

/* Looks up `name` in the module; exits if it is missing. */
static void *symbol(void *mod, const char *name)
{
    void *p = dlsym(mod, name);
    if (!p) {
        fprintf(stderr, "cxx_dlopen: no %s in the module\n", name);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[2], "uslab") != 0 && strcmp(argv[2], "glibc") != 0)) {
        fprintf(stderr, "usage: cxx_dlopen MODULE uslab|glibc\n");
        return 2;
    }
    int uslab = strcmp(argv[2], "uslab") == 0;
    check(!stdcxx_loaded(), "no C++ runtime before dlopen");
    check(uslab == (dlsym(RTLD_DEFAULT, "uslab_malloc_usable_size") != NULL),
          uslab ? "libuslab-preload.so is preloaded" : "libuslab-preload.so is not loaded");

    void *mod = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!mod) {
        fprintf(stderr, "cxx_dlopen: dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    check(stdcxx_loaded(), STDCXX " loaded with the module");
    check(dlsym(RTLD_DEFAULT, "_ZSt15get_new_handlerv") == NULL,
          "std::get_new_handler is not in the global scope (RTLD_LOCAL)");
    cxx_module_run_fn run = (cxx_module_run_fn)(uintptr_t)symbol(mod, "cxx_module_run");
    cxx_module_operator_new_fn op_new =
        (cxx_module_operator_new_fn)(uintptr_t)symbol(mod, "cxx_module_operator_new");

    /* Which operator new the module calls: uslab's under the preload, else libstdc++'s. */
    Dl_info info;
    const char *owner = dladdr(op_new(), &info) && info.dli_fname ? info.dli_fname : "";
    check(strstr(owner, uslab ? "libuslab-preload" : "libstdc++") != NULL,
          uslab ? "the module calls uslab's operator new" : "the module calls libstdc++'s");

    cxx_module_ctor_threw_fn ctor_threw =
        (cxx_module_ctor_threw_fn)(uintptr_t)symbol(mod, "cxx_module_ctor_threw");
    check(ctor_threw() == 1, "operator new in the module's constructor (run by dlopen): "
                             "std::bad_alloc caught");

    run_cases(run, (size_t)1 << 62, "2^62");
    run_cases(run, SIZE_MAX / 2, "SIZE_MAX/2");
    dlclose(mod);
    if (failures) {
        fprintf(stderr, "cxx_dlopen: %d check(s) failed\n", failures);
        return 1;
    }
    return 0;
}
