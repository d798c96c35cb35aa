# fetch: zlib verifies the gzip CRC-32/length trailer that libarchive's gzip reader skips (datasets/archive_extract.c).
# zlib1g-dev is a required build package (mk/deps.sh), so this is unconditional: a parse-time probe would miss it on a
# fresh machine, where deps installs it during the same make run.
BASE_CFLAGS += -DHAVE_ZLIB
LDLIBS += -lz
