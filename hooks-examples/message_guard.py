#!/usr/bin/env python3
"""MessageReceived hook: keep muted senders out and secrets out of what agents read.

Reads: a MessageReceived event (`sender`, `body`, `message_id`, `thread`) on stdin.
Answers:
- {"decision": "deny", "reason": "..."} for a sender named in $RELAY_MUTED_SENDERS
  (comma-separated names): relay drops the message and tells the sender why;
- {"hookSpecificOutput": {"body": ...}, "systemMessage": ...} when the body holds
  something that looks like a secret (AWS access keys, GitHub and Slack tokens, private
  key blocks, `password=`/`token:` assignments): the agent gets the body with each one
  replaced by [redacted], and the user is told how many were taken out;
- nothing for any other message (relay delivers it as it is).

Register it under "MessageReceived" (see settings.json); it never fails closed.
"""

import json
import os
import re
import sys

SECRETS = [
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),  # GitHub tokens
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),  # Slack tokens
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"(?i)\b(password|passwd|secret|token|api[_-]?key)\s*[=:]\s*\S+"),
]


def redact(body):
    """The body with every secret replaced, and how many there were."""
    count = 0
    for pattern in SECRETS:
        body, found = pattern.subn("[redacted]", body)
        count += found
    return body, count


def main():
    try:
        event = json.load(sys.stdin)
    except ValueError:
        return 0  # not an event: no opinion
    sender = str(event.get("sender", ""))
    muted = {name.strip() for name in os.environ.get("RELAY_MUTED_SENDERS", "").split(",")}
    if sender and sender in muted:
        print(json.dumps({"decision": "deny", "reason": f"{sender} is muted in this session"}))
        return 0
    body, count = redact(str(event.get("body", "")))
    if count:
        print(
            json.dumps(
                {
                    "hookSpecificOutput": {"body": body},
                    "systemMessage": f"message-guard: redacted {count} secret(s) from {sender}'s message",
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
