#!/usr/bin/env bash
# BeforeTool / PreToolUse guard: deny destructive shell commands with exit 2 and a reason
# the model can act on. Reads the event from stdin; needs only bash and python3's absence
# is fine: the command is pulled out with sed so the hook has no dependencies.
event=$(cat)
command=$(printf '%s' "$event" | sed -n 's/.*"command" *: *"\(\([^"\\]\|\\.\)*\)".*/\1/p')
case "$command" in
  *"rm -rf /"*|*"rm -rf ~"*|*"rm -rf *"*)
    echo "Refusing '$command': it deletes far more than a task needs. Remove only the paths you created, by name." >&2
    exit 2 ;;
  *"git reset --hard"*|*"git clean -fd"*)
    echo "Refusing '$command': it throws away uncommitted work. Commit or stash first, or ask the user." >&2
    exit 2 ;;
  *"mkfs"*|*"dd if="*" of=/dev/"*)
    echo "Refusing '$command': it overwrites a disk." >&2
    exit 2 ;;
esac
exit 0
