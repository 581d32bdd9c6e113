/* SPDX-License-Identifier: MIT */
/* consumer.c - a program built against an installed uslab, found with pkg-config. */
#include <stdio.h>
#include <uslab.h>

int main(void)
{
    uslab_cache_t *c = uslab_cache_create("consumer", 64, 0, NULL, NULL, NULL, NULL, 0);
    void *o = c ? uslab_cache_alloc(c) : NULL;
    void *m = uslab_malloc(100);
    if (!o || !m)
        return 1;
    uslab_cache_free(c, o);
    uslab_free(m);
    uslab_cache_destroy(c);
    printf("consumer ok\n");
    return 0;
}
