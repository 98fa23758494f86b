"""Prints one line to each stream and exits with the code given as argv[1]."""

import sys

sys.stdin.read()
print("out")
print("err", file=sys.stderr)
sys.exit(int(sys.argv[1]))
