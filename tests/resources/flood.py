"""Writes argv[1] MiB to stdout and a little to stderr, without reading stdin."""

import sys

block = b"x" * (1 << 20)
for _ in range(int(sys.argv[1])):
    sys.stdout.buffer.write(block)
sys.stderr.write("flooded\n")
