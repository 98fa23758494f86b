#!/usr/bin/env bash
# Ignores SIGTERM (so does its child): only SIGKILL ends it. $1: file to write pids to.
trap '' TERM
sleep 30 &
echo "$$ $!" > "$1"
wait
