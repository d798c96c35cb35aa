# fetch: zlib verifies the gzip CRC-32/length trailer that libarchive's gzip reader skips (datasets/archive_extract.c).
# Used when zlib's headers and library are present (zlib1g-dev); otherwise fetch falls back to libarchive's reader and
# warns that the CRC is not verified.
FETCH_HAVE_ZLIB := $(shell printf '\043include <zlib.h>\nint main(void){return zlibVersion()[0]==0;}\n' | \
               $(CC) -x c - -lz -o /dev/null >/dev/null 2>&1 && echo 1)
ifeq ($(FETCH_HAVE_ZLIB),1)
BASE_CFLAGS += -DHAVE_ZLIB
LDLIBS += -lz
endif
