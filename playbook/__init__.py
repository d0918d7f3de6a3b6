"""The delta playbook, one feature in one package (docs/playbook.md): its plain logic
(`deltas`, `selection`, `similarity`), its versions in git (`store`), its one writer
(`workflow`, with its `activities`), the client that talks to the writer (`writer`), and
the activity that hands a run's batch over (`delivery`)."""
