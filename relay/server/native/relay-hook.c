/*
 * relay-hook: the native hook client that `relay install` writes into a host's settings.
 *
 * It forwards one `relay hooks run` call (arguments, working directory, environment and
 * stdin) to the user's `relay serve` over a private Unix socket, prints the answer and
 * exits with its code. When no server accepts the call in time it starts one for the next
 * call and runs this one in-process: it execs `PYTHON -I -m relay hooks run ARGS` with the
 * event on stdin, which answers exactly as the server would.
 *
 * The protocol and the socket's place are those of relay/server/client.py (the Python
 * client); keep the two in step. Built by relay/server/build.py with a generated header
 * that defines RELAY_PYTHON (the interpreter relay is installed for) and RELAY_INSTALL
 * (the install's identity, "VERSION:PACKAGE_DIR").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "relay-hook-config.h" /* generated: RELAY_PYTHON, RELAY_INSTALL */

#define ACK_TIMEOUT_MS 2000
#define RESULT_SLACK_MS 2000
#define SOCKET_NAME_LIMIT 100
#define SPAWN_INTERVAL 5
#define DYING_WAIT_MS 3000
#define MAX_FRAME (128u << 20)
#define CALL_ID_VARIABLE "RELAY_CALL_ID"
#define LOST_VARIABLE "RELAY_CALL_LOST"
#define MAX_ENVIRON (8u << 20)

extern char **environ;

/* ---- a growable byte buffer ---------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} buffer;

static int reserve(buffer *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more) cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int append(buffer *b, const void *data, size_t len) {
    if (reserve(b, len)) return -1;
    memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

static int append_u32(buffer *b, uint32_t value) {
    unsigned char bytes[4] = {value >> 24, value >> 16, value >> 8, value};
    return append(b, bytes, 4);
}

static int append_string(buffer *b, const char *data, size_t len) {
    return append_u32(b, (uint32_t)len) || append(b, data, len);
}

/* ---- where the server listens (client.py: socket_path) ------------------------------- */

static const char *fnv1a64(const char *data, size_t len, char out[17]) {
    uint64_t value = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) {
        value ^= (unsigned char)data[i];
        value *= 0x100000001b3ULL;
    }
    snprintf(out, 17, "%016llx", (unsigned long long)value);
    return out;
}

static const char *user_home(void) {
    const char *home = getenv("HOME");
    if (home && *home) return home;
    struct passwd *entry = getpwuid(getuid());
    return entry ? entry->pw_dir : "/";
}

/* os.path.join(a, b) for a non-empty relative b. */
static void join(char *out, size_t size, const char *a, const char *b) {
    size_t len = strlen(a);
    snprintf(out, size, "%s%s%s", a, (len && a[len - 1] == '/') ? "" : "/", b);
}

static void state_base(char *out, size_t size) {
    char expanded[4096];
    const char *home = getenv("RELAY_HOME");
    if (home && *home) {
        if (home[0] == '~' && (home[1] == '\0' || home[1] == '/') && getenv("HOME") && *getenv("HOME"))
            snprintf(expanded, sizeof expanded, "%s%s", getenv("HOME"), home + 1);
        else
            snprintf(expanded, sizeof expanded, "%s", home);
        join(out, size, expanded, "state");
        return;
    }
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    if (runtime && runtime[0] == '/') {
        join(out, size, runtime, "agent-relay");
        return;
    }
#ifdef __APPLE__
    join(expanded, sizeof expanded, user_home(), "Library/Application Support");
#else
    const char *state = getenv("XDG_STATE_HOME");
    if (state && state[0] == '/')
        snprintf(expanded, sizeof expanded, "%s", state);
    else
        join(expanded, sizeof expanded, user_home(), ".local/state");
#endif
    join(out, size, expanded, "agent-relay");
}

static void socket_path(char *out, size_t size) {
    char base[4096], tag[17], name[64], run[4200];
    state_base(base, sizeof base);
    fnv1a64(RELAY_INSTALL, strlen(RELAY_INSTALL), tag);
    snprintf(name, sizeof name, "serve-%s.sock", tag);
    join(run, sizeof run, base, "run");
    join(out, size, run, name);
    if (strlen(out) <= SOCKET_NAME_LIMIT) return;
    char whole[17];
    fnv1a64(out, strlen(out), whole);
    snprintf(out, size, "/tmp/agent-relay-%u/serve-%s.sock", (unsigned)getuid(), whole);
}

