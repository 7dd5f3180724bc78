/* acl.h -- users and permissions (Redis 7.0's ACL); see acl.c.
 *
 * The dispatcher asks acl_check_command() once per command after the
 * NOAUTH check; AUTH / HELLO AUTH / RESET go through acl_authenticate() and
 * acl_client_reset(). Every client is bound to a user (the "default" user
 * when it connects); requirepass is the default user's password. */
#ifndef ROWAN_ACL_H
#define ROWAN_ACL_H
#include <stddef.h>
#include "client.h"

struct rcommand;

/* Before the workers start, after the configuration: builds the category
 * table, the default user, the `user` lines and the aclfile. 0 ok, -1 with
 * err set (the server must not start). */
int acl_init(char *err, size_t errlen);

/* A new connection: bound to the default user; authenticated when that
 * user needs no password. */
void acl_client_init(client *c);
/* The connection is being freed. */
void acl_client_free(client *c);
/* RESET: back to the default user, as a new connection. */
void acl_client_reset(client *c);
/* Does the default user take any password (nopass and on)? Connections
 * then start authenticated (protected mode, parser limits). */
int acl_default_nopass(void);

/* AUTH user pass (user NULL: "default"). 1 ok (c is bound to the user), 0
 * wrong: logged in ACL LOG, c unchanged. */
int acl_authenticate(client *c, const char *user, size_t ulen, const char *pass, size_t plen);

/* May c run c->cmd with c->argv? 0 yes; -1 no: the NOPERM error is in
 * c->out and the denial is in ACL LOG. */
int acl_check_command(client *c);

/* Is there a user of that name? (CLIENT KILL USER) */
int acl_user_exists(const char *name, size_t len);
/* EXEC, before each queued command (c->cmd/argv set to it): the rules
 * may have changed since it was queued. 0 run it; -1 Redis's NOPERM "ACLs
 * rules changed..." error is in c->out instead. */
int acl_check_queued(client *c);
/* Is c bound to the user of that name? (CLIENT KILL USER) */
int acl_client_is_user(client *c, const char *name, size_t len);
/* The name of c's user into buf (CLIENT LIST user=). */
void acl_client_username(client *c, char *buf, size_t len);

/* The ACL categories of cmd ("@read", ...), at most 8, in Redis's order
 * (COMMAND INFO, COMMAND LIST FILTERBY ACLCAT, ACL CAT). */
int acl_command_categories(const struct rcommand *cmd, const char **cats);

#endif
