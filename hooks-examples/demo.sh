#!/usr/bin/env bash
# `make demo`: fire realistic events through relay with the example hooks and show what
# relay decided. Uses a throwaway RELAY_HOME, so it leaves nothing behind.
set -euo pipefail
relay=${1:-relay}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
python=$(dirname "$relay")/python
export RELAY_HOME
RELAY_HOME=$(mktemp -d)
trap 'rm -rf "$RELAY_HOME"' EXIT

show() {  # show TITLE EVENT JSON
  printf "\n\033[1m== %s\033[0m\n\$ echo '%s' | relay hooks run %s --settings hooks-examples/settings.json\n" "$1" "$3" "$2"
  printf '%s' "$3" | "$relay" hooks run "$2" --settings "$here/settings.json" --cwd "$root" |
    "$python" "$here/show_result.py"
}

show "A session starts: the context hook tells the agent where it is" SessionStart '{"source": "startup"}'
show "The agent wants to run a harmless command" PreToolUse '{"tool_name": "Bash", "tool_input": {"command": "ls -la"}}'
show "The agent wants to wipe the disk: the bash guard denies it (exit 2)" PreToolUse '{"tool_name": "Bash", "tool_input": {"command": "rm -rf / --no-preserve-root"}}'
show "The agent force-pushes: the Node hook rewrites the command" BeforeTool '{"tool_name": "run_shell_command", "tool_input": {"command": "git push --force origin main", "description": "publish"}}'
printf '\nClaude Code can use all of this through one hook entry:\n  {"type": "command", "command": "relay hooks run --dialect claude PreToolUse"}\n'
