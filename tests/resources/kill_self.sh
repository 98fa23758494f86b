#!/usr/bin/env bash
# Dies by a signal of its own.
echo "about to die"
kill -9 $$