static int private_dir_ok(const char *folder) {
    struct stat st;
    if (lstat(folder, &st)) return 0;
    return S_ISDIR(st.st_mode) && st.st_uid == getuid() && (st.st_mode & 077) == 0;
}

static void parent_of(const char *path, char *out, size_t size) {
    snprintf(out, size, "%s", path);
    char *slash = strrchr(out, '/');
    if (slash == out) slash[1] = '\0';
    else if (slash) *slash = '\0';
    else snprintf(out, size, ".");
}

/* mkdir -p, the last folder private (os.makedirs(mode=0o700) does the same). */
static int make_private_dir(const char *folder) {
    char path[4096];
    snprintf(path, sizeof path, "%s", folder);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0777) && errno != EEXIST) return 0;
        *p = '/';
    }
    if (mkdir(path, 0700) && errno != EEXIST) return 0;
    return private_dir_ok(path);
}

/* ---- talking to the server ----------------------------------------------------------- */

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int write_all(int fd, const char *data, size_t len) {
    while (len) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                struct pollfd p = {fd, POLLOUT, 0};
                if (poll(&p, 1, ACK_TIMEOUT_MS) <= 0) return -1;
                continue;
            }
            return -1;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read exactly len bytes before the deadline. */
static int read_exactly(int fd, char *out, size_t len, int64_t deadline) {
    while (len) {
        int64_t left = deadline - now_ms();
        if (left <= 0) return -1;
        struct pollfd p = {fd, POLLIN, 0};
        int ready = poll(&p, 1, left > 0x7fffffff ? 0x7fffffff : (int)left);
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) return -1;
        ssize_t n = read(fd, out, len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return -1;
        out += n;
        len -= (size_t)n;
    }
    return 0;
}

static uint32_t get_u32(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

/* ---- the hooks of a call whose runner died (client.py: kill_call) --------------------- */

/* A fresh call id (32 hex digits) into `out`. */
static void new_call_id(char out[33]) {
    unsigned char bytes[16];
    if (getrandom(bytes, sizeof bytes, 0) != (ssize_t)sizeof bytes) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t mix = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_sec;
        for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (unsigned char)(mix >> (8 * (i % 8)) ^ i * 131);
    }
    for (size_t i = 0; i < sizeof bytes; i++) snprintf(out + 2 * i, 3, "%02x", bytes[i]);
}

/* When `pid` started (clock ticks since boot); -2 for a zombie; -1 when unknown. */
static long long start_ticks(pid_t pid) {
    char name[64], text[1024];
    snprintf(name, sizeof name, "/proc/%d/stat", (int)pid);
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return -1;
    text[n] = '\0';
    char *field = strrchr(text, ')');
    if (!field) return -1;
    if (field[1] == ' ' && field[2] == 'Z') return -2; /* a zombie: it has ended */
    /* after ")": state is field 3; starttime is field 22 */
    for (int i = 3; i <= 22 && field; i++) field = strchr(field + 1, ' ');
    return field ? atoll(field + 1) : -1;
}

static int process_alive(pid_t pid, long long started) {
    if (kill(pid, 0)) return 0; /* ESRCH, or EPERM: another user's process, the pid reused */
    long long ticks = start_ticks(pid);
    return ticks != -2 && (started < 0 || ticks < 0 || ticks == started);
}

/* Whether /proc/PID/environ holds "\0MARKER\0" (marker given with its NULs). */
static int environ_holds(const char *name, const char *marker, size_t marker_len) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%s/environ", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    buffer text = {0};
    int found = append(&text, "", 1) == 0; /* a NUL before the first entry */
    while (found && text.len < MAX_ENVIRON) {
        if (reserve(&text, 65536)) break;
        ssize_t n = read(fd, text.data + text.len, text.cap - text.len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text.len += (size_t)n;
    }
    close(fd);
    found = found && memmem(text.data, text.len, marker, marker_len) != NULL;
    free(text.data);
    return found;
}

/* SIGKILL this user's processes in `session` whose environment holds the call's id: a
 * hook and what it started, not what went to a session of its own. How many. */
