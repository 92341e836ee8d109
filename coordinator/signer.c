#include "signer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "jsonu.h"
#include "log.h"

struct signer {
	pthread_mutex_t lock; /* mbedtls keys cache tables: one user at a time */
	/* signatures that verified, bound to their tenant, task and version (common/manifest.h) */
	struct sig_cache good;
	struct sig_key *signing;
	struct sig_key **trusted; /* includes the signing key's public half */
	size_t ntrusted;
};

enum rcs_err signer_open(const char *signing_key, const char *passphrase, char *const *trusted,
			 size_t ntrusted, struct signer **out)
{
	struct signer *s = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		goto out;
	pthread_mutex_init(&s->lock, NULL);
	sig_cache_init(&s->good);
	s->trusted = calloc(ntrusted + 1, sizeof(*s->trusted));
	if (s->trusted == NULL)
		goto out;
	if (signing_key) {
		err = sig_key_load_pass(signing_key, passphrase, true, &s->signing);
		if (err == RCS_ERR_AUTH)
			log_warnx("signing key %s: %s", signing_key,
				  passphrase ? "wrong passphrase"
					     : "the key is encrypted and no passphrase was given");
		else if (err != RCS_OK)
			log_warnx("signing key %s: %s", signing_key, rcs_strerror(err));
		if (err != RCS_OK)
			goto out;
		err = sig_key_load_pass(signing_key, passphrase, false, &s->trusted[s->ntrusted]);
		if (err != RCS_OK)
			goto out;
		s->ntrusted++;
		log_info("signing tasks with key %s", sig_key_id(s->signing));
	}
	for (size_t i = 0; i < ntrusted; i++) {
		err = sig_key_load_public(trusted[i], &s->trusted[s->ntrusted]);
		if (err != RCS_OK) {
			log_warnx("trusted key %s: %s", trusted[i], rcs_strerror(err));
			goto out;
		}
		log_info("trusting key %s", sig_key_id(s->trusted[s->ntrusted]));
		s->ntrusted++;
	}
	*out = s;
	s = NULL;
	err = RCS_OK;
out:
	signer_free(s);
	return err;
}

void signer_free(struct signer *s)
{
	if (s == NULL)
		return;
	sig_key_free(s->signing);
	for (size_t i = 0; i < s->ntrusted; i++)
		sig_key_free(s->trusted[i]);
	free(s->trusted);
	sig_cache_destroy(&s->good);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

bool signer_can_sign(const struct signer *s)
{
	return s && s->signing;
}

size_t signer_trusted_count(const struct signer *s)
{
	return s ? s->ntrusted : 0;
}

enum rcs_err signer_sign(const struct signer *s, const struct manifest_in *m, json_object **out)
{
	struct buf man;
	char value[SIG_B64_MAX];
	json_object *o = NULL;
	enum rcs_err err;

	*out = NULL;
	if (!signer_can_sign(s))
		return RCS_OK;
	buf_init(&man, MANIFEST_MAX);
	err = manifest_build(m, &man);
	if (err != RCS_OK)
		goto out;
	pthread_mutex_lock((pthread_mutex_t *)&s->lock);
	err = sig_sign(s->signing, man.data, man.len, value, sizeof(value));
	pthread_mutex_unlock((pthread_mutex_t *)&s->lock);
	if (err != RCS_OK)
		goto out;
	o = json_object_new_object();
	json_object_object_add(o, "alg", json_object_new_string("ES256"));
	json_object_object_add(o, "key_id", json_object_new_string(sig_key_id(s->signing)));
	json_object_object_add(o, "value", json_object_new_string(value));
	*out = o;
out:
	buf_free(&man);
	return err;
}

static bool signer_hex16(const char *s)
{
	if (s == NULL || strlen(s) != 16)
		return false;
	for (int i = 0; i < 16; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

enum rcs_err signer_check(const struct signer *s, const struct manifest_in *m, json_object *sig)
{
	static const char *const keys[] = {"alg", "key_id", "value", NULL};
	struct jsonu_err e;
	const char *alg = NULL, *kid = NULL, *value = NULL;
	unsigned char der[160];
	size_t derlen;
	struct buf man;
	enum rcs_err err;

	if (sig == NULL || !json_object_is_type(sig, json_type_object) ||
	    jsonu_check_keys(sig, keys, &e) != RCS_OK ||
	    jsonu_get_string(sig, "alg", true, 16, &alg, NULL, &e) != RCS_OK ||
	    jsonu_get_string(sig, "key_id", true, 16, &kid, NULL, &e) != RCS_OK ||
	    jsonu_get_string(sig, "value", true, SIG_B64_MAX - 1, &value, NULL, &e) != RCS_OK ||
	    strcmp(alg, "ES256") != 0 || !signer_hex16(kid) ||
	    b64_decode(value, der, sizeof(der), &derlen) != RCS_OK)
		return RCS_ERR_INVAL;
	if (signer_trusted_count(s) == 0)
		return RCS_OK;
	buf_init(&man, MANIFEST_MAX);
	err = manifest_build(m, &man);
	if (err == RCS_OK) {
		pthread_mutex_lock((pthread_mutex_t *)&s->lock);
		err = sig_verify_object(s->trusted, s->ntrusted, sig, man.data, man.len);
		pthread_mutex_unlock((pthread_mutex_t *)&s->lock);
	}
	buf_free(&man);
	return err;
}

enum rcs_err signer_check_cached(struct signer *s, const struct manifest_in *m, json_object *sig)
{
	char bound[256];
	unsigned char d[32];
	enum rcs_err err;
	bool digest_ok;
	int n;

	if (signer_trusted_count(s) == 0)
		return RCS_OK;
	/* a task version's bytes never change: its tenant, ident and number stand for them */
	n = snprintf(bound, sizeof(bound), "%s/%s/%lld", m->client_root, m->task_ident, m->version);
	digest_ok =
	    n > 0 && (size_t)n < sizeof(bound) && sig_cache_digest(sig, bound, (size_t)n, d);
	if (digest_ok && sig_cache_has(&s->good, d))
		return RCS_OK;
	err = signer_check(s, m, sig);
	if (err == RCS_OK && digest_ok)
		sig_cache_put(&s->good, d);
	return err;
}
