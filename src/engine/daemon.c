/* daemon.c -- running as a service: daemonize, pidfile, supervised.
 *
 * Follows redis-server (server.c: daemonize, redisIsSupervised,
 * createPidFile) with one difference: Redis's parent exits right after
 * fork(), so an init script learns nothing when the daemon then fails to
 * bind its port. Here the parent waits on a pipe until the child listens
 * and has written its pidfile (then exits 0), or until the pipe closes
 * without that word because the child died (exit 1). It never waits for
 * recovery: once the parent is gone, clients reach the port and get
 * -LOADING until the data set is back, as with Redis. So a Type=forking
 * unit finds the pidfile in place when the parent exits.
 *
 * fork() must come before any thread exists: only the calling thread
 * survives it. main() calls daemon_supervise and daemon_detach right after
 * the configuration is read. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>
#include "daemon.h"
#include "server.h"

static int supervised_mode = SUPERVISED_NO;  /* in effect: NO, UPSTART or SYSTEMD */
static int ready_fd = -1;                     /* write end of the parent's pipe */
static char *pidfile_written;                 /* path of the pidfile we wrote */

static int notify_systemd(const char *msg) {
    int rc = sd_notify(0, msg);
    if (rc == 0) serverLog(LL_WARNING, "systemd supervision error: NOTIFY_SOCKET not found!");
    else if (rc < 0) serverLog(LL_WARNING, "systemd supervision error: sd_notify: %d", rc);
    return rc;
}

int daemon_supervise(void) {
    int mode = server.cfg.supervised;
    if (mode == SUPERVISED_AUTO) {
        if (getenv("UPSTART_JOB")) {
            serverLog(LL_VERBOSE, "Upstart supervision detected.");
            mode = SUPERVISED_UPSTART;
        } else if (getenv("NOTIFY_SOCKET")) {
            serverLog(LL_VERBOSE, "Systemd supervision detected.");
            mode = SUPERVISED_SYSTEMD;
        } else {
            mode = SUPERVISED_NO;
        }
    }
    if (mode == SUPERVISED_UPSTART) {
        if (!getenv("UPSTART_JOB")) {
            serverLog(LL_WARNING, "upstart supervision requested, but UPSTART_JOB not found!");
            return 0;
        }
        serverLog(LL_NOTICE, "supervised by upstart, will stop to signal readiness.");
        raise(SIGSTOP);
        unsetenv("UPSTART_JOB");
    } else if (mode == SUPERVISED_SYSTEMD) {
        if (notify_systemd("STATUS=Rowan is loading...\n") <= 0) return 0;
        serverLog(LL_NOTICE, "Supervised by systemd. Please make sure you set appropriate values "
                  "for TimeoutStartSec and TimeoutStopSec in your service unit.");
    } else {
        return 0;
    }
    supervised_mode = mode;
    return 1;
}

void daemon_detach(void) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        fprintf(stderr, "Can't daemonize: pipe: %s\n", strerror(errno));
        exit(1);
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "Can't daemonize: fork: %s\n", strerror(errno));
        exit(1);
    }
    if (pid > 0) {
        /* The parent: exit 0 only on the child's word (see the file comment). */
        close(p[1]);
        char ok = 0;
        ssize_t n;
        do n = read(p[0], &ok, 1); while (n < 0 && errno == EINTR);
        _exit(n == 1 && ok == '1' ? 0 : 1);
    }
    close(p[0]);
    ready_fd = p[1];
    setsid();
}

void daemon_started(void) {
    if (ready_fd < 0) return;
    int fd = open("/dev/null", O_RDWR);
    if (fd >= 0) {
        fflush(stdout);
        dup2(fd, STDIN_FILENO);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        if (fd > STDERR_FILENO) close(fd);
    }
    ssize_t n = write(ready_fd, "1", 1);
    (void)n;
    close(ready_fd);
    ready_fd = -1;
}

void daemon_pidfile_write(void) {
    const char *path = server.cfg.pidfile && server.cfg.pidfile[0] ? server.cfg.pidfile : NULL;
    if (!path && server.cfg.daemonize && supervised_mode == SUPERVISED_NO)
        path = DAEMON_DEFAULT_PIDFILE;
    if (!path) return;
    FILE *fp = fopen(path, "w");
    if (!fp) {
        serverLog(LL_WARNING, "Failed to write PID file: %s", strerror(errno));
        return;
    }
    fprintf(fp, "%d\n", (int)getpid());
    if (fclose(fp) != 0) {
        serverLog(LL_WARNING, "Failed to write PID file: %s", strerror(errno));
        return;
    }
    pidfile_written = strdup(path);
}

void daemon_pidfile_remove(void) {
    if (!pidfile_written) return;
    serverLog(LL_NOTICE, "Removing the pid file.");
    unlink(pidfile_written);
    free(pidfile_written);
    pidfile_written = NULL;
}

void daemon_notify(const char *msg) {
    if (supervised_mode == SUPERVISED_SYSTEMD) notify_systemd(msg);
}

const char *daemon_supervised_name(void) {
    return supervised_mode == SUPERVISED_UPSTART ? "upstart"
           : supervised_mode == SUPERVISED_SYSTEMD ? "systemd" : "no";
}
