"""The session container's seccomp profile, read as JSON (no Podman): no call can make or
join a namespace (security issue 21, finding 2), while fork and threads are allowed.

`outcomes` evaluates the profile the way Podman turns it into a filter for a container with
no capabilities: a rule applies when its names hold the call, its arch conditions admit the
arch, it needs no capability, and every one of its argument conditions holds. Every rule
that applies is returned, so a test sees a conflict as well as a verdict.
tests/sandbox/test_namespaces.py shows the same refusals inside a real container.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sealtrace.agent._podman import (
    _DEFAULT_PROFILE,
    DENIED_SYSCALLS,
    NAMESPACE_FLAGS,
    NAMESPACE_MASK,
    seccomp_profile,
)

SIGCHLD = 17
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
# glibc's fork: clone(CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD).
FORK = 0x01000000 | 0x00200000 | SIGCHLD
# glibc's pthread_create, once clone3 says ENOSYS: CLONE_VM | CLONE_FS | CLONE_FILES |
# CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID |
# CLONE_CHILD_CLEARTID.
THREAD = 0x100 | 0x200 | 0x400 | 0x800 | 0x10000 | 0x40000 | 0x80000 | 0x100000 | 0x200000
POSIX_SPAWN = 0x100 | 0x4000 | SIGCHLD  # CLONE_VM | CLONE_VFORK

pytestmark = pytest.mark.skipif(
    not _DEFAULT_PROFILE.exists(), reason=f"no Podman default profile at {_DEFAULT_PROFILE}"
)


def _holds(condition: dict[str, Any], args: tuple[int, ...]) -> bool:
    value = args[condition["index"]] if condition["index"] < len(args) else 0
    op = condition["op"]
    if op == "SCMP_CMP_MASKED_EQ":
        return bool(value & condition["value"] == condition.get("valueTwo", 0))
    if op == "SCMP_CMP_EQ":
        return bool(value == condition["value"])
    raise AssertionError(f"the test does not evaluate {op}")


def outcomes(
    profile: dict[str, Any], name: str, *args: int, arch: str = "amd64"
) -> set[tuple[str, int | None]]:
    found = set()
    for rule in profile["syscalls"]:
        includes, excludes = rule.get("includes") or {}, rule.get("excludes") or {}
        if name not in rule.get("names", []) or includes.get("caps"):
            continue
        if includes.get("arches") and arch not in includes["arches"]:
            continue
        if arch in (excludes.get("arches") or []):
            continue
        if all(_holds(c, args) for c in rule.get("args") or []):
            errno = rule.get("errnoRet") if rule["action"] == "SCMP_ACT_ERRNO" else None
            found.add((rule["action"], errno))
    if not found:  # the default action
        found.add((profile["defaultAction"], profile.get("defaultErrnoRet")))
    return found


ALLOW = {("SCMP_ACT_ALLOW", None)}
EPERM = {("SCMP_ACT_ERRNO", 1)}
ENOSYS = {("SCMP_ACT_ERRNO", 38)}


@pytest.fixture(scope="module")
def profile() -> dict[str, Any]:
    return seccomp_profile()


def test_the_namespace_mask_is_every_namespace_flag_clone_takes() -> None:
    assert NAMESPACE_MASK == 0x7E020000 == sum(NAMESPACE_FLAGS)
    assert all(bin(flag).count("1") == 1 for flag in NAMESPACE_FLAGS)


@pytest.mark.parametrize("arch", ["amd64", "386", "arm64", "s390x"])
def test_clone_with_any_namespace_flag_is_refused_with_eperm(
    profile: dict[str, Any], arch: str
) -> None:
    index = 1 if arch == "s390x" else 0  # s390 takes clone's flags second

    def clone(flags: int) -> set[tuple[str, int | None]]:
        args = (0, flags) if index else (flags, 0)
        return outcomes(profile, "clone", *args, arch=arch)

    assert clone(CLONE_NEWUSER | CLONE_NEWNET | SIGCHLD) == EPERM
    for flag in NAMESPACE_FLAGS:
        assert clone(flag | SIGCHLD) == EPERM, hex(flag)
        assert clone(flag | THREAD) == EPERM, hex(flag)
    # Control: fork, threads and posix_spawn's clone, without namespace flags, go through.
    for flags in (SIGCHLD, FORK, THREAD, POSIX_SPAWN):
        assert clone(flags) == ALLOW, hex(flags)


def test_clone3_says_enosys_so_libc_falls_back_to_clone(profile: dict[str, Any]) -> None:
    assert outcomes(profile, "clone3", 0, 88) == ENOSYS
    assert outcomes(profile, "clone3", 0, 88, arch="386") == ENOSYS


@pytest.mark.parametrize(
    "name",
    ["unshare", "setns", "mount", "umount2", "fsopen", "fspick", "fsmount", "fsconfig",
     "move_mount", "open_tree", "mount_setattr", "pivot_root", "chroot", "sethostname",
     "setdomainname", "bpf", "perf_event_open", "userfaultfd", "ptrace", "keyctl"],
)  # fmt: skip
def test_the_rest_of_the_family_is_refused_with_eperm(profile: dict[str, Any], name: str) -> None:
    assert name in DENIED_SYSCALLS
    assert outcomes(profile, name, CLONE_NEWUSER) == EPERM


def test_no_rule_allows_what_is_refused_even_with_a_capability(profile: dict[str, Any]) -> None:
    # A rule that a capability switches on (Podman's default allows setns with
    # CAP_SYS_ADMIN) would come back if a capability were ever added to the container.
    refused = {*DENIED_SYSCALLS, "clone3"}
    for rule in profile["syscalls"]:
        if rule["action"] == "SCMP_ACT_ALLOW":
            assert not refused & set(rule["names"]), rule
        if "clone" in rule["names"] and rule["action"] == "SCMP_ACT_ALLOW":
            assert rule["names"] == ["clone"] and rule["args"], rule


def test_other_calls_keep_podmans_rules(profile: dict[str, Any]) -> None:
    assert outcomes(profile, "getpid") == ALLOW
    assert outcomes(profile, "fork") == ALLOW
    assert outcomes(profile, "personality", 0) == ALLOW
    assert outcomes(profile, "personality", 0x0008) == ALLOW


def test_a_pass_may_fix_its_layout_and_nothing_more(profile: dict[str, Any]) -> None:
    """ADDR_NO_RANDOMIZE alone (sealtrace.sandbox._layout); Podman's default refuses it, and
    every other persona stays refused (READ_IMPLIES_EXEC, for one)."""
    assert outcomes(profile, "personality", 0x0040000) == ALLOW
    podmans = json.loads(_DEFAULT_PROFILE.read_text())
    assert outcomes(podmans, "personality", 0x0040000) != ALLOW
    assert outcomes(profile, "personality", 0x0400000) != ALLOW  # READ_IMPLIES_EXEC
    assert outcomes(profile, "personality", 0x0440000) != ALLOW
