#!/usr/bin/env bash
# Leaves a child behind that keeps stdout and stderr open, then exits. $1: pid file.
sleep 30 &
echo "$!" > "$1"
echo '{"systemMessage": "done"}'
exit 0
