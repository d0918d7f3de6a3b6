"""workspace/origin_policy.py: which origins a deployment admits, case by case, without DNS
or a disk (addresses and real paths are given as the resolver would find them)."""

from __future__ import annotations

import pytest

from loopworks.schemas.origin_rules import (
    ALLOWED_ORIGINS,
    ALLOWED_SCHEMES,
    GIT_CREDENTIALS,
    LOCAL_ROOTS,
    OriginRules,
    rules_from,
    schemes_from,
)
from loopworks.workspace.origin_policy import admit, public_address

pytestmark = pytest.mark.unit

PUBLIC = ("140.82.112.3",)
OPEN = OriginRules(
    private_dirs=("/srv/loops", "/srv/loops/workspaces"), own=("/srv/loops/origin.git",)
)
NAMED = OriginRules(
    allowed=("https://github.com/acme/", "git-server", "git.example.com:8443", "[fd00::1]:9418"),
    schemes=frozenset({"https", "ssh", "git"}),
)
LOCAL = OriginRules(
    schemes=frozenset({"https", "ssh", "file"}),
    local_roots=("/home/alice/src",),
    private_dirs=("/home/alice/src/.loops-data",),
    own=("/home/alice/src/.loops-data/origin.git", "git://git-server:9418/loopworks.git"),
)


@pytest.mark.parametrize(
    ("origin", "rules", "addresses"),
    [
        ("https://github.com/acme/app.git", OPEN, PUBLIC),
        ("ssh://git@github.com/acme/app.git", OPEN, PUBLIC),
        ("git@github.com:acme/app.git", OPEN, PUBLIC),
        ("git+ssh://git@github.com/acme/app.git", OPEN, PUBLIC),
        ("https://github.com:443/acme/app.git", OPEN, PUBLIC),
        ("https://[2606:4700::1]/r.git", OPEN, ("2606:4700::1",)),
        # The service's own default origin, wherever it is.
        ("/srv/loops/origin.git", OPEN, ()),
        ("git://git-server:9418/loopworks.git", LOCAL, ()),
        # Named hosts and prefixes, on private addresses too (not even resolved).
        ("https://github.com/acme/app.git", NAMED, ()),
        ("https://github.com/acme/", NAMED, ()),
        ("git://git-server/loopworks.git", NAMED, ()),
        ("git://git-server:9418/loopworks.git", NAMED, ()),
        ("https://git.example.com:8443/r.git", NAMED, ()),
        ("git://[fd00::1]:9418/r.git", NAMED, ()),
        # Local repositories under a root.
        ("/home/alice/src/app", LOCAL, ()),
        ("/home/alice/src", LOCAL, ()),
        ("file:///home/alice/src/app", LOCAL, ()),
        ("file://localhost/home/alice/src/app", LOCAL, ()),
    ],
)
def test_admitted(origin: str, rules: OriginRules, addresses: tuple[str, ...]) -> None:
    assert admit(origin, rules, addresses), admit(origin, rules, addresses).reason


