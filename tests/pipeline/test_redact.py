"""Which variable names count as secrets, and how commands are described."""

from __future__ import annotations

import pytest

from pipeline.redact import describe, is_secret_name, redact_env, redact_text


@pytest.mark.parametrize("name", [
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "OPENAI_API_KEY", "WANDB_API_KEY",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "DB_PASSWORD", "PGPASSWORD",
    "MYSQL_PWD_PASSWD", "client_secret", "GOOGLE_APPLICATION_CREDENTIALS", "SSH_PRIVATE",
    "KEY_ID", "apikey",
])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["HF_HOME", "PATH", "CUDA_VISIBLE_DEVICES", "PYTHONPATH",
                                  "SEED", "TOKENIZERS_PARALLELISM"])
def test_plain_names(name: str) -> None:
    assert not is_secret_name(name)


def test_redact_env_and_text() -> None:
    env = {"HF_TOKEN": "hf_secret_value", "HF_HOME": "/data/hf"}
    assert redact_env(env) == {"HF_TOKEN": "***", "HF_HOME": "/data/hf"}
    assert redact_text("token=hf_secret_value!", ["hf_secret_value", "ab"]) == "token=***!"


def test_describe_is_one_quoted_redacted_line() -> None:
    text = describe(["python", "-c", "print('a b')\nx"], {"HF_TOKEN": "hf_secret_value",
                                                         "N": "two words"}, "/data dir")
    assert text == ("cd '/data dir' && HF_TOKEN=*** N='two words' python -c "
                    "'print('\"'\"'a b'\"'\"')\\nx'")
    assert "\n" not in text
