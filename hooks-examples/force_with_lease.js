#!/usr/bin/env node
// force_with_lease.js: turn `git push --force` (or -f, or -f inside -fu) into
// `git push --force-with-lease`, which refuses to overwrite commits someone else pushed.
//
// Event: BeforeTool (Claude Code: PreToolUse), for the shell tools Bash and
// run_shell_command; reads tool_input.command from the event on stdin.
// Answer: {"systemMessage": ..., "hookSpecificOutput": {"tool_input": {"command": ...}}}
// when it rewrote the command: relay merges tool_input onto the tool's input, so its other
// fields (description, timeout, …) are kept. No output otherwise. Only the options of
// `git … push` commands are changed; a force push by refspec (`git push origin +main`) is
// left alone. Needs only Node.
'use strict';
const fs = require('fs');

function withLease(command) {
  // Each `git [options] push …` up to the next command separator.
  return command.replace(/\bgit\b([^;&|\n]*?\s)push\b([^;&|\n]*)/g, (all, before, args) => {
    const rewritten = args.replace(/(^|\s)(--force|-([a-zA-Z]*)f([a-zA-Z]*))(?=\s|$)/g,
      (option, space, whole, left = '', right = '') => {
        const others = left + right;
        return `${space}--force-with-lease${others ? ` -${others}` : ''}`;
      });
    return `git${before}push${rewritten}`;
  });
}

const event = JSON.parse(fs.readFileSync(0, 'utf-8'));
const command = (event.tool_input && event.tool_input.command) || '';
if (typeof command === 'string') {
  const rewritten = withLease(command);
  if (rewritten !== command) {
    console.log(JSON.stringify({
      systemMessage: `relay: rewrote "${command}" to "${rewritten}"`,
      hookSpecificOutput: { tool_input: { command: rewritten } },
    }));
  }
}