@pytest.mark.parametrize(
    ("origin", "rules", "addresses", "setting"),
    [
        # Schemes: https and ssh unless named; transports and unknown schemes never.
        ("http://github.com/acme/app.git", OPEN, PUBLIC, ALLOWED_SCHEMES),
        ("git://github.com/acme/app.git", OPEN, PUBLIC, ALLOWED_SCHEMES),
        ("file:///home/alice/src/app", OPEN, (), ALLOWED_SCHEMES),
        ("HTTP://github.com/acme/app.git", OPEN, PUBLIC, ALLOWED_SCHEMES),
        ("ext::sh -c touch% /tmp/pwned", OPEN, (), None),
        ("ext::sh -c touch% /tmp/pwned", LOCAL, (), None),
        ("fd::3", OPEN, (), None),
        ("fd::3,4", NAMED, (), None),
        ("https::github.com/acme/app.git", OPEN, PUBLIC, None),
        ("foo://github.com/acme/app.git", OPEN, PUBLIC, None),
        ("-uhelp", OPEN, (), None),
        ("--upload-pack=touch /tmp/x", LOCAL, (), None),
        ("", OPEN, (), None),
        (" https://github.com/acme/app.git", OPEN, PUBLIC, None),
        # Credentials in the URL.
        ("https://user:tok@github.com/acme/app.git", OPEN, PUBLIC, GIT_CREDENTIALS),
        ("https://ghp_token@github.com/acme/app.git", OPEN, PUBLIC, GIT_CREDENTIALS),
        ("https://github.com%40x:tok@github.com/a.git", OPEN, PUBLIC, GIT_CREDENTIALS),
        ("ssh://git:tok@github.com/acme/app.git", OPEN, PUBLIC, GIT_CREDENTIALS),
        ("git:tok@[github.com]:acme/app.git", OPEN, PUBLIC, GIT_CREDENTIALS),
        ("[git:tok@github.com]:acme/app.git", OPEN, PUBLIC, GIT_CREDENTIALS),
        # scp-like hosts end at the first colon, or are bracketed, as git reads them.
        ("git:tok@github.com:acme/app.git", OPEN, ("10.0.0.7",), ALLOWED_ORIGINS),
        ("git@[::1]:acme/app.git", OPEN, ("::1",), ALLOWED_ORIGINS),
        ("[git@10.0.0.1]:acme/app.git", OPEN, ("10.0.0.1",), ALLOWED_ORIGINS),
        ("a@b@10.0.0.1:acme/app.git", OPEN, ("10.0.0.1",), ALLOWED_ORIGINS),
        ("git@[github.com:acme/app.git", OPEN, PUBLIC, None),
        # Internal addresses, unless named.
        ("https://127.0.0.1/r.git", OPEN, ("127.0.0.1",), ALLOWED_ORIGINS),
        ("https://localhost/r.git", OPEN, ("127.0.0.1", "::1"), ALLOWED_ORIGINS),
        ("https://169.254.169.254/latest/meta-data/", OPEN, ("169.254.169.254",), ALLOWED_ORIGINS),
        ("https://10.0.0.5/r.git", OPEN, ("10.0.0.5",), ALLOWED_ORIGINS),
        ("https://192.168.1.1/r.git", OPEN, ("192.168.1.1",), ALLOWED_ORIGINS),
        ("https://172.16.0.1/r.git", OPEN, ("172.16.0.1",), ALLOWED_ORIGINS),
        ("https://100.64.0.1/r.git", OPEN, ("100.64.0.1",), ALLOWED_ORIGINS),
        ("https://0.0.0.0/r.git", OPEN, ("0.0.0.0",), ALLOWED_ORIGINS),
        ("https://224.0.0.1/r.git", OPEN, ("224.0.0.1",), ALLOWED_ORIGINS),
        ("https://2130706433/r.git", OPEN, ("127.0.0.1",), ALLOWED_ORIGINS),
        ("https://0x7f.1/r.git", OPEN, ("127.0.0.1",), ALLOWED_ORIGINS),
        ("https://[::1]/r.git", OPEN, ("::1",), ALLOWED_ORIGINS),
        ("https://[::ffff:127.0.0.1]/r.git", OPEN, ("::ffff:127.0.0.1",), ALLOWED_ORIGINS),
        ("https://[::ffff:a9fe:a9fe]/r.git", OPEN, ("::ffff:169.254.169.254",), ALLOWED_ORIGINS),
        ("https://[fe80::1]/r.git", OPEN, ("fe80::1",), ALLOWED_ORIGINS),
        ("https://[fd00::1]/r.git", OPEN, ("fd00::1",), ALLOWED_ORIGINS),
        ("https://[ff02::1]/r.git", OPEN, ("ff02::1",), ALLOWED_ORIGINS),
        ("https://[64:ff9b::a00:1]/r.git", OPEN, ("64:ff9b::a00:1",), ALLOWED_ORIGINS),
        ("https://[2002:7f00:1::]/r.git", OPEN, ("2002:7f00:1::",), ALLOWED_ORIGINS),
        ("https://[::7f00:1]/r.git", OPEN, ("::7f00:1",), ALLOWED_ORIGINS),
        # One private address among public ones is enough (DNS answers in any order).
        ("https://mixed.example/r.git", OPEN, ("140.82.112.3", "10.1.2.3"), ALLOWED_ORIGINS),
        ("https://nowhere.invalid/r.git", OPEN, (), None),
        ("git@internal:acme/app.git", OPEN, ("10.0.0.7",), ALLOWED_ORIGINS),
        # With an allow-list: only what it names.
        ("https://github.com/evil/app.git", NAMED, (), ALLOWED_ORIGINS),
        ("https://github.com/acme-evil/app.git", NAMED, (), ALLOWED_ORIGINS),
        ("https://github.com/acme/../evil/app.git", NAMED, (), None),
        ("https://github.com/acme/%2e%2e/evil/app.git", NAMED, (), None),
        ("git://git-server:9419/loopworks.git", NAMED, (), ALLOWED_ORIGINS),
        ("https://git-server.attacker.example/r.git", NAMED, (), ALLOWED_ORIGINS),
        ("https://git.example.com/r.git", NAMED, (), ALLOWED_ORIGINS),
        ("http://git-server/r.git", NAMED, (), ALLOWED_SCHEMES),
        # Local paths: only under a root, never in the data directory.
        ("/home/alice/src/app", OPEN, (), LOCAL_ROOTS),
        ("/home/bob/secret", LOCAL, (), LOCAL_ROOTS),
        ("/home/alice/src-other/app", LOCAL, (), LOCAL_ROOTS),
        ("/home/alice/src/../bob", LOCAL, (), LOCAL_ROOTS),
        ("/home/alice/src/.loops-data/workspaces/r-1", LOCAL, (), None),
        ("/srv/loops/workspaces/r-1", OPEN, (), None),
        ("/srv/loops/origin.git/../other.git", OPEN, (), None),
        ("file://otherhost/home/alice/src/app", LOCAL, (), None),
    ],
)
def test_refused(
    origin: str, rules: OriginRules, addresses: tuple[str, ...], setting: str | None
) -> None:
    verdict = admit(origin, rules, addresses)
    assert not verdict
    assert verdict.setting == setting, verdict.reason
    assert verdict.reason


