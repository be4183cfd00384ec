"""The local runner's environment passes every variable the runner reads, and nothing else."""

from __future__ import annotations

from pathlib import Path

from nexus_events.transport.bus import BusSettings
from nexus_runner.config import RunnerSettings
from nexus_scheduler.runtime.runner_env import passes, runner_env


def test_every_runner_and_bus_setting_passes() -> None:
    names = [f"NEXUS_{field.upper()}" for field in RunnerSettings.model_fields]
    names += [f"NEXUS_RUNNER_{field.upper()}" for field in RunnerSettings.model_fields]
    names += [f"NEXUS_NATS_{field.upper()}" for field in BusSettings.model_fields]
    names += ["NEXUS_LOG_FORMAT", "NEXUS_LOG_LEVEL", "NEXUS_OTEL_SPANS_FILE", "OTEL_SDK_DISABLED"]
    assert [n for n in names if not passes(n)] == []


def test_other_variables_do_not(tmp_path: Path) -> None:
    parent = {
        "PATH": "/bin",
        "AWS_SECRET_ACCESS_KEY": "x",
        "NEXUS_PLANE_API_TOKEN": "x",
        "NEXUS_SLACK_BOT_TOKEN": "x",
        "NEXUS_DATABASE_URL": "x",
        "GITHUB_TOKEN": "x",
        "SSH_AUTH_SOCK": "x",
        "HOME": "/root",
    }
    env = runner_env(parent, tmp_path / "home", overrides={"NEXUS_RUN_ID": "r"})
    assert env == {"PATH": "/bin", "HOME": str(tmp_path / "home"), "NEXUS_RUN_ID": "r"}
    assert (tmp_path / "home").is_dir()


def test_a_run_job_sets_only_what_the_runner_needs() -> None:
    from nexus_scheduler.runtime.kubernetes_jobs import KubernetesSettings, build_job

    from ..factories import config

    pod = build_job(config("k"), KubernetesSettings(), {"TRACEPARENT": "t"}).spec.template.spec
    container = pod.containers[0]
    assert {e.name for e in container.env} == {"NEXUS_RUN_ID", "HOME", "TRACEPARENT"}
    assert [s.secret_ref.name for s in container.env_from] == ["runner-env"]
    assert pod.enable_service_links is False
    assert pod.automount_service_account_token is False


def test_a_run_job_takes_its_nats_credential_from_its_own_secret() -> None:
    import base64

    from nexus_scheduler.runtime.kubernetes_jobs import (
        CONFIG_KEY,
        KubernetesSettings,
        build_job,
        build_secret,
    )

    from ..factories import config

    credential = {"NEXUS_NATS_USER": "run:k", "NEXUS_NATS_PASSWORD": "v1.1.9.none.mac"}
    job = build_job(config("k"), KubernetesSettings(), {}, list(credential))
    pod = job.spec.template.spec
    refs = {
        e.name: (e.value_from.secret_key_ref.name, e.value_from.secret_key_ref.key)
        for e in pod.containers[0].env
        if e.value_from is not None
    }
    name = job.metadata.name
    assert refs == {k: (name, k) for k in credential}  # env wins over runner-env's envFrom
    # The config volume mounts the config only, not the credential.
    [volume] = [v for v in pod.volumes if v.name == "config"]
    assert [i.key for i in volume.secret.items] == [CONFIG_KEY]
    job.metadata.uid = "uid-1"  # the API server sets it on create
    secret = build_secret(config("k"), job, credential)
    data = {k: base64.b64decode(v).decode() for k, v in secret.data.items()}
    assert {k: data[k] for k in credential} == credential
    assert set(data) == {CONFIG_KEY, *credential}
