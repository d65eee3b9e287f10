//! Transport security shared by agent and collector: the one rustls crypto provider of the
//! workspace (ring), the `[tls]` config section (mutual TLS by default, or an explicitly named
//! plaintext mode that only works on loopback), and loading of PEM files at config time so that
//! `check-config` reports an unreadable key. To add a setting, add it to [`RawTls`] and check it in
//! [`TlsMode::from_raw`]; binary-specific keys (the agent's `server_name`) stay in that binary.

use crate::tomlcfg::Loader;
use serde::Deserialize;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Installs ring as the process-wide rustls provider. tonic's server builds its rustls config
/// from the process default, and two providers in one build make rustls panic on first use
/// (influx-grafana-ansible.md §10), so both binaries call this first. Idempotent.
pub fn install_crypto_provider() {
    // Err only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The `[tls]` keys common to both binaries.
#[derive(Debug, Default, Deserialize)]
pub struct RawTls {
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub insecure_plaintext_loopback_only: Option<bool>,
}

/// A PEM private key. Debug output is redacted so a key never reaches a log or an error.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPem(pub Vec<u8>);

impl std::fmt::Debug for KeyPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyPem(<redacted>)")
    }
}

/// PEM material of one side of a mutual-TLS connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsMaterial {
    /// The CA that signs the other side's certificates.
    pub ca_pem: Vec<u8>,
    /// Our own certificate (chain) and key.
    pub cert_pem: Vec<u8>,
    pub key_pem: KeyPem,
}

impl TlsMaterial {
    /// Parses the PEM as `run` will (tonic hands these bytes to rustls): at least one CA
    /// certificate rustls accepts as a trust anchor, a certificate chain, a private key the crypto
    /// provider can sign with, and that key belonging to the first certificate. Returns
    /// `(key, message)` per problem, `key` being `ca_file`, `cert_file` or `key_file`; the messages
    /// never quote the key.
    pub fn check(&self) -> Vec<(&'static str, String)> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut problems = Vec::new();
        let certs = |pem: &[u8]| CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>();
        match certs(&self.ca_pem) {
            Ok(cas) => {
                let mut roots = rustls::RootCertStore::empty();
                let (added, _) = roots.add_parsable_certificates(cas);
                if added == 0 {
                    problems.push(("ca_file", "holds no CERTIFICATE that parses as a trust anchor; give the CA's PEM certificate".to_string()));
                }
            }
            Err(e) => problems.push(("ca_file", format!("is not PEM certificates ({e})"))),
        }
        let chain = match certs(&self.cert_pem) {
            Ok(c) if c.is_empty() => {
                problems.push(("cert_file", "holds no CERTIFICATE block; give this side's PEM certificate".to_string()));
                None
            }
            Ok(c) => Some(c),
            Err(e) => {
                problems.push(("cert_file", format!("is not PEM certificates ({e})")));
                None
            }
        };
        let key = match PrivateKeyDer::from_pem_slice(&self.key_pem.0) {
            Ok(k) => Some(k),
            Err(_) => {
                let hint = if self.key_pem.0.windows(17).any(|w| w == b"BEGIN CERTIFICATE") { " (it holds a certificate: is this cert_file?)" } else { "" };
                problems.push((
                    "key_file",
                    format!("Error parsing TLS private key: no PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block{hint}; give this side's PEM key"),
                ));
                None
            }
        };
        if let (Some(chain), Some(key)) = (chain, key) {
            let provider = rustls::crypto::ring::default_provider();
            match rustls::sign::CertifiedKey::from_der(chain, key, &provider) {
                Ok(_) => {}
                Err(rustls::Error::InconsistentKeys(_)) => problems
                    .push(("key_file", "is not the key of cert_file's certificate (their public keys differ); give the key it was issued for".to_string())),
                Err(rustls::Error::InvalidCertificate(e)) => {
                    problems.push(("cert_file", format!("its first certificate does not parse ({e:?}); give this side's PEM certificate")))
                }
                Err(e) => problems.push(("key_file", format!("cannot be used with cert_file: {e}"))),
            }
        }
        problems
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsMode {
    /// Mutual TLS: the default.
    Mutual(TlsMaterial),
    /// No TLS at all; refused on anything but loopback addresses. For demos and tests only.
    InsecurePlaintextLoopback,
}

impl TlsMode {
    /// Checks and loads the `[tls]` section; every problem goes to `l` under `section.key`.
    /// Returns None when there were problems.
    pub fn from_raw(section: &str, raw: RawTls, l: &mut Loader) -> Option<TlsMode> {
        let key = |k: &str| format!("{section}.{k}");
        let files = [("ca_file", &raw.ca_file), ("cert_file", &raw.cert_file), ("key_file", &raw.key_file)];
        if raw.insecure_plaintext_loopback_only == Some(true) {
            for (k, v) in files {
                if v.is_some() {
                    l.problem(key(k), "cannot be combined with insecure_plaintext_loopback_only = true; remove one of them");
                }
            }
            return Some(TlsMode::InsecurePlaintextLoopback);
        }
        let mut read = |k: &str, v: &Option<PathBuf>| -> Option<Vec<u8>> {
            let Some(path) = v else {
                l.problem(
                    key(k),
                    "is required: mutual TLS is on by default (set ca_file, cert_file and key_file, \
                     or insecure_plaintext_loopback_only = true for a loopback-only demo)",
                );
                return None;
            };
            match read_pem(path) {
                Ok(b) => Some(b),
                Err(m) => {
                    l.problem(key(k), m);
                    None
                }
            }
        };
        let ca = read("ca_file", &raw.ca_file);
        let cert = read("cert_file", &raw.cert_file);
        let pkey = read("key_file", &raw.key_file);
        let material = TlsMaterial { ca_pem: ca?, cert_pem: cert?, key_pem: KeyPem(pkey?) };
        let problems = material.check();
        for (k, m) in &problems {
            l.problem(key(k), m.clone());
        }
        problems.is_empty().then_some(TlsMode::Mutual(material))
    }

    pub fn is_insecure(&self) -> bool {
        matches!(self, TlsMode::InsecurePlaintextLoopback)
    }
}

/// Reads a PEM file; the message names the file but never quotes its content.
fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(format!("{} is not a PEM file (no -----BEGIN line)", path.display()));
    }
    Ok(bytes)
}

