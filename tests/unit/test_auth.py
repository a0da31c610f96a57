"""Where credentials come from (api/auth.py): the settings checked, one token source per credential, no
key material in a repr or a cache key. google-auth's real token flow is exercised against the emulator's
token endpoint in tests/integration (test_hook.py) and tests/emulator."""

from __future__ import annotations

import pytest

from airflow_provider_slurmapi.api.auth import AuthConfig, parse_chain, token_source
from airflow_provider_slurmapi.api.errors import SlurmJobSpecError

KEY = {"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nsecret\n", "client_email": "a@b"}


def test_settings_that_contradict_each_other_name_the_field():
    with pytest.raises(SlurmJobSpecError, match=r"key_path.*both set"):
        AuthConfig(key_path="/k.json", keyfile_dict=KEY)
    with pytest.raises(SlurmJobSpecError, match=r"keyfile_dict.*not a JSON object"):
        AuthConfig(keyfile_dict="{...}")  # type: ignore[arg-type]
    with pytest.raises(SlurmJobSpecError, match="scopes"):
        AuthConfig(scopes=())


def test_no_key_material_in_a_repr_or_a_cache_key():
    config = AuthConfig(keyfile_dict=KEY)
    assert "secret" not in repr(config) and "secret" not in config.cache_key()
    assert "secret" not in repr(token_source(config))


def test_one_token_source_per_credential_in_a_process():
    one, same = AuthConfig(keyfile_dict=KEY), AuthConfig(keyfile_dict=dict(KEY))
    assert token_source(one) is token_source(same)
    for other in (
        AuthConfig(keyfile_dict={**KEY, "client_email": "c@d"}),
        AuthConfig(keyfile_dict=KEY, impersonation_chain=("sa@p.iam.gserviceaccount.com",)),
        AuthConfig(keyfile_dict=KEY, quota_project_id="billing"),
        AuthConfig(key_path="/k.json"),
    ):
        assert other.cache_key() != one.cache_key() and token_source(other) is not token_source(one)


@pytest.mark.parametrize(
    ("value", "chain"),
    [
        (None, ()),
        ("", ()),
        ([], ()),
        ("a@p.iam.gserviceaccount.com", ("a@p.iam.gserviceaccount.com",)),
        (" a@p , b@q ,", ("a@p", "b@q")),
        (["a@p", "b@q"], ("a@p", "b@q")),
    ],
)
def test_an_impersonation_chain_from_a_list_or_comma_separated_text(value, chain):
    assert parse_chain(value) == chain


@pytest.mark.parametrize("value", ["not-an-email", ["a@p", "nobody"], 5, {"a@p": 1}])
def test_an_impersonation_chain_of_anything_else_names_the_field_and_the_fix(value):
    with pytest.raises(SlurmJobSpecError, match="impersonation_chain"):
        parse_chain(value)
