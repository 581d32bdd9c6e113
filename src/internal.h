/* SPDX-License-Identifier: MIT */
/*
 * internal.h - every layer's header (docs/design.md §1), for the files that
 * still include this one. Each layer now has its own header beside its .c file; the files
 * move to the headers of the layers they use, and then this one goes.
 */
#ifndef USLAB_INTERNAL_H
#define USLAB_INTERNAL_H

#include "base.h"
#include "cache.h"
#include "debug.h"
#include "depot.h"
#include "descriptor.h"
#include "init.h"
#include "live.h"
#include "objects.h"
#include "options.h"
#include "os.h"
#include "pages.h"
#include "purge.h"
#include "reclaim.h"
#include "registry.h"
#include "report.h"
#include "settings.h"
#include "sizeclass.h"
#include "slab.h"
#include "symbols.h"
#include "tcache.h"
#include "uslab.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#endif
