/* The speed floor for running one hook (DESIGN §10): posix_spawn + pipes, from C.
 *
 * usage: floor HOOK N
 * Spawns HOOK N times: stdin and stdout are pipes, the event is written to stdin which
 * is then closed, stdout is read to EOF, the child is reaped with waitpid. Prints the
 * median wall time per spawn in milliseconds.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char EVENT[] =
    "{\"session_id\":\"bench\",\"cwd\":\"/tmp\",\"timestamp\":\"2025-01-01T00:00:00.000Z\","
    "\"hook_event_name\":\"BeforeTool\",\"transcript_path\":null,\"agent_name\":null,"
    "\"tool_name\":\"Bash\",\"tool_input\":{\"command\":\"ls -la\"}}";

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run_once(char *hook) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC)) return -1;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    char *argv[] = {hook, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, hook, &actions, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(in[0]);
    close(out[1]);
    if (rc != 0) return -1;
    if (write(in[1], EVENT, sizeof EVENT - 1) < 0) return -1;
    close(in[1]);
    char buffer[65536];
    ssize_t n;
    while ((n = read(out[0], buffer, sizeof buffer)) > 0) {
    }
    close(out[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s HOOK N\n", argv[0]);
        return 2;
    }
    int count = atoi(argv[2]);
    if (count < 1) return 2;
    double *times = calloc(count, sizeof *times);
    for (int i = 0; i < count; i++) {
        double start = now_ms();
        if (run_once(argv[1]) != 0) {
            fprintf(stderr, "floor: spawn %d failed\n", i);
            return 1;
        }
        times[i] = now_ms() - start;
    }
    qsort(times, count, sizeof *times, compare);
    printf("%.4f\n", times[count / 2]);
    free(times);
    return 0;
}
