"""Built-in services behind the `@memory:` and `@relay:` namespaces."""
