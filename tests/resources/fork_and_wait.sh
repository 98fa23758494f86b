#!/usr/bin/env bash
# A long-running hook with a child: for timeouts and cancellation. $1: pid file.
sleep 30 &
echo "$$ $!" > "$1"
wait
