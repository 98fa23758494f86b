"""Settings discovery, merge and validation, and the trust store."""
