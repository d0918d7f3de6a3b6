"""Shared fixtures: real Temporal servers from the pip-installed binaries."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from loopworks.deploy.binaries import find_binary
from loopworks.deploy.search_attributes import register_search_attributes


@pytest.fixture(scope="session")
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=find_binary("temporal-test-server"),
    )
    await register_search_attributes(env.client, "default")
    try:
        yield env
    finally:
        await env.shutdown()
