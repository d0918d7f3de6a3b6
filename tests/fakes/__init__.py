"""Local stand-ins for external services, reached over real sockets."""
