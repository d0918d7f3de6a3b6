"""What the service's processes, the API and the worker, are both built on: reaching
Temporal the one way (`connect.py`) and tracing (`telemetry.py`)."""