def test_a_symlink_out_of_a_root_is_judged_by_where_it_leads() -> None:
    assert not admit("/home/alice/src/link", LOCAL, real_path="/etc")
    assert admit("/tmp/elsewhere", LOCAL, real_path="/home/alice/src/app")


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700::1111", True),
        ("127.0.0.2", False),
        ("169.254.0.1", False),
        ("100.127.255.255", False),
        ("::ffff:10.0.0.1", False),
        ("::ffff:8.8.8.8", True),
        ("fe80::1%eth0", False),
        ("not an address", False),
    ],
)
def test_public_address(address: str, public: bool) -> None:
    assert public_address(address) is public


def test_settings_make_resolved_rules(tmp_path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "root")
    rules = rules_from(
        allowed=" git-server , https://github.com/acme/ ,",
        schemes="HTTPS, git+ssh,git",
        local_roots=str(tmp_path / "link"),
        own=(str(tmp_path / "data" / "origin.git"),),
        private_dirs=(tmp_path / "data",),
    )
    assert rules.allowed == ("git-server", "https://github.com/acme/")
    assert rules.schemes == {"https", "ssh", "git"}
    assert rules.local_roots == (str(tmp_path / "root"),)
    assert rules.private_dirs == (str(tmp_path / "data"),)


@pytest.mark.parametrize("schemes", ["https,ext", "fd", "https,ftp"])
def test_a_scheme_git_does_not_speak_itself_cannot_be_allowed(schemes: str) -> None:
    with pytest.raises(ValueError, match=ALLOWED_SCHEMES):
        schemes_from(schemes)
