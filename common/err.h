/*
 * err.h - the one error enum of the project.
 *
 * Every function that can fail returns an enum rcs_err (RCS_OK on success) and
 * writes its results through pointers. rcs_strerror() names an error for logs.
 */
#ifndef RCS_ERR_H
#define RCS_ERR_H

enum rcs_err {
	RCS_OK = 0,
	RCS_ERR_NOMEM,     /* allocation failed */
	RCS_ERR_INVAL,     /* malformed or invalid input */
	RCS_ERR_NOTFOUND,  /* no such object (or not visible to the caller) */
	RCS_ERR_EXISTS,    /* object already exists */
	RCS_ERR_CONFLICT,  /* state does not allow the operation */
	RCS_ERR_TOOBIG,    /* a bounded buffer or list limit was exceeded */
	RCS_ERR_IO,        /* system call or file error */
	RCS_ERR_DB,        /* storage error */
	RCS_ERR_FULL,      /* storage is full */
	RCS_ERR_CRYPTO,    /* key, signature or hash error */
	RCS_ERR_VERIFY,    /* signature did not verify */
	RCS_ERR_AUTH,      /* unauthenticated */
	RCS_ERR_FORBIDDEN, /* authenticated but not allowed */
	RCS_ERR_BUSY,      /* temporarily unavailable, retry */
	RCS_ERR_INTERNAL,  /* bug: should not happen */
};

/* Returns a static, human-readable name for err; never NULL. */
const char *rcs_strerror(enum rcs_err err);

#endif
