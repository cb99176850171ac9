/* polar-helper: Polar's own static program in every session container (the toolbox,
 * activities/runtimes/toolbox.py), so that a task's image needs neither python3 nor
 * util-linux. Built statically (musl-gcc, else gcc -static) by infra/toolbox/build.sh.
 *
 *   polar-helper setsid PROG [ARG...]
 *       `setsid -w PROG ARG...`: PROG in a new session; when this process already leads a
 *       process group it forks and waits, and exits with PROG's status (128+N: signal N).
 *
 *   polar-helper runas USER PROG [ARG...]
 *       `setpriv --reuid=USER --regid=GID --init-groups -- PROG`: PROG as USER (a name or a
 *       uid, looked up in the image's /etc/passwd), with that user's group and groups.
 *
 *   polar-helper forward --socket PATH --port N [--host ADDR] [--log FILE] [-- PROG ARG...]
 *       The in-sandbox end of the gateway channel (as activities/runtimes/network/forwarder.py):
 *       TCP on ADDR:N (default 127.0.0.1), each connection spliced both ways to a new
 *       connection to the Unix socket PATH, half-closes passed on. With a command, the port is
 *       bound, the forwarder forks into the background (stderr to FILE) and the command runs
 *       in this process's place: the port listens before its first instruction. A port that
 *       cannot be bound: exit 97 before the command runs.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHUNK (64 * 1024)

static const char *sock_path;

static int usage(void) {
    fprintf(stderr,
            "usage: polar-helper setsid PROG [ARG...]\n"
            "       polar-helper runas USER PROG [ARG...]\n"
            "       polar-helper forward --socket PATH --port N [--host ADDR] [--log FILE] "
            "[-- PROG ARG...]\n");
    return 2;
}

static int run_setsid(char **argv) {
    if (!argv[0]) return usage();
    if (getpgrp() == getpid()) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("polar-helper: fork");
            return 1;
        }
        if (pid > 0) {
            int status;
            while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR) return 1;
            if (WIFEXITED(status)) return WEXITSTATUS(status);
            return 128 + WTERMSIG(status);
        }
    }
    if (setsid() < 0) {
        perror("polar-helper: setsid");
        return 1;
    }
    execvp(argv[0], argv);
    fprintf(stderr, "polar: cannot run %s: %s\n", argv[0], strerror(errno));
    return 127;
}

static int run_as(char **argv) {
    if (!argv[0] || !argv[1]) return usage();
    char *end = NULL;
    struct passwd *pw = getpwnam(argv[0]);
    if (!pw) {
        long uid = strtol(argv[0], &end, 10);
        if (*argv[0] && !*end && uid >= 0) pw = getpwuid((uid_t)uid);
    }
    if (!pw) {
        fprintf(stderr, "polar-helper: no user %s in /etc/passwd\n", argv[0]);
        return 97;
    }
    if (initgroups(pw->pw_name, pw->pw_gid) < 0 || setgid(pw->pw_gid) < 0 ||
        setuid(pw->pw_uid) < 0) {
        fprintf(stderr, "polar-helper: cannot become %s: %s\n", argv[0], strerror(errno));
        return 97;
    }
    execvp(argv[1], &argv[1]);
    fprintf(stderr, "polar: cannot run %s: %s\n", argv[1], strerror(errno));
    return 127;
}

struct pump_args {
    int src, dst;
};

static int send_all(int fd, const char *buf, ssize_t len) {
    while (len > 0) {
        ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += n;
        len -= n;
    }
    return 0;
}

/* src -> dst until EOF, then half-close dst; a reset on either side ends both directions. */
static void pump(int src, int dst) {
    char *buf = malloc(CHUNK);
    if (!buf) goto reset;
    for (;;) {
        ssize_t n = recv(src, buf, CHUNK, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) goto reset;
        if (n == 0) break;
        if (send_all(dst, buf, n) < 0) goto reset;
    }
    free(buf);
    shutdown(dst, SHUT_WR);
    return;
reset:
    free(buf);
    shutdown(src, SHUT_RDWR);
    shutdown(dst, SHUT_RDWR);
}

