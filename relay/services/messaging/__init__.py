"""Messaging between agents: the model, the embedded SQLite mailbox, the `@relay:` namespace,
and the NATS JetStream transport for more than one machine (imported only when used)."""
