/* safetensors I/O (https://huggingface.co/docs/safetensors): 8-byte little-endian header length, JSON header
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then data.
 * Reading converts F32/F64/BF16 to double or float on request; writing emits F32 (or F64). */
#ifndef PIPELINE_SAFETENSORS_H
#define PIPELINE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ST_F32, ST_F64, ST_BF16, ST_I32, ST_I64 } StDtype;

typedef struct {
    char name[128];
    StDtype dtype;
    int ndim;
    int64_t shape[8];
    size_t numel;
    const uint8_t *data;  /* points into the file buffer */
} StTensor;

typedef struct {
    char *buf;            /* whole file */
    size_t size;
    StTensor *tensors;
    int n_tensors;
    char **meta_keys, **meta_values;
    int n_meta;
} StFile;

/* Validates header, dtypes, shapes vs byte ranges, overlaps and bounds. Errors: "<path>: <problem>". */
int st_read(StFile *f, const char *path, char *err, size_t errlen);
/* st_read of the header alone: the same checks (every tensor's byte range against the file's size), but only the
 * first 8 + header-length bytes are read, so a large checkpoint's tensor list and metadata cost what its header
 * does. The tensors' data pointers are NULL; buf/size hold just those bytes. */
int st_read_header(StFile *f, const char *path, char *err, size_t errlen);
void st_free(StFile *f);
const StTensor *st_find(const StFile *f, const char *name);
const char *st_meta(const StFile *f, const char *key); /* NULL if absent */
/* 0 when every element of every float tensor (F32, F64, BF16) is finite; else -1 with
 * "<path>: tensor <name>: element <i> is NaN|infinite" for the first one, in the header's order. */
int st_check_finite(const StFile *f, const char *path, char *err, size_t errlen);
/* Converts any float tensor to float/double arrays of numel elements. */
void st_to_f32(const StTensor *t, float *out);
void st_to_f64(const StTensor *t, double *out);

/* Writer: add tensors (data copied by reference until st_write_commit), then write atomically. */
typedef struct {
    struct StWTensor { char name[128]; StDtype dtype; int ndim; int64_t shape[8]; const void *data; size_t bytes; } *t;
    int n, cap;
    char **meta_keys, **meta_values;
    int n_meta;
} StWriter;

void st_writer_init(StWriter *w);
void st_writer_add(StWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape, const void *data);
void st_writer_meta(StWriter *w, const char *key, const char *value);
int st_writer_save(StWriter *w, const char *path, char *err, size_t errlen); /* atomic; tensors sorted by name */
void st_writer_free(StWriter *w);

#endif
