// SPDX-License-Identifier: MIT
//
// cxx_nothrow_handler.cpp - a new_handler may throw std::bad_alloc ([new.handler]); a
// nothrow operator new then returns NULL, as libstdc++'s does (it calls the throwing form in
// a try block). Under uslab, whose operators are C, the exception ended the program in
// std::terminate (session 18's audit). Also a handler that frees a reserve, then throws.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>

static int calls;
static void *reserve;

static void throwing_handler()
{
    calls++;
    throw std::bad_alloc();
}

static void reserve_handler()
{
    calls++;
    if (reserve) {
        std::free(reserve);
        reserve = nullptr;
        return;
    }
    throw std::bad_alloc();
}

int main()
{
    std::set_new_handler(throwing_handler);
    void *p = ::operator new(SIZE_MAX / 4, std::nothrow);
    std::printf("nothrow new: %s after %d handler call(s)\n", p ? "a block" : "NULL", calls);
    calls = 0;
    char *a = new (std::nothrow) char[SIZE_MAX / 8];
    std::printf("nothrow new[]: %s after %d handler call(s)\n", a ? "a block" : "NULL", calls);
    calls = 0;
    p = ::operator new(SIZE_MAX / 4, std::align_val_t(64), std::nothrow);
    std::printf("aligned nothrow new: %s after %d handler call(s)\n", p ? "a block" : "NULL",
                calls);
    reserve = std::malloc(1 << 20);
    calls = 0;
    std::set_new_handler(reserve_handler);
    p = ::operator new(SIZE_MAX / 4, std::nothrow);
    std::printf("reserve handler: %s after %d handler call(s)\n", p ? "a block" : "NULL", calls);
    calls = 0;
    try {
        p = ::operator new(SIZE_MAX / 4);
        std::printf("throwing new: a block\n");
    } catch (const std::bad_alloc &) {
        std::printf("throwing new: bad_alloc after %d handler call(s)\n", calls);
    }
    return 0;
}
