/* SPDX-License-Identifier: MIT */
/*
 * cxx_bench.cpp - C++ containers through operator new and delete, which the preload library
 * replaces (issue 38's pattern "std::unordered_map churn"). Tests (--test):
 *
 *   umap   rounds of: a std::unordered_map<uint64_t, std::string> built to --live entries
 *          (its bucket array rehashed as it grows), then --steps replacements (a random
 *          entry erased, a new one inserted; a value of 8 to 64 characters, so that some
 *          fit the string's own buffer and the rest take a block of 17 to 65 bytes), then
 *          destroyed;
 *   map    the same with a std::map (a red-black tree: a node each, no bucket array).
 *
 * Prints key=value lines: the wall time (ms) and the allocator's name; the runner adds peak
 * RSS. The checksum line keeps the work observable.
 */
#include "common.h"

#include <map>
#include <string>
#include <unordered_map>

template <class Map> static uint64_t run(long rounds, long live, long steps)
{
    bench_rng r;
    bench_rng_seed(&r, 1);
    uint64_t sum = 0, next = 0;
    std::string value;
    uint64_t *keys = (uint64_t *)bench_xmalloc((size_t)live * sizeof *keys);
    for (long round = 0; round < rounds; round++) {
        Map m;
        auto fresh = [&](uint64_t key) {
            value.assign(8 + (size_t)bench_below(&r, 57), (char)('a' + key % 26));
            m.emplace(key, value);
        };
        for (long i = 0; i < live; i++)
            fresh(keys[i] = next++);
        for (long i = 0; i < steps; i++) { /* the map keeps `live` entries */
            long k = (long)bench_below(&r, (uint64_t)live);
            auto it = m.find(keys[k]);
            sum += it->second.size();
            m.erase(it);
            fresh(keys[k] = next++);
        }
        sum += m.size();
    }
    free(keys);
    return sum;
}

int main(int argc, char **argv)
{
    const char *test = bench_opt_str(argc, argv, "test", "umap");
    long rounds = bench_opt_long(argc, argv, "rounds", 20);
    long live = bench_opt_long(argc, argv, "live", 100000);
    long steps = bench_opt_long(argc, argv, "steps", 200000);
    printf("benchmark=cxx\ntest=%s\nrounds=%ld\nlive=%ld\nsteps=%ld\n", test, rounds, live, steps);
    bench_print_allocator();
    uint64_t t0 = bench_now_ns(), sum;
    if (strcmp(test, "umap") == 0)
        sum = run<std::unordered_map<uint64_t, std::string>>(rounds, live, steps);
    else if (strcmp(test, "map") == 0)
        sum = run<std::map<uint64_t, std::string>>(rounds, live, steps);
    else {
        fprintf(stderr, "unknown --test %s (umap, map)\n", test);
        return 2;
    }
    printf("ms=%.1f\n", (double)(bench_now_ns() - t0) * 1e-6);
    printf("checksum=%llu\n", (unsigned long long)sum);
    return 0;
}
