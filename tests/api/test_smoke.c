/* SPDX-License-Identifier: MIT */
#include "check.h"
#include "uslab.h"

#include <stdint.h>
#include <string.h>

int main(void)
{
    uslab_cache_t *c = uslab_cache_create("smoke", 128, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(c, "create");
    void *o[1000];
    for (int i = 0; i < 1000; i++) {
        o[i] = uslab_cache_alloc(c);
        CHECK(o[i] && ((uintptr_t)o[i] & 15) == 0, "alloc %d", i);
        memset(o[i], i & 0xff, 128);
    }
    for (int i = 0; i < 1000; i++)
        for (int j = 0; j < 128; j++)
            CHECK(((unsigned char *)o[i])[j] == (i & 0xff), "contents %d", i);
    for (int i = 0; i < 1000; i++)
        uslab_cache_free(c, o[i]);
    uslab_cache_reap(c);
    uslab_cache_destroy(c);
    void *p = uslab_malloc(100);
    CHECK(p, "malloc");
    uslab_free(p);
    TEST_DONE();
}
