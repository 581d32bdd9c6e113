/* SPDX-License-Identifier: MIT */
/* dlopen_lock_lib.c - for dlopen_lock: a library whose constructor registers itself under a
 * lock of the program's (as plugins do), while the dynamic linker holds its own lock. */
#include <pthread.h>

extern pthread_mutex_t registry_lock;
extern volatile int in_constructor;

__attribute__((constructor)) static void register_plugin(void)
{
    in_constructor = 1;
    pthread_mutex_lock(&registry_lock);
    pthread_mutex_unlock(&registry_lock);
}
