// SPDX-License-Identifier: MIT
//
// dlopen_lock.cpp LIBRARY new|nothrow|trim|mallinfo - thread B dlopens LIBRARY, whose
// constructor waits for the program's registry lock; thread A holds that lock and meanwhile
// makes a call that fails an allocation (operator new, its nothrow form) or reaches glibc's
// malloc_trim or mallinfo2 for the first time. A call that waits for the dynamic linker's
// lock (dlsym) deadlocks here: uslab's did, where glibc's and libstdc++'s take no such lock
// (session 18's audit). alarm() turns a hang into a failure.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <malloc.h>
#include <new>
#include <pthread.h>
#include <thread>
#include <unistd.h>

extern "C" {
pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
volatile int in_constructor;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        std::fprintf(stderr, "usage: dlopen_lock LIBRARY new|nothrow|trim|mallinfo\n");
        return 2;
    }
    alarm(30);
    const char *lib = argv[1], *what = argv[2];
    pthread_mutex_lock(&registry_lock);
    std::thread b([lib] {
        void *h = dlopen(lib, RTLD_NOW);
        std::printf("B: dlopen %s\n", h ? "ok" : dlerror());
    });
    while (!in_constructor)
        usleep(100);
    usleep(20000); // B is in the constructor, waiting for the lock; the loader's lock is held
    if (std::strcmp(what, "nothrow") == 0) {
        void *p = ::operator new(SIZE_MAX / 4, std::nothrow);
        std::printf("A: nothrow new %s\n", p ? "returned a block" : "returned NULL");
    } else if (std::strcmp(what, "trim") == 0) {
        malloc_trim(0);
        std::printf("A: malloc_trim returned\n");
    } else if (std::strcmp(what, "mallinfo") == 0) {
        struct mallinfo2 mi = mallinfo2();
        (void)mi;
        std::printf("A: mallinfo2 returned\n");
    } else {
        try {
            void *p = ::operator new(SIZE_MAX / 4);
            std::printf("A: new returned %p\n", p);
        } catch (const std::bad_alloc &) {
            std::printf("A: caught bad_alloc\n");
        }
    }
    std::fflush(stdout);
    pthread_mutex_unlock(&registry_lock);
    b.join();
    std::printf("done\n");
    return 0;
}
