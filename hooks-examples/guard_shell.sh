#!/usr/bin/env bash
# guard_shell.sh: refuse destructive shell commands before they run.
#
# Event: BeforeTool (Claude Code: PreToolUse), for the shell tools Bash and
# run_shell_command; reads tool_input.command from the event on stdin.
# Answer: exit 2 with a reason on stderr (a deny the model reads and can act on), or
# exit 0 with no output (no opinion). Exit 1 if the event cannot be read.
#
# It refuses: recursive rm (or an unfiltered find -delete) of /, ~, $HOME, ., .., *, a
# top-level system directory or "$VAR/" (an unset VAR makes it /); rm --no-preserve-root;
# git reset --hard, git clean -f, git checkout/restore of "."; mkfs, wipefs, dd or a
# redirect onto a disk device; chmod/chown -R of such a path; a fork bomb.
# The event is parsed as JSON (with python3, else jq), so escaped quotes or newlines in
# the JSON hide nothing. Quotes, backslashes and separators (; && || | & $( ) ` newline)
# in the command are looked through, so r'm' -rf "/", `ls<newline>rm -rf /` and
# bash -c "rm -rf /" are refused too. It errs on the side of refusing: `echo "rm -rf /"`
# is refused as well. A seatbelt against mistakes, not a sandbox.
set -f  # no pathname expansion anywhere: a command is data here

read_command='import json, sys
try:
    event = json.load(sys.stdin)
except ValueError as error:
    sys.exit(f"guard_shell.sh: the event is not JSON: {error}")
tool_input = event.get("tool_input") if isinstance(event, dict) else None
command = tool_input.get("command") if isinstance(tool_input, dict) else None
sys.stdout.write(command.replace("\0", " ") if isinstance(command, str) else "")'
if command -v python3 >/dev/null 2>&1; then
  command=$(python3 -c "$read_command") || exit 1
elif command -v jq >/dev/null 2>&1; then
  command=$(jq -j '.tool_input.command | strings') || exit 1
else
  echo "guard_shell.sh: needs python3 or jq to read the event" >&2
  exit 1
fi

refuse() {  # refuse WHY: deny, quoting the command, and say what to do instead
  printf "Refusing '%s': %s\n" "$command" "$1" >&2
  exit 2
}
deletes_too_much="it deletes far more than a task needs. Remove only the paths you created, by name."
loses_work="it throws away uncommitted work. Commit or stash first, or ask the user."
wipes_disk="it overwrites a disk. Ask the user to do this themselves if it is really needed."

# A path whose recursive removal is a disaster. "$DIR/" is / when DIR is unset.
system_dirs='bin|boot|dev|etc|home|lib|lib32|lib64|opt|proc|root|sbin|srv|sys|usr|var|Users|System|Library|Applications'
dangerous_path='^(/+|~/*|\.\.?/*|\$\{?HOME\}?/*|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?/+|/+('$system_dirs')/*)?\*?$'
brace='^([^{}]*)\{([^{}]*,[^{}]*)\}(.*)$'
is_dangerous() {  # is_dangerous PATH: also each alternative of one {a,b} (rm -rf /{usr,etc})
  [[ $1 =~ $dangerous_path ]] && return 0
  [[ $1 =~ $brace ]] || return 1
  local prefix=${BASH_REMATCH[1]} suffix=${BASH_REMATCH[3]} alternative alternatives
  IFS=, read -ra alternatives <<<"${BASH_REMATCH[2]},"
  for alternative in "${alternatives[@]}"; do
    alternative=$prefix$alternative$suffix
    [[ -n $alternative && $alternative =~ $dangerous_path ]] && return 0
  done
  return 1
}

