"""`loops`: seed 001's command set (new, status, stop, list, history, clean, ...) for the
service, talking to the HTTP API. The one place in loopworks that prints."""
