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

/* A call the server accepted and did not answer: wait a little for a dying server, kill
 * what is left of the call's hooks, and say why in `lost`. Always 2 (see ask_server). */
static int lost_call(pid_t server, pid_t server_session, long long server_started,
                     const char *call_id, char *lost, size_t lost_size) {
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
    /* Which process the server is (its start time, against a pid used again later): read
     * while it works on the call, not before the call is sent. */
    if (server > 0) server_started = start_ticks(server);
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
    return lost_call(server, server_session, server_started, call_id, lost, lost_size);
}

/* ---- the fast path: a call the server answers, before the C library starts ----------- *
 *
 * Starting the C library costs more than the rest of a call: glibc's start-up asks the
 * CPU about its caches with a hundred `cpuid` instructions, each a trap to the hypervisor
 * on a virtual machine (0.18 ms a start on the reference machine, 15% of what relay adds
 * to a guard). On Linux x86-64 the program therefore starts at `relay_entry`:
 * with system calls alone, `relay_fast` reads the event, sends the call and, when the
 * server answers, prints the answer and exits. Anything else (no server, an answer it
 * must fall back from, an unusual environment) goes on as before: the stack is put back
 * as the kernel left it and the C library starts at `_start`, where `main` finds in
 * `fast` what was done already (the event read; the call refused or lost).
 *
 * Nothing here may call the C library, which is not set up yet (not even memcpy, which
 * the compiler may emit for a loop or a struct: hence the volatile copies).
 */
#if defined(__linux__) && defined(__x86_64__) /* other machines: untested, so not built */
#if defined(STATX_TYPE) /* a C library too old to name statx keeps the slow start */
#define RELAY_FAST 1
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <termios.h>

enum { FAST_UNTRIED, FAST_REFUSED, FAST_LOST };

static struct {
    int state;              /* FAST_REFUSED: ask_server would return 0; FAST_LOST: 2 */
    int have_event;         /* `event` holds stdin (read to its end) */
    char *event;
    size_t event_len;
    char call_id[33];       /* the call's id, when asked (state != FAST_UNTRIED) */
    pid_t server, server_session;
    long long server_started;
} fast;

