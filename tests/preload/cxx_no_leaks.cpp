// SPDX-License-Identifier: MIT
//
// cxx_no_leaks.cpp - a C++ program that frees everything it allocates: under USLAB_LEAKS=1
// its report must say 0 live objects. What the C and C++ runtimes keep for the process's
// life (stdio's buffer for a piped stdout, libstdc++'s emergency exception pool, a joined
// thread's cached TLS) is freed before the scan, as valgrind does; every C++ program's
// report began with the 72,704-byte pool before session 18. The output written before
// exit must still come out whole.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

int main()
{
    std::vector<std::string> v;
    for (int i = 0; i < 100; i++)
        v.push_back(std::string(50, 'a' + i % 26));
    try {
        throw std::runtime_error("caught");
    } catch (const std::exception &e) {
        std::printf("exception: %s\n", e.what());
    }
    std::thread t([] { std::printf("thread ran\n"); });
    t.join();
    std::printf("strings: %zu\n", v.size());
    return 0;
}
