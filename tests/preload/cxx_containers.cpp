// SPDX-License-Identifier: MIT
// cxx_containers.cpp - a C++ workload for the preload test: std::map, std::string,
// std::vector, std::unordered_map, over-aligned new (alignas(64)), nothrow new, new[] /
// delete[], sized and aligned delete, aligned new with alignments that are not powers of two.
// Linked normally (not against uslab); prints a checksum that must be the same with and without
// LD_PRELOAD. Aborts on a misaligned object or a lost value.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

namespace
{

uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

uint64_t mix_str(uint64_t h, const std::string &s)
{
    for (unsigned char c : s)
        h = mix(h, c);
    return h;
}

void require(bool ok, const char *what)
{
    if (!ok) {
        std::fprintf(stderr, "cxx_containers: %s\n", what);
        std::abort();
    }
}

struct alignas(64) Line {
    uint64_t v[8];
};

struct alignas(256) Big {
    char bytes[1000];
};

char *volatile sink;

uint32_t rng_state = 7;
uint32_t rnd()
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}

} // namespace

int main()
{
    uint64_t h = 0;

    // std::map<std::string, std::vector<int>>
    std::map<std::string, std::vector<int>> m;
    for (int i = 0; i < 200000; i++) {
        std::string k = "key-" + std::to_string(rnd() % 50000);
        m[k].push_back(i);
        if (i % 5 == 0)
            m.erase("key-" + std::to_string(rnd() % 50000));
    }
    for (const auto &kv : m) {
        h = mix_str(h, kv.first);
        h = mix(h, kv.second.size());
    }
    std::printf("map %zu %016llx\n", m.size(), (unsigned long long)h);

    // std::unordered_map<uint64_t, std::string>: summed in key order for determinism
    std::unordered_map<uint64_t, std::string> um;
    for (uint64_t i = 0; i < 200000; i++)
        um[rnd() % 100000] += std::string(1 + i % 40, char('a' + i % 26));
    uint64_t hu = 0;
    for (uint64_t k = 0; k < 100000; k++) {
        auto it = um.find(k);
        if (it != um.end())
            hu = mix(mix_str(hu, it->second), k);
    }
    std::printf("unordered_map %zu %016llx\n", um.size(), (unsigned long long)hu);

    // strings growing and shrinking
    std::string s;
    std::vector<std::string> parts;
    for (int i = 0; i < 100000; i++) {
        s += std::to_string(i * 7);
        if (s.size() > 5000) {
            parts.push_back(s.substr(100, 300));
            s.erase(0, 4000);
            s.shrink_to_fit();
        }
    }
    uint64_t hs = mix_str(0, s);
    for (const auto &p : parts)
        hs = mix_str(hs, p);
    std::printf("strings %zu %zu %016llx\n", s.size(), parts.size(), (unsigned long long)hs);

    // over-aligned objects: new / new[] / delete with alignment (and sizes)
    std::vector<Line *> lines;
    for (int i = 0; i < 20000; i++) {
        Line *l = new Line;
        require(reinterpret_cast<uintptr_t>(l) % 64 == 0, "alignas(64) new misaligned");
        for (int j = 0; j < 8; j++)
            l->v[j] = uint64_t(i) * 8 + j;
        lines.push_back(l);
    }
    uint64_t hl = 0;
    for (Line *l : lines) {
        for (int j = 0; j < 8; j++)
            hl = mix(hl, l->v[j]);
        delete l;
    }
    Big *bigs = new Big[10];
    require(reinterpret_cast<uintptr_t>(bigs) % 256 == 0, "alignas(256) new[] misaligned");
    for (int i = 0; i < 10; i++)
        bigs[i].bytes[999] = char(i);
    for (int i = 0; i < 10; i++)
        hl = mix(hl, uint64_t(bigs[i].bytes[999]));
    delete[] bigs;
    std::unique_ptr<Line[]> la(new Line[33]);
    require(reinterpret_cast<uintptr_t>(la.get()) % 64 == 0, "alignas(64) new[] misaligned");
    std::printf("aligned %016llx\n", (unsigned long long)hl);

    // nothrow new, new[] / delete[], explicit sized delete
    uint64_t hn = 0;
    for (int i = 1; i < 5000; i++) {
        int *a = new (std::nothrow) int[i];
        require(a != nullptr, "nothrow new[] failed");
        for (int j = 0; j < i; j++)
            a[j] = j ^ i;
        hn = mix(hn, uint64_t(a[i - 1]));
        delete[] a;
        char *c = static_cast<char *>(::operator new(size_t(i) * 3));
        c[i * 3 - 1] = char(i);
        hn = mix(hn, uint64_t(static_cast<unsigned char>(c[i * 3 - 1])));
        ::operator delete(c, size_t(i) * 3); // sized delete
        void *al = ::operator new(size_t(i), std::align_val_t(128));
        require(reinterpret_cast<uintptr_t>(al) % 128 == 0, "aligned operator new misaligned");
        ::operator delete(al, size_t(i), std::align_val_t(128));
        Line *nl = new (std::nothrow) Line;
        require(nl && reinterpret_cast<uintptr_t>(nl) % 64 == 0, "nothrow aligned new");
        delete nl;
    }
    // A failing nothrow new returns NULL; a failing new throws std::bad_alloc.
    void *huge = ::operator new(size_t(1) << 62, std::nothrow);
    require(huge == nullptr, "nothrow new of 2^62 bytes succeeded");
    bool threw = false;
    try {
        volatile size_t n = size_t(1) << 62;
        sink = new char[n]; // stored to a volatile: the allocation cannot be elided
        delete[] sink;
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    require(threw, "new of 2^62 bytes did not throw std::bad_alloc");
    // An alignment that is not a power of two (0 included): libstdc++ throws std::bad_alloc
    // at once (the nothrow form returns NULL); uslab returned a block before.
    static const size_t odd_aligns[] = {0, 3, 24, 48, 100};
    for (size_t a : odd_aligns) {
        volatile size_t al = a;
        threw = false;
        try {
            void *p = ::operator new(64, std::align_val_t(al));
            ::operator delete(p, std::align_val_t(al));
        } catch (const std::bad_alloc &) {
            threw = true;
        }
        std::printf("align_val_t(%zu): %s", a, threw ? "bad_alloc" : "a block");
        void *p = ::operator new(64, std::align_val_t(al), std::nothrow);
        std::printf(", nothrow: %s\n", p ? "a block" : "NULL");
        if (p)
            ::operator delete(p, std::align_val_t(al));
    }
    std::printf("new %016llx\n", (unsigned long long)hn);

    // vectors of vectors
    std::vector<std::vector<uint32_t>> vv(1000);
    for (int i = 0; i < 300000; i++) {
        auto &v = vv[rnd() % 1000];
        v.push_back(rnd());
        if (v.size() > 500)
            v.clear(), v.shrink_to_fit();
    }
    uint64_t hv = 0;
    for (const auto &v : vv)
        for (uint32_t x : v)
            hv = mix(hv, x);
    std::printf("vectors %016llx\n", (unsigned long long)hv);
    std::printf("checksum %016llx\n",
                (unsigned long long)mix(mix(mix(h, hu), mix(hs, hl)), mix(hn, hv)));
    return 0;
}