# Look through quoting and escapes, then make every command separator a ";" word.
flat=${command//\\$'\n'/ }
flat=${flat//[\"\'\\]/}
flat=${flat//[$'\n\r;&|()`']/ ; }
read -ra words <<<"$flat"
count=${#words[@]}

args=()
args_after() {  # args_after I: the words of the simple command after word I
  args=()
  local j
  for ((j = $1 + 1; j < count; j++)); do
    [[ ${words[j]} == ";" ]] && break
    args+=("${words[j]}")
  done
}

check_rm() {  # rm [-r…] PATH…: recursive removal of a dangerous path
  local recursive=0 options=1 target=0 arg
  for arg in "${args[@]}"; do
    if ((options)) && [[ $arg == -?* ]]; then
      case $arg in
        --) options=0 ;;
        --no-preserve-root) refuse "$deletes_too_much" ;;
        --recursive) recursive=1 ;;
        --*) ;;
        *[rR]*) recursive=1 ;;
      esac
    elif is_dangerous "$arg"; then
      target=1
    fi
  done
  ((recursive && target)) && refuse "$deletes_too_much"
}

check_git() {  # git [global options] SUBCOMMAND …
  local j sub="" rest=() arg dot=0 worktree=1
  for ((j = 0; j < ${#args[@]}; j++)); do
    case ${args[j]} in
      -C | -c | --git-dir | --work-tree | --namespace) ((j++)) ;;
      -*) ;;
      *)
        sub=${args[j]}
        rest=("${args[@]:j+1}")
        break
        ;;
    esac
  done
  for arg in "${rest[@]}"; do
    case $sub:$arg in
      reset:--hard) refuse "$loses_work" ;;
      clean:--force | clean:-f* | clean:-[a-zA-Z]*f*) refuse "$loses_work" ;;
      checkout:. | checkout:./ | restore:. | restore:./ | restore::/) dot=1 ;;
      restore:--staged | restore:-S) worktree=0 ;;
    esac
  done
  for arg in "${rest[@]}"; do  # restore --staged --worktree . touches the work tree too
    [[ $sub == restore && ($arg == --worktree || $arg == -W || $arg == -[a-zA-Z]*W*) ]] && worktree=1
  done
  ((dot && worktree)) && refuse "$loses_work"
}

check_dd() {  # dd of=DEVICE
  local arg
  for arg in "${args[@]}"; do
    case $arg in
      of=/dev/null | of=/dev/zero | of=/dev/std* | of=/dev/fd/* | of=/dev/tty*) ;;
      of=/dev/*) refuse "$wipes_disk" ;;
    esac
  done
}

check_recursive_owner() {  # chmod/chown/chgrp -R … PATH
  local recursive=0 arg
  for arg in "${args[@]}"; do
    [[ $arg == --recursive || $arg =~ ^-[a-zA-Z]*R ]] && recursive=1
  done
  ((recursive)) || return 0
  for arg in "${args[@]}"; do
    [[ $arg != -* ]] && is_dangerous "$arg" &&
      refuse "it changes the owner or permissions of far more than a task needs. Change only the files you created."
  done
}

check_find() {  # find PATH… [no -name/-path filter] -delete | -exec rm
  local arg start=1 dangerous=0 deletes=0 filtered=0
  for arg in "${args[@]}"; do
    [[ $arg == -* || $arg == "!" ]] && start=0
    ((start)) && is_dangerous "$arg" && dangerous=1
    case $arg in
      -delete | rm) deletes=1 ;;
      -name | -iname | -path | -ipath | -wholename | -regex | -iregex) filtered=1 ;;
    esac
  done
  ((dangerous && deletes && !filtered)) && refuse "$deletes_too_much"
}

for ((i = 0; i < count; i++)); do
  case ${words[i]##*/} in
    rm) args_after "$i"; check_rm ;;
    git) args_after "$i"; check_git ;;
    dd) args_after "$i"; check_dd ;;
    chmod | chown | chgrp) args_after "$i"; check_recursive_owner ;;
    find) args_after "$i"; check_find ;;
    mkfs | mkfs.* | wipefs) refuse "$wipes_disk" ;;
  esac
done

redirect_to_disk='>[[:space:]]*/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk|rdisk)'
[[ $command =~ $redirect_to_disk ]] && refuse "$wipes_disk"
[[ ${command//[[:space:]]/} == *':(){:|:&};:'* ]] && refuse "it is a fork bomb."
exit 0
