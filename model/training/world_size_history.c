/* The number of ranks a run was trained with, step by step (see world_size_history.h). */
#include "model/training/world_size_history.h"

#include <stdio.h>
#include <string.h>

#include "pipeline/base/config.h"
#include "pipeline/base/log.h"

void world_size_history_start(WorldSizeHistory *h, long world_size) {
    memset(h, 0, sizeof *h);
    h->n = 1;
    h->era[0] = (WorldSizeEra){0, world_size};
}

int world_size_history_continue(WorldSizeHistory *h, long step, long world_size, char *err, size_t errlen) {
    if (h->n == 0) { /* nothing recorded yet: the whole run so far is this number of ranks */
        world_size_history_start(h, world_size);
        return 0;
    }
    WorldSizeEra *last = &h->era[h->n - 1];
    if (last->world_size == world_size) return 0;
    if (last->from_step == step) {
        /* The last entry trained no step (stopped before its first): this one takes its place. */
        if (h->n > 1 && h->era[h->n - 2].world_size == world_size) h->n--;
        else last->world_size = world_size;
        return 0;
    }
    if (h->n == WORLD_SIZE_HISTORY_MAX) {
        set_err(err, errlen, "world_size_history: the run already changed its number of ranks %d times (the most a "
                "record holds); continue it with %ld rank(s), as the checkpoint was written",
                WORLD_SIZE_HISTORY_MAX - 1, last->world_size);
        return -1;
    }
    h->era[h->n++] = (WorldSizeEra){step, world_size};
    return 0;
}

void world_size_history_to_json(cJSON *obj, const WorldSizeHistory *h) {
    cJSON *a = cJSON_AddArrayToObject(obj, "world_size_history");
    CHECK_ALLOC(a);
    for (int i = 0; i < h->n; i++) {
        cJSON *e = cJSON_CreateObject();
        CHECK_ALLOC(e);
        CHECK_ALLOC(cJSON_AddNumberToObject(e, "from_step", (double)h->era[i].from_step));
        CHECK_ALLOC(cJSON_AddNumberToObject(e, "world_size", (double)h->era[i].world_size));
        if (!cJSON_AddItemToArray(a, e)) die("out of memory");
    }
}

int world_size_history_read(const cJSON *v, const char *path, long step, long world_size, WorldSizeHistory *h,
                            char *err, size_t errlen) {
    if (!v) {
        world_size_history_start(h, world_size);
        return 0;
    }
    memset(h, 0, sizeof *h);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1 || cJSON_GetArraySize(v) > WORLD_SIZE_HISTORY_MAX) {
        set_err(err, errlen, "%s: world_size_history: expected an array of 1 to %d entries", path,
                WORLD_SIZE_HISTORY_MAX);
        return -1;
    }
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        char where[64];
        snprintf(where, sizeof where, "world_size_history[%d]", i);
        if (!cJSON_IsObject(e)) {
            set_err(err, errlen, "%s: %s: expected an object {\"from_step\", \"world_size\"}", path, where);
            return -1;
        }
        JsonReader r;
        json_reader_init(&r, e, path, where);
        long from = -1, ws = 0;
        json_get_int(&r, "from_step", &from, true);
        json_get_int(&r, "world_size", &ws, true);
        if (json_reader_finish(&r, err, errlen) != 0) return -1;
        long prev_from = i ? h->era[i - 1].from_step : -1;
        if (i == 0 ? from != 0 : (from <= prev_from || from > step)) {
            set_err(err, errlen, "%s: %s.from_step: %ld, expected %s", path, where, from,
                    i == 0 ? "0 (the first entry starts the run)" : "a step after the entry before and <= step");
            return -1;
        }
        if (ws < 1 || (i > 0 && ws == h->era[i - 1].world_size)) {
            set_err(err, errlen, "%s: %s.world_size: %ld, expected >= 1 and a change from the entry before", path,
                    where, ws);
            return -1;
        }
        h->era[i] = (WorldSizeEra){from, ws};
        h->n = i + 1;
    }
    if (h->era[h->n - 1].world_size != world_size) {
        set_err(err, errlen, "%s: world_size_history ends with %ld rank(s), but world_size is %ld", path,
                h->era[h->n - 1].world_size, world_size);
        return -1;
    }
    return 0;
}

void world_size_history_describe(const WorldSizeHistory *h, char *out, size_t outlen) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < h->n && used < outlen; i++) {
        int k = snprintf(out + used, outlen - used, "%s%ld rank(s) from step %ld", i ? ", " : "", h->era[i].world_size,
                         h->era[i].from_step);
        if (k < 0) break;
        used += (size_t)k;
    }
}
