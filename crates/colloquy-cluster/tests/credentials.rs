//! Credentials and TLS against a real nats-server: a user and password, a server certificate
//! from a private authority, and a server that verifies its clients' certificates. Each right
//! configuration carries a whole session (placement, a turn, its history); each wrong one is a
//! clear error that shows no secret.

mod common;

use std::path::{Path, PathBuf};

use colloquy_cluster::{Cluster, ClusterError, NatsConfig, StartOptions};
use colloquy_model::ChatItem;
use common::{NatsServer, REPLY, node_builder};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// A node and a host with `config`: a session placed, one turn, its reply in the history.
async fn a_turn_over(config: NatsConfig) {
    let node = node_builder("nats://unused:1", "n1").nats(config.clone()).start().await;
    let node = node.expect("the node connects");
    let cluster = Cluster::connect(config).await.expect("the host connects");
    let session = cluster.start_session("support", StartOptions::default()).await.expect("placed");
    session.user_turn("Where is my order?").await.expect("a turn");
    session.wait_for_idle().await.expect("idle");
    let history = session.history().await.expect("history");
    let said: Vec<&str> =
        history.iter().filter_map(ChatItem::as_message).map(|m| m.text.as_str()).collect();
    assert_eq!(said, ["Where is my order?", REPLY]);
    session.close().await.expect("close");
    node.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_and_password_carry_a_session_and_a_wrong_password_is_refused() {
    let server = NatsServer::start_with(&["--user", "node", "--pass", "s3cret-pw"]);
    a_turn_over(NatsConfig::new(server.url()).user_password("node", "s3cret-pw")).await;

    let wrong = NatsConfig::new(server.url()).user_password("node", "wr0ng-pw");
    let err = Cluster::connect(wrong).await.err().expect("refused");
    assert!(matches!(err, ClusterError::Auth { .. }), "{err:?}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("wr0ng-pw") && !shown.contains("s3cret-pw"), "{shown}");
    let none = Cluster::connect(server.url()).await.err().expect("refused without credentials");
    assert!(matches!(none, ClusterError::Auth { .. }), "{none:?}");
}

/// A private authority and certificates it signed, as PEM files in `dir`.
struct Pki {
    ca: PathBuf,
    server: (PathBuf, PathBuf),
    client: (PathBuf, PathBuf),
}

fn pki(dir: &Path) -> Pki {
    std::fs::create_dir_all(dir).expect("a directory for the certificates");
    let write = |name: &str, pem: String| {
        let path = dir.join(name);
        std::fs::write(&path, pem).expect("a PEM file");
        path
    };
    let ca_key = KeyPair::generate().expect("a key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).expect("the CA certificate");
    let ca = write("ca.pem", ca_cert.pem());
    let issuer = Issuer::new(ca_params, ca_key);
    let signed = |names: Vec<String>, prefix: &str| {
        let key = KeyPair::generate().expect("a key");
        let cert = CertificateParams::new(names)
            .expect("parameters")
            .signed_by(&key, &issuer)
            .expect("a signed certificate");
        let cert_path = write(&format!("{prefix}.pem"), cert.pem());
        (cert_path, write(&format!("{prefix}-key.pem"), key.serialize_pem()))
    };
    let server = signed(vec!["localhost".into(), "127.0.0.1".into()], "server");
    let client = signed(vec!["colloquy-node".into()], "client");
    Pki { ca, server, client }
}

fn tls_flags(pki: &Pki) -> Vec<String> {
    let (cert, key) = &pki.server;
    vec!["--tls".into(), "--tlscert".into(), path(cert), "--tlskey".into(), path(key)]
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_authority_carries_a_session_and_an_untrusted_server_is_refused() {
    let dir = std::env::temp_dir().join(format!("colloquy-tls-{}", std::process::id()));
    let pki = pki(&dir);
    let flags = tls_flags(&pki);
    let server = NatsServer::start_with(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    a_turn_over(NatsConfig::new(server.url()).tls_root_certificates(&pki.ca)).await;

    // The system's authorities do not know this server's.
    let untrusted = NatsConfig::new(server.url()).require_tls(true);
    let err = Cluster::connect(untrusted).await.err().expect("an unknown authority is refused");
    assert!(matches!(err, ClusterError::Tls { .. } | ClusterError::Connect { .. }), "{err:?}");
    let missing = NatsConfig::new(server.url()).tls_root_certificates(dir.join("absent.pem"));
    let err = Cluster::connect(missing).await.err().expect("a missing file is an error");
    assert!(err.to_string().contains("127.0.0.1"), "names the server: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_verifies_clients_takes_a_client_certificate_and_refuses_none() {
    let dir = std::env::temp_dir().join(format!("colloquy-mtls-{}", std::process::id()));
    let pki = pki(&dir);
    let mut flags = tls_flags(&pki);
    flags.extend(["--tlsverify".into(), "--tlscacert".into(), path(&pki.ca)]);
    let server = NatsServer::start_with(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let (cert, key) = &pki.client;
    let config = NatsConfig::new(server.url())
        .tls_root_certificates(&pki.ca)
        .tls_client_certificate(cert, key);
    a_turn_over(config).await;

    let without = NatsConfig::new(server.url()).tls_root_certificates(&pki.ca);
    assert!(Cluster::connect(without).await.is_err(), "a client without a certificate is refused");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An operator's world in miniature: the server trusts the operator's key; the operator signs
/// an account with JetStream allowed; the account signs users. `jwt` writes one signed claim
/// set the way NATS reads it (a header naming nkey signatures, base64url without padding).
mod operator {
    use data_encoding::BASE64URL_NOPAD;
    use nkeys::KeyPair;
    use serde_json::{Value, json};

    pub(crate) struct Operator {
        key: KeyPair,
        account: KeyPair,
        /// JetStream needs the server's own account to exist.
        system: KeyPair,
    }

    fn jwt(claims: &Value, signer: &KeyPair) -> String {
        let header = BASE64URL_NOPAD.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
        let body = BASE64URL_NOPAD.encode(claims.to_string().as_bytes());
        let input = format!("{header}.{body}");
        let signature = signer.sign(input.as_bytes()).expect("a signature");
        format!("{input}.{}", BASE64URL_NOPAD.encode(&signature))
    }

    impl Operator {
        pub(crate) fn new() -> Self {
            Self {
                key: KeyPair::new_operator(),
                account: KeyPair::new_account(),
                system: KeyPair::new_account(),
            }
        }

        /// The server's configuration: trust the operator, know the accounts from memory.
        pub(crate) fn server_config(&self) -> String {
            let no_limit = json!({
                "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                "wildcards": true, "conn": -1, "leaf": -1,
                "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
            });
            let account = |key: &KeyPair, name: &str, limits: &Value| {
                let claims = json!({
                    "jti": format!("colloquy-test-{name}"), "iat": 1, "name": name,
                    "iss": self.key.public_key(), "sub": key.public_key(),
                    "nats": { "limits": limits, "type": "account", "version": 2 },
                });
                format!("{}: \"{}\"", key.public_key(), jwt(&claims, &self.key))
            };
            let system_limits = json!({ "subs": -1, "data": -1, "payload": -1, "conn": -1 });
            format!(
                "trusted_keys: [\"{}\"]\nsystem_account: {}\nresolver: MEMORY\n\
                 resolver_preload: {{\n{}\n{}\n}}\n",
                self.key.public_key(),
                self.system.public_key(),
                account(&self.account, "colloquy", &no_limit),
                account(&self.system, "system", &system_limits),
            )
        }

        /// A credentials file for a new user of the account, as `nsc generate creds` writes
        /// it; signed by `signer` (the account's key, unless a test wants a forged one).
        pub(crate) fn creds(&self, signer: Option<&KeyPair>) -> String {
            let user = KeyPair::new_user();
            let claims = json!({
                "jti": "colloquy-test-user", "iat": 1, "name": "node",
                "iss": self.account.public_key(), "sub": user.public_key(),
                "nats": {
                    "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                    "type": "user", "version": 2,
                },
            });
            let token = jwt(&claims, signer.unwrap_or(&self.account));
            let seed = user.seed().expect("the user's seed");
            format!(
                "-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n\
                 ************************* IMPORTANT *************************\n\
                 NKEY Seed printed below can be used to sign and prove identity.\n\n\
                 -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
            )
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credentials_file_carries_a_session_and_a_forged_one_is_refused() {
    let dir = std::env::temp_dir().join(format!("colloquy-creds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for the credentials");
    let operator = operator::Operator::new();
    let server = NatsServer::start_configured(&operator.server_config(), &[]);
    let good = dir.join("node.creds");
    std::fs::write(&good, operator.creds(None)).expect("a credentials file");
    a_turn_over(NatsConfig::new(server.url()).credentials_file(&good)).await;

    // A user signed by a key the account does not know.
    let forger = nkeys::KeyPair::new_account();
    let forged_text = operator.creds(Some(&forger));
    let forged = dir.join("forged.creds");
    std::fs::write(&forged, &forged_text).expect("a credentials file");
    let err = Cluster::connect(NatsConfig::new(server.url()).credentials_file(&forged)).await;
    let err = err.err().expect("a forged user is refused");
    assert!(matches!(err, ClusterError::Auth { .. }), "{err:?}");
    let seed = forged_text.lines().find(|l| l.starts_with("SU")).expect("the seed line");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(seed), "{shown}");

    let absent = dir.join("absent.creds");
    let err = Cluster::connect(NatsConfig::new(server.url()).credentials_file(&absent)).await;
    let err = err.err().expect("a missing file is an error");
    assert!(err.to_string().contains("absent.creds"), "names the file: {err}");
    let none = Cluster::connect(server.url()).await.err().expect("refused without credentials");
    assert!(matches!(none, ClusterError::Auth { .. }), "{none:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
