/* SPDX-License-Identifier: MIT */
/* full_magazine.h - for the depot's unit tests: a full magazine of c's real objects, taken
 * from its slabs (they go back there when the magazine is flushed). */
#ifndef USLAB_TEST_FULL_MAGAZINE_H
#define USLAB_TEST_FULL_MAGAZINE_H

#include "check.h"
#include "depot.h"
#include "descriptor.h"
#include "objects.h"

static inline struct usi_mag *full_magazine_of(struct uslab_cache *c)
{
    struct usi_mag *m = usi_mag_new_cap(c, c->mag_capacity);
    CHECK(m != NULL, "magazine");
    m->rounds = (uint32_t)usi_objects_fill(c, m->capacity, m->objs, 0, NULL);
    CHECK(m->rounds == m->capacity, "fill");
    return m;
}

#endif