static void *pump_thread(void *arg) {
    struct pump_args *a = arg;
    pump(a->src, a->dst);
    return NULL;
}

static void *splice_conn(void *arg) {
    int client = (int)(intptr_t)arg;
    int relay = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strncpy(addr.sun_path, sock_path, sizeof(addr.sun_path) - 1);
    if (relay < 0 || connect(relay, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        fprintf(stderr, "forwarder: cannot reach %s: %s\n", sock_path, strerror(errno));
        if (relay >= 0) close(relay);
        close(client);
        return NULL;
    }
    struct pump_args up = {client, relay};
    pthread_t thread;
    if (pthread_create(&thread, NULL, pump_thread, &up) != 0) {
        close(relay);
        close(client);
        return NULL;
    }
    pump(relay, client);
    pthread_join(thread, NULL); /* the other direction has ended too */
    close(relay);
    close(client);
    return NULL;
}

static void serve(int server) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (;;) {
        int client = accept4(server, NULL, NULL, SOCK_CLOEXEC);
        if (client < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
                continue;
            perror("forwarder: accept");
            return;
        }
        int one = 1; /* small writes go out at once */
        setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        pthread_t thread;
        if (pthread_create(&thread, &attr, splice_conn, (void *)(intptr_t)client) != 0)
            close(client);
    }
}

static void detach(const char *log) {
    int null = open("/dev/null", O_RDWR);
    int err = log ? open(log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600) : -1;
    if (err < 0) err = null;
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
    }
    if (err >= 0) dup2(err, 2);
}

static int run_forward(char **argv) {
    const char *host = "127.0.0.1", *log = NULL, *port_text = NULL;
    char **command = NULL;
    sock_path = NULL;
    for (int i = 0; argv[i]; i++) {
        if (!strcmp(argv[i], "--")) {
            command = argv[i + 1] ? &argv[i + 1] : NULL;
            break;
        }
        if (!argv[i + 1]) return usage();
        if (!strcmp(argv[i], "--socket")) sock_path = argv[++i];
        else if (!strcmp(argv[i], "--port")) port_text = argv[++i];
        else if (!strcmp(argv[i], "--host")) host = argv[++i];
        else if (!strcmp(argv[i], "--log")) log = argv[++i];
        else return usage();
    }
    char *end = NULL;
    long port = port_text ? strtol(port_text, &end, 10) : -1;
    if (!sock_path || !port_text || *end || port < 0 || port > 65535) return usage();

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    const char *why = NULL;
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) why = "not an IPv4 address";
    else if (server < 0) why = strerror(errno);
    else if (setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
             bind(server, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(server, 128) < 0)
        why = strerror(errno);
    if (why) {
        fprintf(stderr, "polar: the forwarder did not start on %s:%ld: %s\n", host, port, why);
        return 97;
    }
    if (command) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("polar: the forwarder could not fork");
            return 97;
        }
        if (pid > 0) { /* the command, in this process's place: the port already listens */
            close(server);
            execvp(command[0], command);
            fprintf(stderr, "polar: cannot run %s: %s\n", command[0], strerror(errno));
            return 127;
        }
        detach(log);
    }
    signal(SIGPIPE, SIG_IGN);
    if (strlen(sock_path) > 100) { /* past sun_path's 108 bytes: connect from its dir */
        char *copy = strdup(sock_path), *slash = strrchr(copy, '/');
        if (slash) {
            *slash = 0;
            if (chdir(*copy ? copy : "/") == 0) sock_path = strrchr(sock_path, '/') + 1;
        }
    }
    serve(server);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    if (!strcmp(argv[1], "setsid")) return run_setsid(&argv[2]);
    if (!strcmp(argv[1], "forward")) return run_forward(&argv[2]);
    if (!strcmp(argv[1], "runas")) return run_as(&argv[2]);
    return usage();
}
