"""exporter-toolkit's web config file mapped onto web.tls / web.basic_auth, with clear errors."""

from __future__ import annotations

import pytest

from exporter.config import load_config
from exporter.errors import ConfigError
from tests.helpers.pki import make_pki

HASH = "$2b$10$" + "a" * 53


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), ("server", "127.0.0.1"))


def web_file(tmp_path, text):
    path = tmp_path / "web.yml"
    path.write_text(text)
    return str(path)


def test_toolkit_keys_map_onto_the_daemons(tmp_path, pki):
    for name in ("server.pem", "server.key", "ca.pem"):
        (tmp_path / name).write_bytes((pki / name).read_bytes())
    path = web_file(
        tmp_path,
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n"
        "  client_ca_file: ca.pem\n  client_auth_type: VerifyClientCertIfGiven\n"
        f"  min_version: TLS13\nbasic_auth_users:\n  prom: '{HASH}'\n",
    )
    config = load_config(None, env={}, overrides={"web.config_file": path})
    tls = config.web.tls
    assert tls is not None and tls.cert_file == str(tmp_path / "server.pem")
    assert tls.client_ca_file == str(tmp_path / "ca.pem")
    assert tls.client_auth_type == "VerifyClientCertIfGiven" and tls.min_version == "TLS1.3"
    assert config.web.basic_auth is not None and config.web.basic_auth.users == {"prom": HASH}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
            "http_server_config.headers: not supported",
        ),
        ("tls_server_config:\n  cipher_suites: [x]\n", "tls_server_config.cipher_suites: not"),
        ("tls_server_config:\n  min_version: TLS10\n", "must be TLS12 or TLS13"),
        ("basic_auth_users: [a]\n", "basic_auth_users must be a mapping"),
        ("basic_auth_users:\n  prom: hunter2\n", "users.prom: is not a bcrypt hash"),
        ("tls_server_config:\n  client_auth_type: RequireAnyClientCert\n", "client_auth_type"),
    ],
)
def test_what_cannot_be_honoured_is_an_error_naming_the_key(tmp_path, text, fragment):
    path = web_file(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(None, env={}, overrides={"web.config_file": path})
    assert any(fragment in p for p in err.value.problems), err.value.problems
    assert not any("hunter2" in p for p in err.value.problems)


def test_a_setting_given_both_ways_is_refused(tmp_path):
    path = web_file(tmp_path, f"basic_auth_users:\n  prom: '{HASH}'\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"web:\n  config_file: {path}\n  basic_auth:\n    users:\n      a: '{HASH}'\n")
    with pytest.raises(ConfigError, match=r"set both here and in web\.config_file"):
        load_config(str(cfg), env={})


def test_client_auth_type_needs_its_ca(tmp_path, pki):
    tls = {"cert_file": str(pki / "server.pem"), "key_file": str(pki / "server.key")}
    overrides = {f"web.tls.{k}": v for k, v in tls.items()}
    overrides["web.tls.client_auth_type"] = "RequireAndVerifyClientCert"
    with pytest.raises(ConfigError, match="client_ca_file"):
        load_config(None, env={}, overrides=overrides)
    del overrides["web.tls.client_auth_type"]
    assert load_config(None, env={}, overrides=overrides).web.tls.client_auth_type == (
        "NoClientCert"
    )


def problems_of(**overrides):
    with pytest.raises(ConfigError) as err:
        load_config(None, env={}, overrides=overrides)
    return err.value.problems


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("tls_server_confg:\n  cert_file: a\n", "(did you mean 'tls_server_config'?)"),
        ("tls_server_config:\n  cert_fil: a\n", "(did you mean 'cert_file'?)"),
        ("basic_auth_user:\n  prom: x\n", "(did you mean 'basic_auth_users'?)"),
    ],
)
def test_a_mistyped_key_gets_a_suggestion(tmp_path, text, fragment):
    problems = problems_of(**{"web.config_file": web_file(tmp_path, text)})
    assert any(fragment in p for p in problems), problems


def test_the_toolkits_http_server_config_is_accepted(tmp_path):
    # A web.yml written for node_exporter: HTTP/2 off (this server speaks HTTP/1.1 only).
    path = web_file(
        tmp_path, f"http_server_config:\n  http2: false\nbasic_auth_users:\n  p: '{HASH}'\n"
    )
    config = load_config(None, env={}, overrides={"web.config_file": path})
    assert config.web.basic_auth is not None


def test_a_yaml_error_names_its_line(tmp_path):
    path = web_file(
        tmp_path, "basic_auth_users:\n  prom: x\ntls_server_config:\n  cert_file: a: b\n"
    )
    problems = problems_of(**{"web.config_file": path})
    assert any("line 4" in p for p in problems), problems


def test_a_missing_file_is_one_problem(tmp_path):
    problems = problems_of(**{"web.config_file": str(tmp_path / "nope.yml")})
    assert len(problems) == 1 and "nope.yml" in problems[0], problems
    assert "does not exist" in problems[0], problems


def test_a_key_that_does_not_match_its_certificate_names_both_files(tmp_path, pki):
    (tmp_path / "other").mkdir()
    other = make_pki(tmp_path / "other", ("server", "127.0.0.1"))
    cert, key = pki / "server.pem", other / "server.key"
    problems = problems_of(**{"web.tls.cert_file": str(cert), "web.tls.key_file": str(key)})
    text = " ".join(problems)
    assert str(cert) in text and str(key) in text and "does not match" in text, problems
    assert "PEM lib" not in text, problems


def test_a_certificate_that_is_not_pem_names_the_file(tmp_path, pki):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    problems = problems_of(
        **{"web.tls.cert_file": str(bad), "web.tls.key_file": str(pki / "server.key")}
    )
    text = " ".join(problems)
    assert str(bad) in text and "PEM" in text, problems
