#!/bin/bash
# SessionStart: plain text on stdout becomes context; reads the event from stdin.
payload=$(cat)
echo "project=$RELAY_PROJECT_DIR event=$RELAY_EVENT session=$RELAY_SESSION_ID"
