/*
 * fuzz_util.c - helpers shared by the fuzz targets. See fuzz_util.h.
 */
#include "fuzz_util.h"

#include <string.h>

#include "log.h"

#ifndef FUZZ_VECTORS_DIR
#error "FUZZ_VECTORS_DIR must name tests/vectors"
#endif

char *fuzz_strndup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (s == NULL)
		abort();
	if (size > 0)
		memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

const char *fuzz_vector_path(const char *name)
{
	static char path[4096];

	snprintf(path, sizeof(path), "%s/%s", FUZZ_VECTORS_DIR, name);
	return path;
}

char *fuzz_vector(const char *name, size_t *len)
{
	const char *path = fuzz_vector_path(name);
	FILE *f = fopen(path, "rb");
	char *data = NULL;
	long n;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		fprintf(stderr, "fuzz: cannot read %s\n", path);
		abort();
	}
	data = malloc((size_t)n + 1);
	if (data == NULL || fread(data, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "fuzz: cannot read %s\n", path);
		abort();
	}
	data[n] = '\0';
	fclose(f);
	if (len)
		*len = (size_t)n;
	return data;
}

void fuzz_quiet(void)
{
	log_init("fuzz", LOG_LVL_ERR);
}

int fuzz_printable_line(const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c == 0x7f)
			return 0;
	}
	return 1;
}
