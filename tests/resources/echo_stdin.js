#!/usr/bin/env node
// Reads the event from stdin and answers with its event name.
let input = "";
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const event = JSON.parse(input);
  process.stdout.write(JSON.stringify({ systemMessage: `node saw ${event.hook_event_name}` }) + "\n");
});
