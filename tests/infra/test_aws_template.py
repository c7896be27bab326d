"""The AWS template (infra/aws/sealtrace.yaml) says what docs/architecture.md promises: recordings
written once and never deleted, production writes but never reads, agents read recordings
and nothing else, and only the server uses the run-key KMS key, only for run keys. And the
fleet's agents enroll one at a time (issue 21, finding 3): no agent credential is baked into
the image or the instance; each agent's launcher reads the launcher token from one secret,
which nothing else may read, and mints that agent's one-time enrollment."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from ..conftest import REPO

TEMPLATE = REPO / "infra" / "aws" / "sealtrace.yaml"


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    template = yaml.safe_load(TEMPLATE.read_text())
    found: dict[str, Any] = template["Resources"]
    return found


def _statements(role: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for policy in role["Properties"].get("Policies", []):
        for statement in policy["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            found.append(statement)
    return found


def _actions(role: dict[str, Any], *, service: str = "") -> set[str]:
    actions: set[str] = set()
    for statement in _statements(role):
        action = statement["Action"]
        actions |= {action} if isinstance(action, str) else set(action)
    return {a for a in actions if a.startswith(service)}


def test_recordings_are_written_once_and_never_deleted(resources: dict[str, Any]) -> None:
    bucket = resources["Recordings"]["Properties"]
    assert bucket["VersioningConfiguration"]["Status"] == "Enabled"
    assert bucket["ObjectLockEnabled"] is True
    assert bucket["ObjectLockConfiguration"]["Rule"]["DefaultRetention"]["Mode"] == "COMPLIANCE"
    assert bucket["LifecycleConfiguration"]["Rules"][0]["Status"] == "Enabled"  # the only removal
    deny = resources["RecordingsPolicy"]["Properties"]["PolicyDocument"]["Statement"][0]
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*"
    assert {"s3:DeleteObject", "s3:DeleteObjectVersion"} <= set(deny["Action"])


def test_each_role_can_do_only_its_part(resources: dict[str, Any]) -> None:
    recorder, agent = _actions(resources["RecorderRole"]), _actions(resources["AgentRole"])
    assert recorder == {"s3:PutObject", "s3:PutObjectRetention", "s3:ListBucketVersions"}
    assert not [a for a in recorder if a.startswith("s3:Get")]  # production never reads back
    assert _actions(resources["AgentRole"], service="s3:") == {
        "s3:GetObject", "s3:GetObjectVersion", "s3:ListBucketVersions"
    }  # fmt: skip
    # Besides recordings, the one secret its launcher reads (test_agents_enroll_one_at_a_time).
    assert agent - _actions(resources["AgentRole"], service="s3:") == {
        "secretsmanager:GetSecretValue"
    }
    assert not _actions(resources["ServerRole"])  # the key policy grants the server KMS only
    for actions in (recorder, agent):
        assert not [a for a in actions if a.endswith("*") or "Delete" in a or a.startswith("kms")]


def test_only_the_server_uses_the_run_key_and_only_for_run_keys(
    resources: dict[str, Any],
) -> None:
    statements = resources["RunKeys"]["Properties"]["KeyPolicy"]["Statement"]
    users = [s for s in statements if {"kms:Encrypt", "kms:Decrypt"} & set(s["Action"])]
    assert len(users) == 1
    (use,) = users
    assert use["Principal"]["AWS"] == {"Fn::GetAtt": ["ServerRole", "Arn"]}
    assert use["Condition"]["StringEquals"] == {"kms:EncryptionContext:purpose": "run-private-key"}
    admin = next(s for s in statements if s["Sid"] == "AccountAdministers")
    assert not {"kms:Encrypt", "kms:Decrypt", "kms:*"} & set(admin["Action"])


def test_agents_reach_the_server_redis_and_s3_only(resources: dict[str, Any]) -> None:
    group = resources["AgentSecurityGroup"]["Properties"]
    assert group["SecurityGroupIngress"] == []
    ports = sorted((rule["FromPort"], rule["ToPort"]) for rule in group["SecurityGroupEgress"])
    assert ports == [(443, 443), (443, 443), (443, 443), (6379, 6379)]
    secrets = [r for r in group["SecurityGroupEgress"] if "DestinationSecurityGroupId" in r
               and r["DestinationSecurityGroupId"] != {"Ref": "RedisSecurityGroup"}]  # fmt: skip
    assert [r["DestinationSecurityGroupId"] for r in secrets] == [
        {"Ref": "SecretsEndpointSecurityGroup"}
    ]
    endpoint = resources["SecretsEndpoint"]["Properties"]
    assert endpoint["ServiceName"] == {"Fn::Sub": "com.amazonaws.${AWS::Region}.secretsmanager"}
    assert endpoint["SecurityGroupIds"] == [{"Ref": "SecretsEndpointSecurityGroup"}]
    assert not [r for r in group["SecurityGroupEgress"] if r.get("CidrIp") == "0.0.0.0/0"]
    metadata = resources["AgentLaunchTemplate"]["Properties"]["LaunchTemplateData"]
    assert metadata["MetadataOptions"] == {"HttpTokens": "required", "HttpPutResponseHopLimit": 1}
    assert "sealtrace-agent@" in metadata["UserData"]["Fn::Base64"]["Fn::Sub"]


def test_agents_enroll_one_at_a_time(resources: dict[str, Any]) -> None:
    """No agent credential in the image or the instance's user data: the instance's launcher
    reads the launcher token (which only mints enrollments) from one secret, by name, and
    only the agent role may read that secret; every role's reach to secrets is listed."""
    assert resources["LauncherToken"]["Type"] == "AWS::SecretsManager::Secret"
    assert "SecretString" not in resources["LauncherToken"]["Properties"]  # put there later
    readers = {
        name: [s for s in _statements(role) if "secretsmanager" in str(s["Action"])]
        for name, role in resources.items()
        if role["Type"] == "AWS::IAM::Role"
    }
    assert {name for name, found in readers.items() if found} == {"AgentRole"}
    (read,) = readers["AgentRole"]
    assert read["Action"] == "secretsmanager:GetSecretValue"
    assert read["Resource"] == {"Ref": "LauncherToken"}  # that one secret, not "*"
    user_data = resources["AgentLaunchTemplate"]["Properties"]["LaunchTemplateData"]["UserData"]
    script = user_data["Fn::Base64"]["Fn::Sub"]
    assert "SEALTRACE_LAUNCHER_TOKEN_SECRET=${LauncherToken}" in script
    assert "st_" not in script and "SEALTRACE_AGENT_TOKEN" not in script
    unit = (REPO / "infra" / "systemd" / "sealtrace-agent@.service").read_text()
    (start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert start.endswith("sealtrace launch-agent")
