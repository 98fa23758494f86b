#!/usr/bin/env bash
# Reads the event, answers on stdout, talks on stderr, exits with the code given as $1.
event=$(cat)
printf '{"systemMessage": "got %s bytes"}\n' "${#event}"
echo "note on stderr" >&2
exit "${1:-0}"
