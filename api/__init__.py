"""The HTTP front end: starts runs, steers them with workflow messages, reads their state."""
