#!/usr/bin/env bash
# `make demo`: relay wraps a scripted stand-in for an AI coding agent (no network, no API
# key) and you watch a session: SessionStart context typed in, a dangerous command blocked
# by a hook, an `@deploy:` directive answered, an Idle nudge, and a clean end.
# Uses a throwaway RELAY_HOME, so it leaves nothing behind.
set -euo pipefail
relay=${1:-relay}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
export RELAY_HOME PATH
RELAY_HOME=$(mktemp -d)
PATH="$(cd "$(dirname "$relay")" && pwd):$PATH"  # the agent calls `relay hooks run` itself
trap 'rm -rf "$RELAY_HOME"' EXIT
bold='' plain=''
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then  # escape codes for a terminal only, never a pipe
  bold=$(printf '\033[1m') plain=$(printf '\033[0m')
fi

cat <<TEXT
${bold}relay run: an agent CLI wrapped in a PTY, with hooks and directives${plain}
  settings: hooks-examples/demo/settings.json (a start-up context, the bash guard as
            PreToolUse, an @deploy handler, an Idle nudge after 2 s of quiet)
  agent:    hooks-examples/demo/demo_agent.py (it prints tool calls, asks relay's hook
            engine before running them, and reads what relay types into it)
  lines the agent did not print itself are what relay typed in (the PTY echoes them)

\$ relay run --headless --name demo --settings hooks-examples/demo/settings.json -- python3 hooks-examples/demo/demo_agent.py
TEXT
"$relay" run --headless --name demo --settings "$here/demo/settings.json" --cwd "$root" \
  -- python3 "$here/demo/demo_agent.py"
cat <<'TEXT'

The session ended cleanly (the agent exited 0; SessionEnd fired).
Try next:  bash hooks-examples/tour.sh .venv/bin/relay     (every example hook, one event each)
           relay hooks test PreToolUse --set 'tool_input.command="rm -rf /"' --settings hooks-examples/settings.json
TEXT
