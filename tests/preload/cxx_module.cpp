// SPDX-License-Identifier: MIT
// cxx_module.cpp - a C++ shared module for cxx_dlopen.c, which loads it (and with it
// libstdc++) with dlopen after the process started, as Python loads a C++ extension.
// cxx_module_run makes operator new fail in each of its forms and records what happened:
// std::bad_alloc caught, the new_handler called, NULL from the nothrow forms.
#include "cxx_module.h"

#include <cstdlib>
#include <new>

namespace
{

int handler_calls;

// Counts its calls and uninstalls itself on the CXX_HANDLER_CALLS-th, so the failing
// operator new calls it exactly that often and then throws (or returns NULL).
void counting_handler()
{
    if (++handler_calls == CXX_HANDLER_CALLS)
        std::set_new_handler(nullptr);
}

void *volatile sink; // results stored here: no allocation can be elided

// Runs f (which calls a throwing operator new); 1 if it threw std::bad_alloc.
template <class F> int throws_bad_alloc(F f, cxx_module_result *r)
{
    try {
        f();
    } catch (const std::bad_alloc &) {
        return 1;
    } catch (...) {
        r->other_exception++;
    }
    return 0;
}

// A failing operator new while dlopen runs the module's constructors, with the dynamic
// linker's lock held: the lookups of the C++ runtime must not deadlock there.
int ctor_threw = -1;
struct FailInConstructor {
    FailInConstructor()
    {
        cxx_module_result r{};
        ctor_threw = throws_bad_alloc([] { sink = ::operator new(std::size_t(1) << 62); }, &r) &&
                     !r.other_exception;
    }
} fail_in_constructor;

} // namespace

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT void *cxx_module_operator_new()
{
    return reinterpret_cast<void *>(static_cast<void *(*)(std::size_t)>(&::operator new));
}

EXPORT int cxx_module_ctor_threw()
{
    return ctor_threw;
}

EXPORT void cxx_module_run(size_t huge, cxx_module_result *r)
{
    const std::align_val_t al{64};

    r->new_threw = throws_bad_alloc([&] { sink = ::operator new(huge); }, r);
    r->new_array_threw = throws_bad_alloc([&] { sink = ::operator new[](huge); }, r);
    r->new_aligned_threw = throws_bad_alloc([&] { sink = ::operator new(huge, al); }, r);
    sink = ::operator new(huge, std::nothrow);
    r->nothrow_null = sink == nullptr;
    sink = ::operator new(huge, al, std::nothrow);
    r->nothrow_aligned_null = sink == nullptr;

    handler_calls = 0;
    std::set_new_handler(counting_handler);
    r->handler_new_threw = throws_bad_alloc([&] { sink = ::operator new(huge); }, r);
    r->handler_calls = handler_calls;

    handler_calls = 0;
    std::set_new_handler(counting_handler);
    sink = ::operator new(huge, std::nothrow);
    r->nothrow_handler_null = sink == nullptr;
    r->nothrow_handler_calls = handler_calls;
    std::set_new_handler(nullptr);

    int ok = 1;
    for (int i = 1; i <= 1000; i++) {
        int *a = new int[i];
        sink = a;
        a[i - 1] = i;
        ok &= static_cast<int *>(sink)[i - 1] == i;
        delete[] a;
    }
    r->small_ok = ok;
}
