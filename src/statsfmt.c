/* SPDX-License-Identifier: MIT */
/*
 * statsfmt.c - the statistics as text (docs/design.md §10): the slabinfo-style table and
 * the JSON of a set of cache records (live.h). uslab_stats_print and USLAB_STATS (stats.c)
 * print the caches of their own process with it, and the `uslab` tool, which compiles this
 * file in, the caches of another process read from its live page (`uslab stats PID`): one
 * text for both. Calls nothing of uslab but the debug letters' table (settings.c).
 */
#include "live.h"
#include "settings.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void debug_letters(unsigned d, char *buf)
{
    char *p = buf;
    for (size_t i = 0; i < usi_settings_nletters; i++)
        if (d & usi_settings_letters[i].bit)
            *p++ = usi_settings_letters[i].letter;
    *p = '\0';
}

static double pct(double a, double b)
{
    return b > 0 ? 100.0 * a / b : 0.0;
}

/* bytes as "512" (with `bytes_suffix`), "12.3K", "1023.9M"... */
static void size_text(char *buf, size_t len, uint64_t bytes, const char *bytes_suffix)
{
    static const char units[] = "BKMGT";
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 "%s", bytes, bytes_suffix);
    else
        snprintf(buf, len, "%.1f%c", v, units[u]);
}

void usi_statsfmt_size(FILE *f, uint64_t bytes)
{
    char t[32];
    size_text(t, sizeof t, bytes, "");
    fprintf(f, "%7s", t);
}

void usi_statsfmt_json_string(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
}

/* Space of a record's slabs, and the share of it its active objects fill. */
static uint64_t space_of(const struct usi_live_cache *r)
{
    return r->slabs * r->slab_size;
}

static double efficiency_of(const struct usi_live_cache *r)
{
    return pct((double)r->active * (double)r->object_size, (double)space_of(r));
}

static double free_pct_of(const struct usi_live_cache *r)
{
    return pct((double)(r->total_objects - r->active), (double)r->total_objects);
}

const char *usi_statsfmt_name(const char *name, char *out, size_t size)
{
    size_t i = 0;
    for (; name[i] && i + 1 < size; i++)
        out[i] = (unsigned char)name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
    out[i] = '\0';
    return out;
}

int usi_statsfmt_internal(const struct usi_live_cache *c)
{
    return strncmp(c->name, "uslab-", 6) == 0;
}

void usi_statsfmt_rss(const char *status, uint64_t *rss, uint64_t *peak)
{
    *rss = *peak = 0;
    for (const char *p = status; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        uint64_t *to = !strncmp(p, "VmRSS:", 6) ? rss : !strncmp(p, "VmHWM:", 6) ? peak : NULL;
        if (to)
            *to = strtoull(p + 6, NULL, 10) << 10; /* kB */
    }
}

void usi_statsfmt_totals(const struct usi_live_header *h, const struct usi_live_cache *r, size_t n,
                         struct usi_statsfmt_totals *t)
{
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < n; i++) {
        const struct usi_live_cache *c = &r[i];
        if (usi_statsfmt_internal(c)) {
            t->own_bytes += space_of(c);
            continue;
        }
        t->objects += c->active;
        t->in_use += c->active * c->object_size;
        t->held += space_of(c);
        t->resident += c->resident_bytes;
    }
    /* Counted on glibc's paths: a block glibc gave out before uslab started, freed
     * since, may make them negative. */
    t->large_blocks = h->large_blocks < ((uint64_t)1 << 62) ? h->large_blocks : 0;
    t->large_bytes = h->large_bytes < ((uint64_t)1 << 62) ? h->large_bytes : 0;
}

static void row(FILE *f, const struct usi_live_cache *c)
{
    {
        char dbg[32], spc[64], name[sizeof c->name];
        debug_letters(c->debug, dbg);
        snprintf(spc, sizeof spc, "%" PRIu64 "/%" PRIu64 "/%" PRIu64, c->slabs, c->partial,
                 c->cached_thread);
        fprintf(f, "%-22s %8" PRIu64 " %7" PRIu64 " ",
                usi_statsfmt_name(c->name, name, sizeof name), c->active, c->object_size);
        usi_statsfmt_size(f, space_of(c));
        fputs("  ", f);
        usi_statsfmt_size(f, c->resident_bytes);
        /* Whole percents, rounded away from the ends where objects are live: a table that
         * read 100% free or 0% efficient beside live objects was wrong (session 17). */
        double eff = efficiency_of(c);
        unsigned free_whole = (unsigned)free_pct_of(c), eff_whole = (unsigned)eff;
        eff_whole += eff_whole < eff;
        fprintf(f, " %-15s %4" PRIu64 " %3u %3u %s\n", spc, c->objs_per_slab, free_whole, eff_whole,
                dbg);
    }
}

