#!/usr/bin/env node
// BeforeTool: rewrite `git push --force` into `git push --force-with-lease`, which refuses to
// overwrite commits someone else pushed. Answers with hookSpecificOutput.tool_input (merged
// onto the tool's input), so other fields of the input are kept.
const fs = require('fs');
const event = JSON.parse(fs.readFileSync(0, 'utf-8'));
const command = (event.tool_input && event.tool_input.command) || '';
const rewritten = command.replace(/git push (.*)--force(?![-\w])/, 'git push $1--force-with-lease')
                         .replace(/git push (.*)-f(?![-\w])/, 'git push $1--force-with-lease');
if (rewritten !== command) {
  console.log(JSON.stringify({
    systemMessage: `relay: rewrote "${command}" to "${rewritten}"`,
    hookSpecificOutput: { tool_input: { command: rewritten } },
  }));
}
