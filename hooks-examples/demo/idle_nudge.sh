#!/usr/bin/env bash
# Idle: the agent has been quiet for session.idleSeconds; nudge it (plain text = inject).
cat >/dev/null
echo "Still there? Wrap up and summarise what you did."