void usi_statsfmt_table(FILE *f, const struct usi_live_header *h, const struct usi_live_cache *r,
                        size_t n)
{
    fputs("Name                   Objects Objsize   Space Resident Slabs/Part/Cpu  O/S %Fr %Ef "
          "Flg\n",
          f);
    /* The program's caches and malloc classes, then uslab's own (magazines, records). */
    size_t own = 0;
    for (size_t i = 0; i < n; i++)
        if (!usi_statsfmt_internal(&r[i]))
            row(f, &r[i]);
        else
            own++;
    if (own)
        fputs("-- uslab's own caches --\n", f);
    for (size_t i = 0; i < n; i++)
        if (usi_statsfmt_internal(&r[i]))
            row(f, &r[i]);
    struct usi_statsfmt_totals t;
    usi_statsfmt_totals(h, r, n, &t);
    char a[32], b[32], c[32], d[32], e[32];
    size_text(a, sizeof a, t.in_use, " B");
    size_text(b, sizeof b, t.large_bytes, " B");
    size_text(c, sizeof c, h->large_peak, " B");
    fprintf(f,
            "in use: %s in %" PRIu64 " objects of slabs; %s in %" PRIu64
            " blocks of the system allocator (peak %s)\n",
            a, t.objects, b, t.large_blocks, c);
    size_text(a, sizeof a, t.held, " B");
    size_text(b, sizeof b, t.resident, " B");
    size_text(c, sizeof c, t.own_bytes, " B");
    size_text(d, sizeof d, h->rss_bytes, " B");
    size_text(e, sizeof e, h->rss_peak, " B");
    fprintf(f, "held: %s of slabs (%s resident), %s of uslab's own; process RSS %s (peak %s)\n", a,
            b, c, h->rss_bytes ? d : "?", h->rss_peak ? e : "?");
    fprintf(f,
            "thread caches may hold %" PRIu64 " KiB (bound %" PRIu64
            " KiB); reserved address space %" PRIu64 " MiB; the columns: `uslab help stats`\n",
            h->thread_cache_bytes >> 10, h->thread_cache_max >> 10, h->reserved_bytes >> 20);
}

void usi_statsfmt_json(FILE *f, const struct usi_live_header *h, const struct usi_live_cache *r,
                       size_t n, const char *more)
{
    fprintf(f,
            "{\"uslab\":{\"version\":\"%u.%u\",\"reserved_bytes\":%" PRIu64
            ",\"thread_cache_bytes\":%" PRIu64 ",\"thread_cache_max\":%" PRIu64 "%s},\n",
            h->lib_version >> 16, h->lib_version & 0xffff, h->reserved_bytes, h->thread_cache_bytes,
            h->thread_cache_max, more ? more : "");
    struct usi_statsfmt_totals t;
    usi_statsfmt_totals(h, r, n, &t);
    fprintf(f,
            " \"totals\":{\"objects\":%" PRIu64 ",\"in_use_bytes\":%" PRIu64
            ",\"held_bytes\":%" PRIu64 ",\"resident_bytes\":%" PRIu64 ",\"own_bytes\":%" PRIu64
            ",\"large_blocks\":%" PRIu64 ",\"large_bytes\":%" PRIu64
            ",\"large_peak_bytes\":%" PRIu64 ",\"rss_bytes\":%" PRIu64
            ",\"rss_peak_bytes\":%" PRIu64 "},\n \"caches\":[",
            t.objects, t.in_use, t.held, t.resident, t.own_bytes, t.large_blocks, t.large_bytes,
            h->large_peak, h->rss_bytes, h->rss_peak);
    for (size_t i = 0; i < n; i++) {
        const struct usi_live_cache *c = &r[i];
        char dbg[32];
        debug_letters(c->debug, dbg);
        fprintf(f, "%s\n  {\"name\":\"", i ? "," : "");
        usi_statsfmt_json_string(f, c->name);
        fprintf(f,
                "\",\"objects\":%" PRIu64 ",\"objsize\":%" PRIu64 ",\"stride\":%" PRIu64
                ",\"slab_size\":%" PRIu64 ",\"objs_per_slab\":%" PRIu64 ",\"slabs\":%" PRIu64
                ",\"partial\":%" PRIu64 ",\"full\":%" PRIu64 ",\"empty\":%" PRIu64
                ",\"total_objects\":%" PRIu64 ",\"cached_thread\":%" PRIu64
                ",\"cached_depot\":%" PRIu64 ",\"space\":%" PRIu64
                ",\"free_pct\":%.1f,\"efficiency_pct\":%.1f,\"slabs_created\":%" PRIu64
                ",\"slabs_released\":%" PRIu64 ",\"magazine\":%u,\"debug\":\"%s\",\"id\":%" PRIu64
                ",\"resident_bytes\":%" PRIu64 ",\"slab_takes\":%" PRIu64 ",\"slab_puts\":%" PRIu64
                ",\"depot_in\":%" PRIu64 ",\"depot_out\":%" PRIu64 "}",
                c->active, c->object_size, c->stride, c->slab_size, c->objs_per_slab, c->slabs,
                c->partial, c->full, c->empty, c->total_objects, c->cached_thread, c->cached_depot,
                space_of(c), free_pct_of(c), efficiency_of(c), c->slabs_created, c->slabs_released,
                c->magazine, dbg, c->id, c->resident_bytes, c->slab_takes, c->slab_puts,
                c->depot_in, c->depot_out);
    }
    fputs("\n]}\n", f);
}
