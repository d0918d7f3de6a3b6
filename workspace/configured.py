"""The GitWorkspaces a process's settings call for: the worker's and the API's alike, so
both give git the same credentials and refuse the same origins."""

from __future__ import annotations

from loopworks.schemas.settings import Settings
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.origin_access import origin_check


def workspaces_for(settings: Settings) -> GitWorkspaces:
    # The same root in the worker and the API, so a remote origin's object cache is shared.
    return GitWorkspaces(
        settings.workspaces_dir.resolve(),
        author_name=settings.git_author_name,
        author_email=settings.git_author_email,
        max_clone_bytes=settings.max_clone_bytes,
        credentials=settings.git_credentials,
        origin_check=origin_check(settings.origin_rules()),
        user_helpers=settings.git_user_helpers,
    )
