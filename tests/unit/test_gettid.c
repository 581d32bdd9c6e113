/* SPDX-License-Identifier: MIT */
/*
 * test_gettid.c - the os layer's thread id (usi_os_gettid), which the debug letter U records
 * at every allocation and free: asked of the kernel once a thread, so it must still be each
 * thread's own, and a fork child's own after uslab's fork handler, not its parent's.
 */
#define _GNU_SOURCE
#include "check.h"
#include "os.h"
#include "uslab.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void *thread_main(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++)
        CHECK(usi_os_gettid() == (uint32_t)gettid(), "a thread's own id, call %d", i);
    return NULL;
}

int main(void)
{
    uslab_free(uslab_malloc(16)); /* uslab set up: its fork handlers registered */
    uint32_t parent = usi_os_gettid();
    CHECK(parent == (uint32_t)gettid() && usi_os_gettid() == parent, "the main thread's id");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, thread_main, NULL) == 0, "pthread_create");
    pthread_join(t, NULL);
    CHECK(usi_os_gettid() == parent, "the main thread's id again");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) /* the child's thread has a new id; 3: the test's failure, seen below */
        _exit(usi_os_gettid() == (uint32_t)gettid() && usi_os_gettid() != parent ? 0 : 3);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the fork child's own id (status %#x)", status);
    TEST_DONE();
}
