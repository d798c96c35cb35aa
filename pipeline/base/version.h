/* The code version (git describe of the build) recorded in every output for provenance.
 * CODE_VERSION is defined on the compiler command line as code_version(), so only pipeline/base/version.c is rebuilt when
 * the version changes (it includes the generated build/code_version.h). */
#ifndef PIPELINE_VERSION_H
#define PIPELINE_VERSION_H

const char *code_version(void);

#endif
