"""build_sandbox dispatches on the section's type; sandbox_for_task merges or replaces a task's
override and rejects bad ones with the task and key named."""

from __future__ import annotations

import pytest

from uni_agent_core.config.problems import RecipeError
from uni_agent_core.config.sandbox import (
    DockerSandboxConfig,
    LocalSandboxConfig,
    ModalSandboxConfig,
    SwerexSandboxConfig,
)
from uni_agent_core.sandbox.docker import DockerSandbox
from uni_agent_core.sandbox.factory import build_sandbox, sandbox_for_task
from uni_agent_core.sandbox.local import LocalSandbox
from uni_agent_core.sandbox.modal import ModalSandbox
from uni_agent_core.sandbox.swerex import SwerexSandbox


def test_build_sandbox_makes_each_backend_with_the_recipe_values() -> None:
    local = build_sandbox(LocalSandboxConfig(memory_mb=1024), workdir="/workspace/r")
    assert isinstance(local, LocalSandbox) and local.memory_mb == 1024
    assert str(local.workdir) == "/workspace/r"

    swerex = build_sandbox(SwerexSandboxConfig(host="http://rt", exec_timeout_s=9))
    assert isinstance(swerex, SwerexSandbox)
    assert (swerex.deployment, swerex.host, swerex.exec_timeout_s) == ("remote", "http://rt", 9)

    docker = build_sandbox(DockerSandboxConfig(memory_mb=512, cpus=1), image="task:1")
    assert isinstance(docker, DockerSandbox)
    assert (docker.image, docker.memory_mb, docker.cpus) == ("task:1", 512, 1)

    modal = build_sandbox(ModalSandboxConfig(region="eu"), image="task:2")
    assert isinstance(modal, ModalSandbox) and (modal.image, modal.region) == ("task:2", "eu")


def test_build_sandbox_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="image"):
        build_sandbox(DockerSandboxConfig())
    with pytest.raises(ValueError, match="image"):
        build_sandbox(ModalSandboxConfig())
    with pytest.raises(TypeError, match="not a sandbox section: dict"):
        build_sandbox({"type": "local"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="nonsense"):
        build_sandbox(LocalSandboxConfig(), nonsense=1)


def test_no_override_keeps_the_default() -> None:
    default = LocalSandboxConfig(memory_mb=2048)
    assert sandbox_for_task(default, None) is default
    assert sandbox_for_task(default, {}) is default


def test_untyped_or_same_type_override_merges_onto_the_default() -> None:
    default = LocalSandboxConfig(memory_mb=2048, wall_clock_s=1800, network=False)
    merged = sandbox_for_task(default, {"memory_mb": 1024})
    assert isinstance(merged, LocalSandboxConfig)
    assert (merged.memory_mb, merged.wall_clock_s) == (1024, 1800)
    same = sandbox_for_task(default, {"type": "local", "network": True})
    assert isinstance(same, LocalSandboxConfig) and same.network and same.memory_mb == 2048

    docker_default = DockerSandboxConfig(cpus=4, memory_mb=8192)
    image = sandbox_for_task(docker_default, {"image": "sweb.eval.x86_64.django-11099"})
    assert isinstance(image, DockerSandboxConfig)
    assert (image.image, image.cpus, image.memory_mb) == ("sweb.eval.x86_64.django-11099", 4, 8192)


def test_another_type_replaces_the_default() -> None:
    default = LocalSandboxConfig(memory_mb=2048)
    docker = sandbox_for_task(default, {"type": "docker", "image": "img"})
    assert isinstance(docker, DockerSandboxConfig)
    assert (docker.image, docker.memory_mb) == ("img", 4096)  # the docker default, not 2048
    build = build_sandbox(docker)
    assert isinstance(build, DockerSandbox) and build.image == "img"


def test_bad_overrides_name_the_task_and_the_key() -> None:
    default = LocalSandboxConfig(wall_clock_s=1800)
    cases = {
        "sandbox.memory_mbb": {"memory_mbb": 1},
        "unknown type 'kubernetes'": {"type": "kubernetes"},
        "sandbox.host: required key is missing": {"type": "swerex"},
        "sandbox.memory_mb": {"memory_mb": "lots"},
        "exceeds wall_clock_s": {"exec_timeout_s": 4000},
        "sandbox.isolation": {"type": "docker", "image": "x", "isolation": "none"},
    }
    for expected, override in cases.items():
        with pytest.raises(RecipeError) as info:
            sandbox_for_task(default, override, task_id="django-1")
        assert "task django-1" in str(info.value) and expected in str(info.value), override
    with pytest.raises(TypeError, match="task t: sandbox override must be a mapping"):
        sandbox_for_task(default, ["docker"], task_id="t")  # type: ignore[arg-type]


def test_backends_keep_their_section_and_validate_settings_with_it() -> None:
    section = LocalSandboxConfig(memory_mb=1024)
    assert build_sandbox(section).config is section
    tuned = LocalSandbox(section, isolation="none")
    assert (tuned.config.memory_mb, tuned.config.isolation) == (1024, "none")
    assert section.isolation == "bubblewrap"  # the recipe's section is not changed
    assert LocalSandbox().config == LocalSandboxConfig()
    assert DockerSandbox(image="img").config == DockerSandboxConfig(image="img")
    assert ModalSandbox(image="img").config == ModalSandboxConfig()

    with pytest.raises(ValueError, match="exec_timeout_s: 120 s exceeds wall_clock_s"):
        LocalSandbox(wall_clock_s=60)
    with pytest.raises(ValueError, match="DockerSandbox: memory_mb"):
        DockerSandbox(image="img", memory_mb=1)
    with pytest.raises(TypeError, match="unexpected argument.*memory_mbb"):
        LocalSandbox(memory_mbb=1)

    swerex = SwerexSandboxConfig(host="http://rt", deployment="docker", memory_mb=2048)
    with pytest.raises(ValueError, match="needs an image"):
        build_sandbox(swerex)
    task_image = build_sandbox(swerex, image="task:3")
    assert isinstance(task_image, SwerexSandbox)
    assert (task_image.config.deployment, task_image.config.image) == ("docker", "task:3")
    assert task_image.config.memory_mb == 2048
