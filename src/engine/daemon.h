/* daemon.h -- running as a service: daemonize, pidfile, supervised.
 *
 * The options are redis.conf's: `daemonize yes|no`, `pidfile <path>`,
 * `supervised no|upstart|systemd|auto`. Under systemd the server reports
 * its state with sd_notify (libsystemd): STATUS lines while it starts,
 * READY=1 once it serves, STOPPING=1 when it begins to shut down. */
#ifndef ROWAN_DAEMON_H
#define ROWAN_DAEMON_H

enum { SUPERVISED_NO = 0, SUPERVISED_UPSTART, SUPERVISED_SYSTEMD, SUPERVISED_AUTO };

/* Redis writes /var/run/redis.pid when daemonized without a `pidfile`. */
#define DAEMON_DEFAULT_PIDFILE "/var/run/rowan.pid"

/* Resolve `supervised` as redis-server does (auto: UPSTART_JOB, then
 * NOTIFY_SOCKET) and announce it (upstart: the process stops itself;
 * systemd: a first STATUS line). 1 when supervised. Before any thread. */
int daemon_supervise(void);
/* Fork into the background (`daemonize yes` and not supervised). Before any
 * thread. The parent waits: it exits 0 once the server listens
 * (daemon_started), 1 if the server exits before that (a busy port, a bad
 * pool...), so init scripts see startup errors in the exit status. The
 * child leaves the terminal's session. */
void daemon_detach(void);
/* The server listens and has written its pidfile: a waiting parent exits 0,
 * and a daemon's stdin/stdout/stderr now go to /dev/null (as redis-server's:
 * with no `logfile`, the log is lost). No-op in the foreground. */
void daemon_started(void);
/* Write the pidfile (`pidfile`, or DAEMON_DEFAULT_PIDFILE when daemonized);
 * a failure is logged, not fatal, as in Redis. */
void daemon_pidfile_write(void);
/* Remove the pidfile written by daemon_pidfile_write, if any. */
void daemon_pidfile_remove(void);
/* Send an sd_notify message ("READY=1", "STATUS=...", "STOPPING=1") when
 * supervised by systemd; no-op otherwise. Safe from any thread. */
void daemon_notify(const char *msg);
/* "no", "upstart" or "systemd": the supervision in effect (INFO). */
const char *daemon_supervised_name(void);

#endif
