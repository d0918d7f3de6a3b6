"""The offline model (docs/models.md#the-offline-model): a model in process that answers
every role as loopworks expects, so the service runs with no API key. `model` is the
pydantic-ai model and its scripts; `answers` what each role answers by default; `curation`
the curating roles' answers, drawn from the playbook it was given."""
