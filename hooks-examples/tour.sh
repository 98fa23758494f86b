#!/usr/bin/env bash
# A tour of the example hooks: fire realistic events through relay with the example hooks and show what
# relay decided. Uses a throwaway RELAY_HOME (and notification log), so it leaves nothing
# behind; needs no network.
set -euo pipefail
relay=${1:-relay}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
python=$(dirname "$relay")/python
export RELAY_HOME RELAY_NOTIFICATION_LOG
RELAY_HOME=$(mktemp -d)
RELAY_NOTIFICATION_LOG=$RELAY_HOME/notifications.jsonl
trap 'rm -rf "$RELAY_HOME"' EXIT
bold='' plain=''
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then  # escape codes for a terminal only, never a pipe
  bold=$(printf '\033[1m') plain=$(printf '\033[0m')
fi

show() {  # show TITLE EVENT JSON [NAME=VALUE]: fire EVENT (with NAME set) and print the result
  local setting=${4:-}
  printf "\n%s== %s%s\n\$ echo '%s' | %srelay hooks run %s --settings hooks-examples/settings.json\n" \
    "$bold" "$1" "$plain" "$3" "${setting:+${setting%%=*}='${setting#*=}' }" "$2"
  printf '%s' "$3" | env ${setting:+"$setting"} "$relay" hooks run "$2" --settings "$here/settings.json" --cwd "$root" |
    "$python" "$here/show_result.py"
}

show "A session starts: the context hook tells the agent where it is" SessionStart '{"source": "startup"}'
show "The agent wants to run a harmless command" PreToolUse '{"tool_name": "Bash", "tool_input": {"command": "ls -la"}}'
show "The agent wants to wipe the disk: the bash guard denies it (exit 2)" PreToolUse '{"tool_name": "Bash", "tool_input": {"command": "rm -rf / --no-preserve-root"}}'
show "The agent force-pushes: the Node hook rewrites the command" BeforeTool '{"tool_name": "run_shell_command", "tool_input": {"command": "git push --force origin main", "description": "publish"}}'
show "The agent wants to edit .env: the Perl hook denies it" PreToolUse '{"tool_name": "Edit", "tool_input": {"file_path": ".env", "old_string": "DEBUG=0", "new_string": "DEBUG=1"}}'
show "The agent wants to stop, but the tests fail: the stop hook asks it to go on" Stop '{"stop_hook_active": false}' \
  'RELAY_TEST_COMMAND=echo "FAILED test_cli.py::test_verbose"; exit 1'
show "The agent asks for permission: the notification is logged" Notification '{"notification_type": "permission_prompt", "message": "Claude needs your permission to use Bash"}'
printf 'logged: %s' "$(tail -n 1 "$RELAY_NOTIFICATION_LOG")"
printf '\n\nClaude Code (or Gemini CLI, or Codex) runs these hooks once relay is its hook layer:\n  relay install claude      # one entry per event, through relay'"'"'s client and server; relay doctor checks it\n'