static int kill_call(const char *call_id, pid_t session) {
    char marker[128];
    int marker_len = snprintf(marker, sizeof marker, "%c%s=%s%c", 0, CALL_ID_VARIABLE, call_id, 0);
    /* Those already sent SIGKILL: one still dying is seen again by a later pass, and is
     * neither killed twice nor counted twice. */
    static pid_t signalled[4096];
    int killed = 0;
    for (int pass = 0; pass < 3; pass++) { /* a hook may fork while it is being killed */
        DIR *proc = opendir("/proc");
        if (!proc) return killed;
        int found = 0;
        struct dirent *entry;
        while ((entry = readdir(proc))) {
            if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
            pid_t pid = (pid_t)atoi(entry->d_name);
            if (pid == getpid() || getsid(pid) != session) continue;
            int seen = 0;
            for (int i = 0; i < killed && i < (int)(sizeof signalled / sizeof *signalled); i++)
                if (signalled[i] == pid) seen = 1;
            if (seen) continue;
            char path[64];
            struct stat st;
            snprintf(path, sizeof path, "/proc/%s", entry->d_name);
            if (stat(path, &st) || st.st_uid != getuid()) continue;
            if (!environ_holds(entry->d_name, marker, (size_t)marker_len)) continue;
            if (start_ticks(pid) == -2) continue; /* a zombie: it has ended */
            if (!kill(pid, SIGKILL)) {
                if (killed < (int)(sizeof signalled / sizeof *signalled)) signalled[killed] = pid;
                killed++;
                found++;
            }
        }
        closedir(proc);
        if (!found) break;
    }
    return killed;
}

/* A watcher for the call this process is about to run itself: when this process ends,
 * however (the host may kill it), it kills what is left of the call's hooks in this
 * process's session (nothing, when relay ended as it should). Detached. */
static void watch_call(const char *call_id) {
    pid_t session = getsid(0);
    int fds[2];
    if (pipe(fds)) return; /* the write end stays open in the relay exec'd here */
    pid_t child = fork();
    if (child < 0) {
        close(fds[0]);
        close(fds[1]);
        return;
    }
    if (child > 0) {
        close(fds[0]);
        waitpid(child, NULL, 0);
        return;
    }
    setsid(); /* signals to the host's process group do not reach it */
    if (fork() != 0) _exit(0);
    if (chdir("/")) { /* holds no folder of the host's; staying put is harmless */
    }
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    for (int fd = 3; fd < 1024; fd++)
        if (fd != fds[0]) close(fd);
    char byte;
    for (;;) { /* until the relay exec'd in the client's place ends */
        ssize_t n = read(fds[0], &byte, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
    }
    kill_call(call_id, session);
    _exit(0);
}

/* The server's answer: 1 when printed (exit code in *code), 0 to run the call here, 2 when
 * the server accepted it and gave no result (`lost` says why): not to be run again. */
static int ask_server(const char *path, int argc, char **argv, const buffer *event, int *code,
                      const char *call_id, char *lost, size_t lost_size) {
    pid_t server = 0, server_session = -1;
    long long server_started = -1;
    int accepted = 0;
    char folder[4200];
    parent_of(path, folder, sizeof folder);
    if (!private_dir_ok(folder)) return 0;
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof address.sun_path) return 0;
    strcpy(address.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return 0;
    if (connect(fd, (struct sockaddr *)&address, sizeof address)) goto fail;
#ifdef SO_PEERCRED
    struct ucred peer;
    socklen_t peer_len = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) || peer.uid != getuid()) goto fail;
    server = peer.pid;
    server_session = getsid(server);
    server_started = start_ticks(server);
#endif
    buffer request = {0};
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "/");
    size_t env_len = 0; /* the entries joined by NULs */
    for (char **e = environ; *e; e++) env_len += strlen(*e) + (e != environ);
    int bad = append(&request, "RELAY-CALL 2\n", 13)
        || append_string(&request, RELAY_INSTALL, strlen(RELAY_INSTALL))
        || append_u32(&request, (uint32_t)(argc - 1));
    for (int i = 1; i < argc && !bad; i++) bad = append_string(&request, argv[i], strlen(argv[i]));
    bad = bad || append_string(&request, cwd, strlen(cwd)) || append_u32(&request, (uint32_t)env_len);
    for (char **e = environ; *e && !bad; e++)
        bad = (e != environ && append(&request, "", 1)) || append(&request, *e, strlen(*e));
    bad = bad || append_string(&request, event->data ? event->data : "", event->len);
    if (bad || write_all(fd, request.data, request.len)) {
        free(request.data);
        goto fail;
    }
    free(request.data);
    shutdown(fd, SHUT_WR);
    int64_t deadline = now_ms() + ACK_TIMEOUT_MS;
    for (;;) {
        char head[5];
        if (read_exactly(fd, head, 5, deadline)) goto fail;
        uint32_t len = get_u32(head + 1);
        if (len > MAX_FRAME) goto fail;
        char *payload = malloc(len ? len : 1);
        if (!payload || read_exactly(fd, payload, len, deadline)) {
            free(payload);
            goto fail;
        }
        if (head[0] == 'A' && len >= 4) {
            accepted = 1;
            deadline = now_ms() + get_u32(payload) + RESULT_SLACK_MS;
            free(payload);
            continue;
        }
        if (head[0] != 'R' || len < 8) {
            free(payload);
            goto fail;
        }
        uint32_t out_len = get_u32(payload + 4);
        if ((uint64_t)out_len + 12 > len) {
            free(payload);
            goto fail;
        }
        uint32_t err_len = get_u32(payload + 8 + out_len);
        if ((uint64_t)out_len + err_len + 12 > len) {
            free(payload);
            goto fail;
        }
        *code = (int32_t)get_u32(payload);
        write_all(STDOUT_FILENO, payload + 8, out_len);
        write_all(STDERR_FILENO, payload + 12 + out_len, err_len);
        free(payload);
        close(fd);
        return 1;
    }
