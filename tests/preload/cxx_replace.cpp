// SPDX-License-Identifier: MIT
//
// cxx_replace.cpp - a program that replaces only the basic operator new(size_t) and
// operator delete(void*), as C++ allows ([replacement.functions]): each block carries a
// 16-byte header with a magic word and its size. The other forms (new[], nothrow new, sized
// and array deletes) are the C++ runtime's defaults, which the standard defines through the
// replaced pair. Under uslab they were uslab's own: a sized delete freed the program's
// pointer 16 bytes into its block (an abort), and a nothrow block deleted by the program's
// operator put a neighbouring block in a magazine twice (session 18's audit). Prints
// counters that must be the same under glibc and uslab (compare.sh); a block that reaches
// the program's delete without its header aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

static unsigned long news, deletes;
static const uint64_t magic = 0x5eed5eed5eed5eedull;

void *operator new(std::size_t n)
{
    char *p = static_cast<char *>(std::malloc(n + 16));
    if (!p)
        throw std::bad_alloc();
    std::memcpy(p, &magic, 8);
    std::memcpy(p + 8, &n, 8);
    news++;
    return p + 16;
}

void operator delete(void *q) noexcept
{
    if (!q)
        return;
    char *p = static_cast<char *>(q) - 16;
    uint64_t m;
    std::memcpy(&m, p, 8);
    if (m != magic) {
        std::fprintf(stderr, "operator delete(%p): no header: not a block of this operator new\n",
                     q);
        std::abort();
    }
    std::memset(p, 0, 8);
    deletes++;
    std::free(p);
}

int main()
{
    {
        std::vector<std::string> v;
        for (int i = 0; i < 200; i++)
            v.push_back(std::string(40 + i % 50, 'a' + i % 26)); // sized deletes when it grows
        std::map<int, std::string> m;
        for (int i = 0; i < 100; i++)
            m[i] = v[i];
        std::printf("containers: %zu %zu\n", v.size(), m.size());
    }
    std::printf("containers: live %ld\n", (long)(news - deletes));
    int *a = new int[100]; // operator new[] -> operator new
    a[99] = 1;
    delete[] a; // operator delete[] -> operator delete
    std::printf("new[]/delete[]: live %ld\n", (long)(news - deletes));
    {
        std::vector<int *> nt;
        for (int i = 0; i < 64; i++)
            nt.push_back(new (std::nothrow) int(i)); // nothrow new -> operator new
        for (int *p : nt)
            delete p; // the program's (or sized) delete: each must carry the header
    }
    std::printf("nothrow new: live %ld\n", (long)(news - deletes));
    {
        auto u = std::make_unique<std::string>(100, 'x');
        std::shared_ptr<std::vector<int>> s = std::make_shared<std::vector<int>>(1000, 7);
        std::printf("smart pointers: %zu %zu\n", u->size(), s->size());
    }
    // Blocks of malloc after all that: none may be handed out twice.
    void *blocks[64];
    for (int i = 0; i < 64; i++) {
        blocks[i] = std::malloc(8);
        for (int k = 0; k < i; k++)
            if (blocks[k] == blocks[i]) {
                std::printf("malloc returned %p twice\n", blocks[i]);
                return 1;
            }
    }
    for (void *p : blocks)
        std::free(p);
    std::printf("balanced: %s\n", news == deletes ? "yes" : "no");
    return news == deletes ? 0 : 1;
}
