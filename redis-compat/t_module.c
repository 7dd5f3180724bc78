/* t_module.c -- MODULE: Redis's module commands, for a server that loads
 * no modules.
 *
 * Rowan does not load Redis modules (their API is Redis's in-memory
 * object model). MODULE LOAD, LOADEX and UNLOAD are still protected as in
 * Redis 7: refused with Redis's message unless enable-module-command is
 * yes (or local, for loopback clients), checked after the subcommand and
 * its arity as Redis's processCommand does. When allowed, LIST answers that no
 * module is loaded, LOAD and LOADEX fail as a module that cannot be
 * loaded fails in Redis (the reason goes to the log), and UNLOAD finds no
 * such module. */
#include "commands.h"
#include "config.h"
#include "server.h"

static int module_refused(client *c)
{
    int setting = server.cfg.enable_module_command;
    if (setting == PROTECTED_ACTION_YES || (setting == PROTECTED_ACTION_LOCAL && c->is_local))
        return 0;
    resp_add_error(&c->out, "ERR MODULE command not allowed. If the enable-module-command option "
                   "is set to \"local\", you can run it from a local connection, otherwise you "
                   "need to set this option in the configuration file, and then restart the "
                   "server.");
    return 1;
}

static const char *const module_help[] = {
    "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LIST",
    "    Return a list of loaded modules.",
    "LOAD <path> [<arg> ...]",
    "    Load a module library from <path>, passing to it any optional arguments.",
    "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
    "    Load a module library from <path>, while passing it module configurations and optional arguments.",
    "UNLOAD <name>",
    "    Unload a module.",
    "HELP",
    "    Prints this help.",
    NULL,
};

static void module_help_cmd(client *c) { reply_help(c, module_help); }

static void module_list(client *c) { resp_add_array(&c->out, 0); }   /* not protected */

static void module_load(client *c)
{
    if (module_refused(c)) return;
    serverLog(LL_WARNING, "Module %.*s failed to load: Rowan does not load Redis modules",
              (int)(c->argvlen[2] > 256 ? 256 : c->argvlen[2]), c->argv[2]);
    resp_add_error(&c->out, "ERR Error loading the extension. Please check the server logs.");
}

static void module_unload(client *c)
{
    if (!module_refused(c))
        resp_add_error(&c->out, "ERR Error unloading module: no such module with that name");
}

static const subcommand module_subs[] = {
    { "list", 2, module_list },
    { "load", -3, module_load },
    { "loadex", -3, module_load },
    { "unload", 3, module_unload },
    { "help", 2, module_help_cmd },
    { NULL, 0, NULL },
};

void moduleCommand(client *c) { subcommand_dispatch(c, module_subs, "module"); }