fail:
    close(fd);
    if (!accepted) return 0;
    /* The socket closes as a killed server begins to exit, before it is done: give it
     * a few seconds to be seen gone (a loaded machine can take more than one). */
    int64_t dying = now_ms() + DYING_WAIT_MS;
    while (server > 0 && process_alive(server, server_started) && now_ms() < dying) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    /* Whatever became of the server, nothing will read what is left of the call's hooks:
     * they are killed either way (a living server past its deadline would kill them too). */
    /* A session id of 0 is real: a session whose leader is outside this PID namespace (a
     * container's processes see theirs so). Only -1 is getsid's failure. */
    int killed = server > 0 && server_session != -1 ? kill_call(call_id, server_session) : 0;
    if (server > 0 && !process_alive(server, server_started)) {
        snprintf(lost, lost_size,
                 "relay's server (pid %d) stopped in the middle of this call (killed %d of its "
                 "hook processes); its hooks may have run in part, so relay does not run them again",
                 (int)server, killed);
    } else {
        snprintf(lost, lost_size,
                 "relay's server accepted this call and gave no result in time (killed %d of its "
                 "hook processes); its hooks may have run in part, so relay does not run them again",
                 killed);
    }
    return 2;
}

/* ---- when no server answers ---------------------------------------------------------- */

/* Whether this process may write only so much to a file (`ulimit -f`): then no server is
 * started (it would keep the limit for every later call, its hook log cut short) and
 * Python writes no bytecode (CPython writes a .pyc cut short at the limit and replaces the
 * good one with it: every later import of that module fails). */
static int file_size_limited(void) {
    struct rlimit limit;
    return !getrlimit(RLIMIT_FSIZE, &limit) && limit.rlim_cur != RLIM_INFINITY;
}

/* Start `relay serve` for `path`, detached, at most once per SPAWN_INTERVAL. */
static void start_server(const char *path) {
    if (file_size_limited()) return;
    char folder[4200], stamp[4300];
    parent_of(path, folder, sizeof folder);
    if (!make_private_dir(folder)) return;
    snprintf(stamp, sizeof stamp, "%s.spawned", path);
    struct stat st;
    if (!stat(stamp, &st) && time(NULL) - st.st_mtime < SPAWN_INTERVAL) return;
    int touched = open(stamp, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (touched < 0) return;
    futimens(touched, NULL);
    close(touched);
    pid_t child = fork();
    if (child < 0) return;
    if (child > 0) {
        waitpid(child, NULL, 0);
        return;
    }
    setsid();
    if (fork() != 0) _exit(0);
    unsetenv(CALL_ID_VARIABLE); /* this call's, not the server's */
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    for (int fd = 3; fd < 1024; fd++) close(fd);
    execl(RELAY_PYTHON, RELAY_PYTHON, "-I", "-m", "relay", "serve", "--socket", path, (char *)NULL);
    _exit(127);
}

static void print_json_string(FILE *out, const char *text) {
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(out, "\\%c", *c);
        else if (*c < 0x20) fprintf(out, "\\u%04x", *c);
        else fputc(*c, out);
    }
    fputc('"', out);
}

static int host_dialect(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *value = NULL;
        if (!strcmp(argv[i], "--dialect") && i + 1 < argc) value = argv[i + 1];
        else if (!strncmp(argv[i], "--dialect=", 10)) value = argv[i] + 10;
        if (value) return strcmp(value, "relay") != 0;
    }
    return 0;
}

