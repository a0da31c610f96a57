"""Which environment names the operator masks: each name docs/security.rst promises, read from the page."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_provider_slurmapi.operators.slurmapi import secret_values

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.rst"


def promised() -> tuple[list[str], list[str]]:
    """The words and examples of the sentence on environment entries: (masked, not masked)."""
    text = " ".join(DOCS.read_text().split())
    sentence = text[text.index("Environment entries of a job whose names look secret") :].split(") are masked")[0]
    shown, _, refused = sentence.partition("; not ")
    words = re.findall(r"``([A-Z_]+)``", shown)
    return words, re.findall(r"``([A-Z_]+)``", refused)


def test_every_name_the_docs_promise_is_masked_in_any_case_and_the_counterexample_is_not():
    masked, not_masked = promised()
    assert {"TOKEN", "SECRET", "SSHKEY", "PRIVATEKEY", "API_KEY", "KEY_FILE"} <= set(masked)
    assert not_masked == ["MONKEY"]
    prefixes = {"API", "SSH", "PRIVATE", "ACCESS", "AUTH", "SIGNING", "ENCRYPTION", "MASTER"}
    for word in masked:
        names = [f"{word}KEY", f"MY_{word}_KEY"] if word in prefixes else [word, f"MY_{word}", f"{word}_2"]
        for name in (*names, *(n.lower() for n in names)):
            assert secret_values({name: "v"}) == ["v"], name
    for name in [*not_masked, "KEYBOARD", "EPOCHS"]:
        assert secret_values({name: "v"}) == [], name
