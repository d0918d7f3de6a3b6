"""The task graph (docs/graphs.md): `TaskGraphWorkflow` (`workflow`), the decisions it
takes as plain functions (`decisions`), what it gives each task's loop and takes from a
prep package (`inputs`), its budget (`budget`) and its ledger and events (`record`)."""
