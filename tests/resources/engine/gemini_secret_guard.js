#!/usr/bin/env node
// A BeforeTool hook written the way Gemini CLI's documentation shows (unchanged).
const fs = require('fs');
const input = JSON.parse(fs.readFileSync(0, 'utf-8'));
const filePath = (input.tool_input && (input.tool_input.file_path || input.tool_input.path)) || '';
if (filePath.includes('.env')) {
  console.log(JSON.stringify({
    decision: 'deny',
    reason: `Security Policy: writing to ${filePath} is blocked (${input.hook_event_name}).`,
    systemMessage: 'Blocked a write to a secrets file',
  }));
} else {
  console.log(JSON.stringify({ decision: 'allow' }));
}
process.exit(0);