static long fast_syscall(long n, long a, long b, long c, long d, long e, long f) {
    register long r10 __asm__("r10") = d, r8 __asm__("r8") = e, r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#define FSYS(n, a, b, c, d, e) \
    fast_syscall(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

static size_t fast_len(const char *s) {
    const volatile char *c = s; /* volatile: never turned into a call to strlen */
    size_t n = 0;
    while (c[n]) n++;
    return n;
}

static void fast_copy(char *to, const char *from, size_t len) {
    volatile char *out = to; /* volatile: never turned into a call to memcpy */
    for (size_t i = 0; i < len; i++) out[i] = from[i];
}

/* The value of `name` in `envp`, or NULL. */
static const char *fast_getenv(char **envp, const char *name) {
    size_t len = fast_len(name);
    for (char **e = envp; *e; e++) {
        size_t i = 0;
        while (i < len && (*e)[i] == name[i]) i++;
        if (i == len && (*e)[len] == '=') return *e + len + 1;
    }
    return NULL;
}

/* A text being built in a fixed array; `full` once it would not fit. */
typedef struct {
    char *data;
    size_t len, cap;
    int full;
} fast_text;

static void fast_add(fast_text *t, const char *data, size_t len) {
    if (t->full || t->len + len + 1 > t->cap) {
        t->full = 1;
        return;
    }
    fast_copy(t->data + t->len, data, len);
    t->len += len;
    t->data[t->len] = '\0';
}

static void fast_adds(fast_text *t, const char *s) { fast_add(t, s, fast_len(s)); }

static void fast_add_u32(fast_text *t, uint32_t value) {
    char bytes[4] = {(char)(value >> 24), (char)(value >> 16), (char)(value >> 8), (char)value};
    fast_add(t, bytes, 4);
}

static void fast_add_string(fast_text *t, const char *data, size_t len) {
    fast_add_u32(t, (uint32_t)len);
    fast_add(t, data, len);
}

static void fast_add_decimal(fast_text *t, unsigned long long value) {
    char digits[24];
    int n = 0;
    do digits[n++] = (char)('0' + value % 10); while ((value /= 10));
    while (n) fast_add(t, &digits[--n], 1);
}

/* join() above: `b` after `a`, with a slash unless `a` ends with one. */
static void fast_join(fast_text *t, const char *a, const char *b) {
    size_t len = fast_len(a);
    fast_add(t, a, len);
    if (!(len && a[len - 1] == '/')) fast_add(t, "/", 1);
    fast_adds(t, b);
}

static void fast_fnv1a64(const char *data, size_t len, char out[17]) {
    uint64_t value = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) {
        value ^= (unsigned char)data[i];
        value *= 0x100000001b3ULL;
    }
    for (int i = 15; i >= 0; i--, value >>= 4) out[i] = "0123456789abcdef"[value & 15];
    out[16] = '\0';
}

/* socket_path() above, into `out`; 0 when it needs what only the C library gives (the
 * home folder from the password database) or does not fit. */
static int fast_socket_path(char **envp, char *out, size_t size) {
    char base[4096], expanded[4096];
    fast_text b = {base, 0, sizeof base, 0}, x = {expanded, 0, sizeof expanded, 0};
    const char *home = fast_getenv(envp, "RELAY_HOME");
    const char *user = fast_getenv(envp, "HOME");
    if (home && *home) {
        if (home[0] == '~' && (home[1] == '\0' || home[1] == '/') && user && *user) {
            fast_adds(&x, user);
            fast_adds(&x, home + 1);
        } else {
            fast_adds(&x, home);
        }
        fast_join(&b, expanded, "state");
    } else {
        const char *runtime = fast_getenv(envp, "XDG_RUNTIME_DIR");
        if (runtime && runtime[0] == '/') {
            fast_join(&b, runtime, "agent-relay");
        } else {
            const char *state = fast_getenv(envp, "XDG_STATE_HOME");
            if (state && state[0] == '/') {
                fast_adds(&x, state);
            } else {
                if (!(user && *user)) return 0;
                fast_join(&x, user, ".local/state");
            }
            fast_join(&b, expanded, "agent-relay");
        }
    }
    char run[4200], tag[17], name[64];
    fast_text r = {run, 0, sizeof run, 0}, n = {name, 0, sizeof name, 0};
    fast_fnv1a64(RELAY_INSTALL, fast_len(RELAY_INSTALL), tag);
    fast_adds(&n, "serve-");
    fast_adds(&n, tag);
    fast_adds(&n, ".sock");
    fast_join(&r, base, "run");
    fast_text o = {out, 0, size, 0};
    fast_join(&o, run, name);
    if (b.full || x.full || r.full || n.full || o.full) return 0;
    if (o.len <= SOCKET_NAME_LIMIT) return 1;
    char whole[17];
    fast_fnv1a64(out, o.len, whole);
    o.len = 0;
    fast_adds(&o, "/tmp/agent-relay-");
    fast_add_decimal(&o, (unsigned long long)FSYS(SYS_getuid, 0, 0, 0, 0, 0));
    fast_adds(&o, "/serve-");
    fast_adds(&o, whole);
    fast_adds(&o, ".sock");
    return !o.full;
}

/* private_dir_ok() above; -1 when the kernel cannot say (no statx). */
static int fast_private_dir_ok(const char *path) {
    char folder[4200];
    size_t len = fast_len(path), slash = len;
    while (slash > 0 && path[slash - 1] != '/') slash--;
    if (slash == 0) {
        folder[0] = '.';
        folder[1] = '\0';
    } else {
        size_t keep = slash == 1 ? 1 : slash - 1;
        if (keep >= sizeof folder) return 0;
        fast_copy(folder, path, keep);
        folder[keep] = '\0';
    }
    struct statx st;
    long rc = FSYS(SYS_statx, AT_FDCWD, folder, AT_SYMLINK_NOFOLLOW,
                   STATX_TYPE | STATX_MODE | STATX_UID, &st);
    if (rc == -ENOSYS) return -1;
    if (rc) return 0;
    return S_ISDIR(st.stx_mode) && st.stx_uid == (uint32_t)FSYS(SYS_getuid, 0, 0, 0, 0, 0) &&
           (st.stx_mode & 077) == 0;
}

/* A growable buffer in memory of its own (the C library's allocator is not set up). */
static int fast_reserve(char **data, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t cap2 = *cap ? *cap : 1 << 16;
    while (cap2 < need) cap2 *= 2;
    long got = *data ? FSYS(SYS_mremap, *data, *cap, cap2, MREMAP_MAYMOVE, 0)
                     : fast_syscall(SYS_mmap, 0, (long)cap2, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (got < 0 && got > -4096) return -1;
    *data = (char *)got;
    *cap = cap2;
    return 0;
}

static int64_t fast_now_ms(void) {
    struct timespec ts;
    FSYS(SYS_clock_gettime, CLOCK_MONOTONIC, &ts, 0, 0, 0);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fast_wait(int fd, short events, int64_t ms) {
    struct pollfd p;
    p.fd = fd;
    p.events = events;
    p.revents = 0;
    struct timespec limit;
    limit.tv_sec = ms / 1000;
    limit.tv_nsec = (ms % 1000) * 1000000;
    return (int)FSYS(SYS_ppoll, &p, 1, &limit, 0, 0);
}

static int fast_write_all(int fd, const char *data, size_t len) {
    while (len) {
        long n = FSYS(SYS_write, fd, data, len, 0, 0);
        if (n == -EINTR) continue;
        if (n == -EAGAIN) {
            if (fast_wait(fd, POLLOUT, ACK_TIMEOUT_MS) <= 0) return -1;
            continue;
        }
        if (n < 0) return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The request's two parts in one writev (a reader sees them as one write, as the C
 * library's client sends them), and then the rest as it drains. */
static int fast_send(int fd, const char *head, size_t head_len, const char *tail, size_t tail_len) {
    struct iovec parts[2];
    parts[0].iov_base = (void *)head;
    parts[0].iov_len = head_len;
    parts[1].iov_base = (void *)tail;
    parts[1].iov_len = tail_len;
    long n;
    do n = FSYS(SYS_writev, fd, parts, 2, 0, 0);
    while (n == -EINTR);
    if (n == -EAGAIN) n = 0;
    if (n < 0) return -1;
    if ((size_t)n < head_len)
        return fast_write_all(fd, head + n, head_len - (size_t)n) ||
               fast_write_all(fd, tail, tail_len);
    return fast_write_all(fd, tail + (n - head_len), tail_len - (size_t)(n - head_len));
}

static int fast_read_exactly(int fd, char *out, size_t len, int64_t deadline) {
    while (len) {
        int64_t left = deadline - fast_now_ms();
        if (left <= 0) return -1;
        int ready = fast_wait(fd, POLLIN, left);
        if (ready == -EINTR) continue;
        if (ready <= 0) return -1;
        long n = FSYS(SYS_read, fd, out, len, 0, 0);
        if (n == -EINTR || n == -EAGAIN) continue;
        if (n <= 0) return -1;
        out += n;
        len -= (size_t)n;
    }
    return 0;
}

/* start_ticks() above. */
static long long fast_start_ticks(pid_t pid) {
    char name[64], text[1024];
    fast_text t = {name, 0, sizeof name, 0};
    fast_adds(&t, "/proc/");
    fast_add_decimal(&t, (unsigned long long)pid);
    fast_adds(&t, "/stat");
    long fd = FSYS(SYS_openat, AT_FDCWD, name, O_RDONLY | O_CLOEXEC, 0, 0);
    if (fd < 0) return -1;
    long n = FSYS(SYS_read, fd, text, sizeof text - 1, 0, 0);
    FSYS(SYS_close, fd, 0, 0, 0, 0);
    if (n <= 0) return -1;
    text[n] = '\0';
    char *field = NULL;
    for (char *c = text; *c; c++)
        if (*c == ')') field = c;
    if (!field) return -1;
    if (field[1] == ' ' && field[2] == 'Z') return -2;
    for (int i = 3; i <= 22; i++) {
        field++;
        while (*field && *field != ' ') field++;
        if (!*field) return -1;
    }
    long long value = 0;
    for (field++; *field >= '0' && *field <= '9'; field++) value = value * 10 + (*field - '0');
    return value;
}

/* ask_server() above, up to its answer: exits with the server's answer, or returns with
 * `fast.state` saying what main must do. */
static void fast_ask(int argc, char **argv, char **envp, const char *path) {
    fast.state = FAST_REFUSED;
    struct sockaddr_un address;
    size_t path_len = fast_len(path);
    if (path_len >= sizeof address.sun_path) return;
    address.sun_family = AF_UNIX;
    fast_copy(address.sun_path, path, path_len + 1);
    long fd = FSYS(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, 0, 0);
    if (fd < 0) return;
    pid_t server = 0, server_session = -1;
    long long server_started = -1;
    int accepted = 0;
    char *request = NULL, *payload = NULL;
    size_t request_cap = 0, payload_cap = 0;
    if (FSYS(SYS_connect, fd, &address, sizeof address, 0, 0)) goto fail;
    struct ucred peer;
    socklen_t peer_len = sizeof peer;
    if (FSYS(SYS_getsockopt, fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) ||
        peer.uid != (uid_t)FSYS(SYS_getuid, 0, 0, 0, 0, 0))
        goto fail;
    server = peer.pid;
    long session = FSYS(SYS_getsid, server, 0, 0, 0, 0);
    server_session = session < 0 ? -1 : (pid_t)session;
    char cwd[4096];
    long got = FSYS(SYS_getcwd, cwd, sizeof cwd, 0, 0, 0);
    if (got <= 0 || cwd[0] != '/') {
        cwd[0] = '/';
        cwd[1] = '\0';
    }
    /* The request up to the event, sized first: the environment with this call's id, as
     * one block of entries joined by NULs (RELAY-CALL 2). The id takes the place of an
     * entry of that name, as setenv() does, else comes last: the server then knows the
     * rest of the block from the calls before (relay/server/client.py, _environment). */
    size_t need = 64 + fast_len(RELAY_INSTALL) + fast_len(cwd) + fast_len(CALL_ID_VARIABLE) + 40;
    for (int i = 1; i < argc; i++) need += 4 + fast_len(argv[i]);
    size_t id_len = fast_len(CALL_ID_VARIABLE);
    char id_entry[64];
    fast_text id = {id_entry, 0, sizeof id_entry, 0};
    fast_adds(&id, CALL_ID_VARIABLE);
    fast_adds(&id, "=");
    fast_adds(&id, fast.call_id);
    char **own = NULL; /* the entry the id replaces, if any */
    size_t env_len = 0;
    for (char **e = envp; *e; e++) {
        size_t i = 0;
        while (i < id_len && (*e)[i] == CALL_ID_VARIABLE[i]) i++;
        if (!own && i == id_len && (*e)[id_len] == '=') own = e;
        env_len += (e != envp) + (e == own ? id.len : fast_len(*e));
    }
    if (!own) env_len += (envp[0] != NULL) + id.len;
    need += env_len;
    if (fast_reserve(&request, &request_cap, need)) goto fail;
    fast_text t = {request, 0, request_cap, 0};
    fast_adds(&t, "RELAY-CALL 2\n");
    fast_add_string(&t, RELAY_INSTALL, fast_len(RELAY_INSTALL));
    fast_add_u32(&t, (uint32_t)(argc - 1));
    for (int i = 1; i < argc; i++) fast_add_string(&t, argv[i], fast_len(argv[i]));
    fast_add_string(&t, cwd, fast_len(cwd));
    fast_add_u32(&t, (uint32_t)env_len);
    for (char **e = envp; *e; e++) {
        if (e != envp) fast_add(&t, "", 1);
        if (e == own) fast_add(&t, id_entry, id.len);
        else fast_add(&t, *e, fast_len(*e));
    }
    if (!own) {
        if (envp[0] != NULL) fast_add(&t, "", 1);
        fast_add(&t, id_entry, id.len);
    }
    fast_add_u32(&t, (uint32_t)fast.event_len);
    if (t.full || fast_send((int)fd, t.data, t.len, fast.event, fast.event_len)) goto fail;
    FSYS(SYS_shutdown, fd, SHUT_WR, 0, 0, 0);
    server_started = fast_start_ticks(server); /* as ask_server: once the call is sent */
    int64_t deadline = fast_now_ms() + ACK_TIMEOUT_MS;
    for (;;) {
        char head[5];
        if (fast_read_exactly((int)fd, head, 5, deadline)) goto fail;
        uint32_t len = get_u32(head + 1);
        if (len > MAX_FRAME || fast_reserve(&payload, &payload_cap, len ? len : 1) ||
            fast_read_exactly((int)fd, payload, len, deadline))
            goto fail;
        if (head[0] == 'A' && len >= 4) {
            accepted = 1;
            deadline = fast_now_ms() + get_u32(payload) + RESULT_SLACK_MS;
            continue;
        }
        if (head[0] != 'R' || len < 8) goto fail;
        uint32_t out_len = get_u32(payload + 4);
        if ((uint64_t)out_len + 12 > len) goto fail;
        uint32_t err_len = get_u32(payload + 8 + out_len);
        if ((uint64_t)out_len + err_len + 12 > len) goto fail;
        fast_write_all(STDOUT_FILENO, payload + 8, out_len);
        fast_write_all(STDERR_FILENO, payload + 12 + out_len, err_len);
        FSYS(SYS_exit_group, (int32_t)get_u32(payload), 0, 0, 0, 0);
    }
fail:
    FSYS(SYS_close, fd, 0, 0, 0, 0);
    if (request) FSYS(SYS_munmap, request, request_cap, 0, 0, 0);
    if (payload) FSYS(SYS_munmap, payload, payload_cap, 0, 0, 0);
    if (!accepted) return;
    fast.state = FAST_LOST;
    fast.server = server;
    fast.server_session = server_session;
    fast.server_started = server_started;
}

static void fast_ignore(int signum) {
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        unsigned long mask;
    } action;
    action.handler = (void *)1; /* SIG_IGN */
    action.flags = 0;
    action.restorer = 0;
    action.mask = 0;
    FSYS(SYS_rt_sigaction, signum, &action, 0, sizeof action.mask, 0);
}

/* Called by relay_entry with the stack the kernel made (argc, argv, NULL, envp, NULL, …);
 * returns for the C library to start. */
__attribute__((used)) void relay_fast(long *stack) {
    int argc = (int)stack[0];
    char **argv = (char **)(stack + 1), **envp = argv + argc + 1;
    if (argc == 2) {
        const char *info = "--relay-client-info", *arg = argv[1];
        size_t i = 0;
        while (info[i] && arg[i] == info[i]) i++;
        if (!info[i] && !arg[i]) return;
    }
    fast_ignore(SIGPIPE);
    fast_ignore(SIGXFSZ);
    /* The event: read_event() above. */
    struct termios mode;
    if (FSYS(SYS_ioctl, STDIN_FILENO, TCGETS, &mode, 0, 0) != 0) {
        size_t cap = 0;
        for (;;) {
            if (fast_reserve(&fast.event, &cap, fast.event_len + 65536)) return;
            long n = FSYS(SYS_read, STDIN_FILENO, fast.event + fast.event_len,
                          cap - fast.event_len, 0, 0);
            if (n == -EINTR) continue;
            if (n <= 0) break;
            fast.event_len += (size_t)n;
        }
    }
    fast.have_event = 1;
    char path[4200];
    unsigned char bytes[16];
    if (!fast_socket_path(envp, path, sizeof path) ||
        FSYS(SYS_getrandom, bytes, sizeof bytes, 0, 0, 0) != (long)sizeof bytes)
        return;
    for (size_t i = 0; i < sizeof bytes; i++) {
        fast.call_id[2 * i] = "0123456789abcdef"[bytes[i] >> 4];
        fast.call_id[2 * i + 1] = "0123456789abcdef"[bytes[i] & 15];
    }
    fast.call_id[32] = '\0';
    int private = fast_private_dir_ok(path);
    if (private < 0) return;
    if (!private) {
        fast.state = FAST_REFUSED;
        return;
    }
    fast_ask(argc, argv, envp, path);
}
#else
__attribute__((used)) void relay_fast(long *stack) { (void)stack; }
#endif

/* The program's entry (the build links with -e relay_entry): relay_fast on the kernel's
 * stack, then the C library's own entry with that stack and register as they were. */
__asm__(".text\n"
        ".globl relay_entry\n"
        ".type relay_entry, @function\n"
        "relay_entry:\n"
        "    mov %rsp, %r12\n"
        "    mov %rdx, %r13\n"
        "    mov %rsp, %rdi\n"
        "    call relay_fast\n"
        "    mov %r12, %rsp\n"
        "    mov %r13, %rdx\n"
        "    jmp _start\n");
#endif

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
    char path[4200], call_id[33], lost[512];
    int code = 0, asked = -1;
#ifdef RELAY_FAST
    if (fast.have_event) {
        event.data = fast.event;
        event.len = event.cap = fast.event_len;
    } else {
        /* The fast path could not hold all of stdin: what it read, then the rest. */
        if (fast.event_len && append(&event, fast.event, fast.event_len)) event.len = 0;
        read_event(&event);
    }
    socket_path(path, sizeof path);
    if (fast.state != FAST_UNTRIED) {
        memcpy(call_id, fast.call_id, sizeof call_id);
        setenv(CALL_ID_VARIABLE, call_id, 1);
        if (fast.state == FAST_REFUSED) asked = 0;
        else
            asked = lost_call(fast.server, fast.server_session, fast.server_started, call_id,
                              lost, sizeof lost);
    }
#else
    read_event(&event);
    socket_path(path, sizeof path);
#endif
    if (asked < 0) {
        new_call_id(call_id);
        setenv(CALL_ID_VARIABLE, call_id, 1); /* the hooks of this call carry it */
        asked = ask_server(path, argc, argv, &event, &code, call_id, lost, sizeof lost);
    }
    if (asked == 1) return code;
    start_server(path);
    signal(SIGPIPE, SIG_DFL);
    if (asked == 2) {
        setenv(LOST_VARIABLE, lost, 1);
        return run_here(argc, argv, &event, NULL);
    }
    return run_here(argc, argv, &event, call_id);
}
