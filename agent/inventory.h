/*
 * inventory.h - what the device says it runs (docs/agent.md "Inventory"): the agent's
 * inventory_command, run on a thread of its own at every connect and after every job; its
 * key=value lines become the state message's "attributes" (docs/mqtt.md "Device state").
 */
#ifndef RCS_AGENT_INVENTORY_H
#define RCS_AGENT_INVENTORY_H

#include <stddef.h>

#include <json-c/json.h>

#include "err.h"

struct inventory;

/* Called on the inventory's thread with the attributes of a run (the callee takes a
 * reference if it keeps them). */
typedef void (*inventory_cb)(void *ctx, json_object *attrs);

/*
 * Parses the output of an inventory command (n bytes): key=value lines, keys
 * [A-Za-z0-9_.-]{1,64}, values printable UTF-8 of at most 1024 bytes, spaces around
 * either trimmed, empty lines and lines starting with '#' ignored. Keeps the valid lines
 * up to 32 keys and 4 KiB of keys and values (a key given again: its last value); the rest
 * is skipped, counted in *skipped, the first reason in why. Returns a new object.
 */
json_object *inventory_parse(const char *text, size_t n, size_t *skipped, char *why, size_t whylen);

/* An inventory running path (absolute), reporting to cb. NULL when out of memory or the
 * thread cannot start. */
struct inventory *inventory_start(const char *path, inventory_cb cb, void *ctx);
/* Asks for a run (several asks before it starts make one). Any thread. */
void inventory_kick(struct inventory *inv);
/* Stops the thread (a running command is killed) and frees inv; NULL is fine. */
void inventory_stop(struct inventory *inv);

#endif
