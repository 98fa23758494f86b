/* The tiny hook the engine benchmark spawns: read stdin to EOF, answer "{}". */
#include <unistd.h>

int main(void) {
    char buffer[65536];
    while (read(0, buffer, sizeof buffer) > 0) {
    }
    return write(1, "{}\n", 3) == 3 ? 0 : 1;
}
