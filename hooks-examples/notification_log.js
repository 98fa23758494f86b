#!/usr/bin/env node
// notification_log.js: keep a log of the agent's notifications (permission prompts, idle
// prompts, …), one JSON object per line, to read later or to feed another tool
// (`tail -f … | jq`).
//
// Event: Notification (the same name in relay, Claude Code and Gemini CLI), any type.
// Answer: none. It never blocks and prints nothing; it exits 1 (a non-blocking error
// relay records) only when the log cannot be written.
//
// Each line: {"time", "type", "message", "session_id"} plus "title" and "details" when the
// event has them; "time" is the event's timestamp. Newlines and U+2028/U+2029 in the text
// are escaped, so a record is always exactly one line. Appended with one write on a file
// opened for appending, so concurrent notifications never interleave.
//
// The log file: $RELAY_NOTIFICATION_LOG if set, else $RELAY_PROJECT_DIR/.relay/notifications.jsonl
// (CLAUDE_PROJECT_DIR, GEMINI_PROJECT_DIR also work), else
// ${XDG_STATE_HOME:-~/.local/state}/agent-relay/notifications.jsonl. Directories are
// created as needed. Needs only Node.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

function logFile(env) {
  if (env.RELAY_NOTIFICATION_LOG) return env.RELAY_NOTIFICATION_LOG;
  const project = env.RELAY_PROJECT_DIR || env.CLAUDE_PROJECT_DIR || env.GEMINI_PROJECT_DIR;
  if (project) return path.join(project, '.relay', 'notifications.jsonl');
  const state = env.XDG_STATE_HOME || path.join(os.homedir(), '.local', 'state');
  return path.join(state, 'agent-relay', 'notifications.jsonl');
}

try {
  const event = JSON.parse(fs.readFileSync(0, 'utf-8'));
  const record = {
    time: event.timestamp || new Date().toISOString(),
    type: event.notification_type ?? null,
    message: event.message ?? null,
    session_id: event.session_id ?? null,
  };
  if (event.title != null) record.title = event.title;
  if (event.details != null) record.details = event.details;
  // JSON allows raw U+2028/U+2029, but many line readers split on them.
  const line = JSON.stringify(record).replace(/[\u2028\u2029]/g,
    (c) => '\\u' + c.charCodeAt(0).toString(16)) + '\n';
  const file = logFile(process.env);
  fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
  fs.appendFileSync(file, line);
} catch (error) {
  process.stderr.write(`notification_log.js: ${error.message}\n`);
  process.exit(1);
}
