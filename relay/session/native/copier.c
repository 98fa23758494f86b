/* relay's output copier: the agent's output to the human's terminal, and to relay's loop.
 *
 * The native form of relay.session.copier.COPIER, the same loop without an interpreter
 * between the two calls that the human waits on: a read of the PTY master, then a
 * blocking write of what it gave to the terminal. What was shown also gathers in a block
 * that goes to relay's event loop through a pipe (the sink): when BATCH bytes have
 * gathered, when the output pauses for QUIET_MS, and at the latest MOST seconds after
 * the block's first byte reached the terminal.
 *
 * Usage: relay-copier MASTER TERMINAL SINK LIFELINE BATCH QUIET_MS MOST
 * (file descriptors it inherits; TERMINAL -1 copies to the sink alone).
 *
 * It ends when the agent's side of the PTY is closed (EIO), when the lifeline is closed
 * or ready (relay stopped the copy, or died), or when the sink is closed (EPIPE). A
 * terminal that fails (EIO, EPIPE) is dropped and the loop still gets the output.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define READ_BYTES 65536

static int write_all(int fd, const char *data, size_t size) {
    while (size > 0) {
        ssize_t written = write(fd, data, size);
        if (written < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        data += written;
        size -= (size_t)written;
    }
    return 0;
}

static double now(void) {
    struct timespec clock;
    clock_gettime(CLOCK_MONOTONIC, &clock);
    return (double)clock.tv_sec + (double)clock.tv_nsec / 1e9;
}

static int number(const char *text, long low, long *out) {
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < low || value > 1L << 30) return -1;
    *out = value;
    return 0;
}

int main(int argc, char **argv) {
    long master, terminal, sink, lifeline, batch, quiet_ms;
    char *end;
    if (argc != 8 || number(argv[1], 0, &master) || number(argv[2], -1, &terminal) ||
        number(argv[3], 0, &sink) || number(argv[4], 0, &lifeline) ||
        number(argv[5], 1, &batch) || number(argv[6], 0, &quiet_ms)) {
        return 2;
    }
    double most = strtod(argv[7], &end);
    if (end == argv[7] || *end != '\0' || !(most >= 0)) return 2;
    int ignored[] = {SIGHUP, SIGINT, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE};
    for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++) signal(ignored[i], SIG_IGN);

    /* The block is read into in place: fewer than BATCH bytes are held before a read. */
    char *held = malloc((size_t)batch + READ_BYTES);
    if (held == NULL) return 1;
    size_t size = 0;
    double since = 0;
    struct pollfd watched[2] = {{(int)master, POLLIN, 0}, {(int)lifeline, POLLIN, 0}};
    for (;;) {
        ssize_t got = read((int)master, held + size, READ_BYTES);
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN) break; /* EIO: every slave fd is closed */
            int wait = -1;
            if (size > 0) { /* the output paused: the loop sees it after QUIET_MS */
                double left = (since + most - now()) * 1000;
                wait = left < (double)quiet_ms ? (int)(left > 0 ? left : 0) : (int)quiet_ms;
            }
            int ready = poll(watched, 2, wait);
            if (ready == 0) {
                if (write_all((int)sink, held, size) < 0) return 0; /* relay stopped reading */
                size = 0;
            } else if (ready > 0 && watched[1].revents != 0) {
                break; /* relay is gone, or stopped the copy */
            }
            continue;
        }
        if (got == 0) break;
        /* One write per read, as `script` does. */
        if (terminal >= 0 && write_all((int)terminal, held + size, (size_t)got) < 0) {
            terminal = -1; /* the terminal is gone; the loop still sees the output */
        }
        if (size == 0) since = now();
        size += (size_t)got;
        if (size >= (size_t)batch || now() - since >= most) {
            if (write_all((int)sink, held, size) < 0) return 0;
            size = 0;
        }
    }
    if (size > 0) write_all((int)sink, held, size);
    return 0;
}
