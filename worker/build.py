"""`build_worker(client, settings)`: the factory the entry point and the tests share."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from loopworks.activities.audit import AuditActivities
from loopworks.activities.critique import CritiqueActivities
from loopworks.activities.curation import CurationActivities
from loopworks.activities.deps import StepDeps
from loopworks.activities.evaluation import EvaluationActivities
from loopworks.activities.heartbeat import HEARTBEAT_EVERY_SECONDS
from loopworks.activities.hydration import HydrationActivities
from loopworks.activities.integration import IntegrationActivities
from loopworks.activities.notification import NotificationActivities
from loopworks.activities.planning import PlanningActivities
from loopworks.activities.preparation import PreparationActivities
from loopworks.activities.production import ProductionActivities
from loopworks.activities.qa import QAActivities
from loopworks.activities.reflection import ReflectionActivities
from loopworks.activities.repository import RepositoryActivities
from loopworks.activities.retention import RetentionActivities
from loopworks.activities.skills import SkillActivities
from loopworks.checks.redaction import remember, settings_secrets
from loopworks.llm.base import ModelSource
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.playbook.activities import PlaybookActivities
from loopworks.playbook.delivery import PlaybookDeliveryActivities
from loopworks.playbook.workflow import PlaybookWorkflow
from loopworks.prompts.catalog import load_agents, load_templates
from loopworks.schemas.settings import LLMProvider, Settings
from loopworks.worker.carried_calls import CarriedCallsInterceptor
from loopworks.worker.failures import PermanentFailures
from loopworks.worker.redacting import RedactingInterceptor
from loopworks.worker.sandboxing import choose_sandbox
from loopworks.workflows.graph.workflow import TaskGraphWorkflow
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workflows.notifications import NotificationWorkflow
from loopworks.workflows.retention import RetentionWorkflow
from loopworks.workflows.skills import SkillLoopWorkflow
from loopworks.workflows.slot import SlotWorkflow
from loopworks.workspace.configured import workspaces_for

log = logging.getLogger(__name__)

NO_MODEL_CHOSEN = (
    "no model chosen: set ANTHROPIC_API_KEY to run on Anthropic, or LOOPS_LLM=offline to"
    " answer runs with the offline model's canned text (LOOPS_LLM=anthropic|offline)"
)


def build_models(settings: Settings) -> ModelSource:
    """The worker's model source: one per worker, so what it learns of its server (that
    strict tool input is refused) holds for the worker's lifetime. A ValueError when no
    model was chosen: the offline model only answers runs when asked to."""
    if settings.llm is None:
        raise ValueError(NO_MODEL_CHOSEN)
    if settings.llm == LLMProvider.ANTHROPIC:
        # Here, not at the top: the SDK takes seconds to import, which a worker on the
        # offline model (and the API, which imports this module's neighbours) never needs.
        from loopworks.llm.anthropic import AnthropicModels

        return AnthropicModels.from_settings(settings)
    script = OfflineScript.load(settings.offline_script) if settings.offline_script else None
    return OfflineModels(latency_ms=settings.offline_latency_ms, script=script)


def build_deps(settings: Settings, models: ModelSource | None = None) -> StepDeps:
    """Load catalogs and choose the sandbox at start, so a malformed definition or a
    machine that cannot sandbox stops the worker, not a run."""
    deps = StepDeps(
        settings=settings,
        models=models or build_models(settings),
        agents=load_agents(overrides=settings.agents_dir),
        templates=load_templates(),
        workspaces=workspaces_for(settings),
    )
    choose_sandbox(settings)
    return deps


def activities_of(deps: StepDeps, client: Client | None = None) -> list[Callable[..., Any]]:
    """Every activity the worker runs, listed by hand as Temporal's samples do.

    tests/worker/test_activities.py fails when an `@activity.defn` method is missing here.
    """
    repository = RepositoryActivities(deps)
    hydration = HydrationActivities(deps)
    production = ProductionActivities(deps)
    preparation = PreparationActivities(deps)
    evaluation = EvaluationActivities(deps)
    audit = AuditActivities(deps)
    critique = CritiqueActivities(deps)
    qa = QAActivities(deps)
    reflection = ReflectionActivities(deps)
    planning = PlanningActivities(deps)
    integration = IntegrationActivities(deps)
    playbook = PlaybookActivities(deps)
    delivery = PlaybookDeliveryActivities(deps, client)
    curation = CurationActivities(deps)
    skills = SkillActivities(deps)
    notification = NotificationActivities(deps)
    retention = RetentionActivities(deps, client)
    return [
        repository.prepare_workspace,
        hydration.hydrate,
        hydration.review_plan,
        production.plan_iteration,
        production.produce_artifact,
        preparation.prepare_checks,
        evaluation.evaluate_group,
        audit.audit_run,
        critique.critique_artifact,
        production.refine_artifact,
        qa.verify_result,
        reflection.reflect_on_run,
        repository.record_and_close_run,
        # Task graphs: plan, then the integration branch, its merge queue and ledger.
        planning.plan_graph,
        integration.prepare_integration,
        integration.merge_task,
        integration.record_ledger,
        # The delta playbook: the task curator, the skill sub-loop, the playbook's one
        # writer's git, and runs handing it their deltas.
        curation.curate_run,
        skills.generate_skills,
        skills.review_skills,
        skills.curate_skills,
        playbook.read_playbook,
        playbook.commit_playbook,
        playbook.commit_playbook_versions,
        delivery.send_playbook_batch,
        # Notifications: one signed POST to one webhook (docs/notifications.md).
        notification.send_notification,
        # The gc of finished runs' records (docs/operations.md#retention).
        retention.plan_retention,
        retention.sweep_origin,
    ]


# Every workflow a worker runs (the replay tests replay histories of each with this list).
WORKFLOWS = (
    LoopWorkflow,
    TaskGraphWorkflow,
    PlaybookWorkflow,
    SkillLoopWorkflow,
    RetentionWorkflow,
    SlotWorkflow,
    NotificationWorkflow,
)


def build_worker(
    client: Client,
    settings: Settings,
    models: ModelSource | None = None,
    task_queue: str | None = None,
    deps: StepDeps | None = None,
) -> Worker:
    deps = deps or build_deps(settings, models)
    # The worker about to run: from now on, every command's output in this process (the
    # agents' tools' included, which never see the settings) and every activity's result
    # (RedactingInterceptor) is redacted of the settings' secrets.
    remember(settings_secrets(settings))
    return Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        workflows=list(WORKFLOWS),
        activities=activities_of(deps, client),
        # Outermost first: the calls' records a step carries join its result
        # (worker/carried_calls.py) once every activity's result and failure has been
        # redacted of the worker's secrets (worker/redacting.py), after the errors no
        # retry can help are made non-retryable (worker/failures.py).
        interceptors=[
            CarriedCallsInterceptor(deps.workspaces),
            RedactingInterceptor(),
            PermanentFailures(),
        ],
        # Git and check commands block; they run in threads via asyncio.to_thread.
        activity_executor=ThreadPoolExecutor(max_workers=8),
        # On SIGTERM, let running steps finish (or heartbeat their cancellation) first.
        graceful_shutdown_timeout=timedelta(seconds=30),
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=settings.sticky_timeout_seconds),
        # Cancellation reaches an activity only with a heartbeat's reply: the SDK sends
        # each beat the step makes (activities/heartbeat.py) rather than hold it back.
        max_heartbeat_throttle_interval=timedelta(seconds=HEARTBEAT_EVERY_SECONDS),
        default_heartbeat_throttle_interval=timedelta(seconds=HEARTBEAT_EVERY_SECONDS),
        workflow_runner=workflow_runner(settings),
    )


def workflow_runner(settings: Settings) -> WorkflowRunner:
    """Workflow code outside Temporal's sandbox unless `LOOPS_WORKFLOW_SANDBOX=true`
    (why: the setting's comment in schemas/settings.py)."""
    if settings.workflow_sandbox:
        log.info("LOOPS_WORKFLOW_SANDBOX=true: workflow code runs inside Temporal's sandbox")
        return SandboxedWorkflowRunner()
    return UnsandboxedWorkflowRunner()


def settle_heap() -> None:
    """Take what the process built to start (modules, schemas, agents, catalogs) out of
    the garbage collector's sight, once the worker is built and about to poll.

    Those objects live as long as the process, yet every full collection walked them all
    again: in a ten-run benchmark, four full collections cost 0.3 s of the worker's CPU,
    about a twentieth of it. What is allocated from now on is collected as before.
    """
    gc.collect()
    gc.freeze()
