#!/usr/bin/env bash
# A user namespace handler: `@deploy:TARGET MESSAGE` from the agent arrives as a
# PatternMatch event; plain text on stdout is typed back into the agent (inject).
event=$(cat)
target=$(printf '%s' "$event" | python3 -c 'import json,sys; print(json.load(sys.stdin)["target"])')
message=$(printf '%s' "$event" | python3 -c 'import json,sys; print(json.load(sys.stdin)["message"])')
echo "deploy: dry run of '$message' to $target passed (3 services, 0 migrations)"
