/*
 * fuzz_util.h - what every libFuzzer target of tests/fuzz shares.
 *
 * FUZZ_CHECK states a property the code under test promises; a broken one
 * aborts, which libFuzzer reports as a crash with the input saved.
 */
#ifndef RCS_FUZZ_UTIL_H
#define RCS_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* libFuzzer's entry points (prototypes for -Wmissing-prototypes). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(cond, ...)                                                                      \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);   \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* A NUL-terminated copy of data (aborts when out of memory). */
char *fuzz_strndup(const uint8_t *data, size_t size);

/* Reads tests/vectors/<name> (the whole file, NUL-terminated); aborts when missing. */
char *fuzz_vector(const char *name, size_t *len);

/* Path of tests/vectors/<name> in a static buffer. */
const char *fuzz_vector_path(const char *name);

/* Only errors reach stderr: the code under test logs every refused input. */
void fuzz_quiet(void);

/* True when s (NUL-terminated) has no byte below 0x20 and no DEL. */
int fuzz_printable_line(const char *s);

#endif