/* A pipe whose read end gives `event`, written by a process of its own (detached, so the
 * relay that execs here has no child it did not start): for when no file can hold it. */
static int event_pipe(const buffer *event) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) return -1;
    pid_t child = fork();
    if (child < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (child == 0) {
        close(fds[0]);
        if (fork() == 0) {
            signal(SIGPIPE, SIG_DFL); /* the reader gone: nothing left to do */
            write_all(fds[1], event->data ? event->data : "", event->len);
            _exit(0);
        }
        _exit(0);
    }
    close(fds[1]);
    waitpid(child, NULL, 0);
    return fds[0];
}

/* A descriptor that reads as `event` from its start: a memfd, else a temporary file, else
 * (the file size limit reached, a full disk) a pipe. */
static int event_input(const buffer *event) {
    int fd = -1;
#ifdef MFD_CLOEXEC
    fd = memfd_create("relay-event", MFD_CLOEXEC);
#endif
    if (fd < 0) {
        FILE *file = tmpfile();
        fd = file ? fcntl(fileno(file), F_DUPFD_CLOEXEC, 0) : -1;
        if (file) fclose(file);
    }
    if (fd >= 0 && (write_all(fd, event->data ? event->data : "", event->len) || lseek(fd, 0, SEEK_SET))) {
        close(fd);
        fd = -1;
    }
    return fd >= 0 ? fd : event_pipe(event);
}

/* Run the call in this process's place: relay itself, with the event on stdin (watched
 * by `watch_call` when `call_id` is given). */
static int run_here(int argc, char **argv, const buffer *event, const char *call_id) {
    int fd = event_input(event);
    if (fd >= 0) dup2(fd, STDIN_FILENO); /* dup2 clears close-on-exec on stdin */
    if (call_id) watch_call(call_id);
    char **args = calloc((size_t)argc + 7, sizeof *args);
    if (args) {
        int n = 0;
        args[n++] = (char *)RELAY_PYTHON;
        args[n++] = "-I";
        if (file_size_limited()) args[n++] = "-B";
        args[n++] = "-m";
        args[n++] = "relay";
        args[n++] = "hooks";
        args[n++] = "run";
        for (int i = 1; i < argc; i++) args[n++] = argv[i];
        execv(RELAY_PYTHON, args);
    }
    /* relay cannot run at all: say so where the user sees it, and fail open. */
    char message[4600];
    snprintf(message, sizeof message,
             "relay: cannot run %s (%s); reinstall relay and run `relay install` again",
             RELAY_PYTHON, strerror(errno));
    if (host_dialect(argc, argv)) {
        printf("{\"systemMessage\": ");
        print_json_string(stdout, message);
        printf("}\n");
        return 0;
    }
    fprintf(stderr, "%s\n", message);
    return 1;
}

static void read_event(buffer *event) {
    if (isatty(STDIN_FILENO)) return;
    for (;;) {
        if (reserve(event, 65536)) return;
        ssize_t n = read(STDIN_FILENO, event->data + event->len, event->cap - event->len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        event->len += (size_t)n;
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--relay-client-info")) {
        char path[4200];
        socket_path(path, sizeof path);
        printf("{\"install\": ");
        print_json_string(stdout, RELAY_INSTALL);
        printf(", \"python\": ");
        print_json_string(stdout, RELAY_PYTHON);
        printf(", \"socket\": ");
        print_json_string(stdout, path);
        printf("}\n");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    /* A write past `ulimit -f` fails (EFBIG) instead of killing the client (SIGXFSZ): the
     * event then goes through a pipe. relay's Python ignores SIGXFSZ too; hooks get it back. */
    signal(SIGXFSZ, SIG_IGN);
    buffer event = {0};
    read_event(&event);
    char path[4200], call_id[33], lost[512];
    socket_path(path, sizeof path);
    new_call_id(call_id);
    setenv(CALL_ID_VARIABLE, call_id, 1); /* the hooks of this call carry it */
    int code = 0;
    int asked = ask_server(path, argc, argv, &event, &code, call_id, lost, sizeof lost);
    if (asked == 1) return code;
    start_server(path);
    signal(SIGPIPE, SIG_DFL);
    if (asked == 2) {
        setenv(LOST_VARIABLE, lost, 1);
        return run_here(argc, argv, &event, NULL);
    }
    return run_here(argc, argv, &event, call_id);
}
