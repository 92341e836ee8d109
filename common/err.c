#include "err.h"

const char *rcs_strerror(enum rcs_err err)
{
	switch (err) {
	case RCS_OK:
		return "success";
	case RCS_ERR_NOMEM:
		return "out of memory";
	case RCS_ERR_INVAL:
		return "invalid input";
	case RCS_ERR_NOTFOUND:
		return "not found";
	case RCS_ERR_EXISTS:
		return "already exists";
	case RCS_ERR_CONFLICT:
		return "conflict";
	case RCS_ERR_TOOBIG:
		return "too big";
	case RCS_ERR_IO:
		return "i/o error";
	case RCS_ERR_DB:
		return "storage error";
	case RCS_ERR_FULL:
		return "storage full";
	case RCS_ERR_CRYPTO:
		return "crypto error";
	case RCS_ERR_VERIFY:
		return "signature does not verify";
	case RCS_ERR_AUTH:
		return "unauthorized";
	case RCS_ERR_FORBIDDEN:
		return "forbidden";
	case RCS_ERR_BUSY:
		return "busy";
	case RCS_ERR_INTERNAL:
		return "internal error";
	}
	return "unknown error";
}