/// True for `localhost` and loopback IP literals (`127.0.0.0/8`, `::1`, bracketed or not).
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost") || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The host part of an `http(s)://host[:port][/…]` URL, or None when there is none.
pub fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    let host = if authority.starts_with('[') { authority.split_inclusive(']').next()? } else { authority.rsplit_once(':').map_or(authority, |(h, _)| h) };
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> (Option<TlsMode>, Vec<(String, String)>) {
        let mut l = Loader::from_str(Path::new("t.toml"), text).unwrap();
        let raw: RawTls = l.take("tls");
        let m = TlsMode::from_raw("tls", raw, &mut l);
        let problems = match l.finish() {
            Ok(()) => vec![],
            Err(e) => e.problems.into_iter().map(|p| (p.path, p.message)).collect(),
        };
        (m, problems)
    }

    #[test]
    fn mutual_tls_is_the_default_and_names_every_missing_file() {
        let (m, p) = load("");
        assert_eq!(m, None);
        let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, vec!["tls.ca_file", "tls.cert_file", "tls.key_file"]);
        assert!(p[0].1.starts_with("is required: mutual TLS is on by default"));
    }

    #[test]
    fn insecure_mode_is_explicit_and_exclusive() {
        let (m, p) = load("[tls]\ninsecure_plaintext_loopback_only = true\n");
        assert_eq!(m, Some(TlsMode::InsecurePlaintextLoopback));
        assert!(p.is_empty());
        let (_, p) = load("[tls]\ninsecure_plaintext_loopback_only = true\nca_file = \"/x\"\n");
        assert_eq!(p[0].0, "tls.ca_file");
    }

    /// A self-signed certificate (its own CA) and its key, as PEM.
    fn self_signed(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap().self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn files_are_read_and_the_key_never_prints() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let (cert, key) = self_signed("agent");
        std::fs::write(dir.join("ca.pem"), &cert).unwrap();
        std::fs::write(dir.join("k.pem"), &key).unwrap();
        std::fs::write(dir.join("junk.pem"), b"hello").unwrap();
        let text = format!("[tls]\nca_file = \"{0}/ca.pem\"\ncert_file = \"{0}/junk.pem\"\nkey_file = \"{0}/k.pem\"\n", dir.display());
        let (m, p) = load(&text);
        assert_eq!(m, None);
        assert_eq!(p, vec![("tls.cert_file".to_string(), format!("{}/junk.pem is not a PEM file (no -----BEGIN line)", dir.display()))]);
        let text = text.replace("junk.pem", "ca.pem");
        let (m, p) = load(&text);
        assert_eq!(p, vec![]);
        let Some(TlsMode::Mutual(mat)) = m else { panic!("expected mutual TLS") };
        assert_eq!(mat.ca_pem, cert.as_bytes().to_vec());
        assert!(!format!("{mat:?}").contains(&key[40..80]));
    }

    /// issue 38: a `key_file` holding a certificate passed check-config, and `run` retried forever
    /// on "Error parsing TLS private key". The PEM is now parsed as run parses it.
    #[test]
    fn keys_and_certificates_are_parsed_as_run_will() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let (cert, key) = self_signed("agent");
        let (other_cert, other_key) = self_signed("other");
        for (f, pem) in [("cert.pem", &cert), ("key.pem", &key), ("other.pem", &other_cert), ("other.key", &other_key)] {
            std::fs::write(dir.join(f), pem).unwrap();
        }
        std::fs::write(dir.join("bad.pem"), "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n").unwrap();
        let conf =
            |ca: &str, cert: &str, key: &str| format!("[tls]\nca_file = \"{0}/{ca}\"\ncert_file = \"{0}/{cert}\"\nkey_file = \"{0}/{key}\"\n", dir.display());
        let (m, p) = load(&conf("other.pem", "cert.pem", "cert.pem"));
        assert_eq!(m, None);
        assert_eq!(
            p,
            vec![(
                "tls.key_file".to_string(),
                "Error parsing TLS private key: no PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block (it holds a certificate: is this cert_file?); give this side's PEM key"
                    .to_string()
            )]
        );
        let (m, p) = load(&conf("other.pem", "cert.pem", "other.key"));
        assert_eq!(m, None);
        assert_eq!(
            p,
            vec![(
                "tls.key_file".to_string(),
                "is not the key of cert_file's certificate (their public keys differ); give the key it was issued for".to_string()
            )]
        );
        let (m, p) = load(&conf("key.pem", "bad.pem", "key.pem"));
        assert_eq!(m, None);
        let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, vec!["tls.ca_file", "tls.cert_file"]);
        assert_eq!(p[0].1, "holds no CERTIFICATE that parses as a trust anchor; give the CA's PEM certificate");
        assert_eq!(p[1].1, "its first certificate does not parse (BadEncoding); give this side's PEM certificate");
        let (m, p) = load(&conf("other.pem", "cert.pem", "key.pem"));
        assert_eq!((m.is_some(), p), (true, vec![]));
    }

    #[test]
    fn loopback_hosts() {
        for h in ["localhost", "127.0.0.1", "127.3.2.1", "::1", "[::1]"] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["10.0.0.1", "collector", "0.0.0.0", "[::]"] {
            assert!(!is_loopback_host(h), "{h}");
        }
        assert_eq!(url_host("https://127.0.0.1:50051"), Some("127.0.0.1"));
        assert_eq!(url_host("http://[::1]:50051/x"), Some("[::1]"));
        assert_eq!(url_host("http://collector"), Some("collector"));
        assert_eq!(url_host("nonsense"), None);
    }
}
