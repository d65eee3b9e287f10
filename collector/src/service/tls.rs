//! Mutual TLS for the gRPC listener. The collector runs the rustls handshake itself (instead of
//! tonic's built-in acceptor) so that every refused client, an unknown CA, no certificate, a
//! plaintext connection, is logged with its address and counted in the `agents_rejected` metric.
//! The agent id is taken from the verified client certificate by [`identity`]: its first DNS
//! subjectAltName, or its subject CN when it has no DNS SAN. To trust another kind of identity
//! (a URI SAN, say), extend `identity` and document it in the README. Revoked certificates: the
//! CRL of `revocation.rs` goes into the verifier.

use crate::service::conns::{accept, Conns, Guarded};
use crate::service::stats::IngestStats;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use wattflip_infra::tls::TlsMaterial;

#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("tls.{key}: no usable PEM {what} in the file: {detail}")]
    Pem { key: &'static str, what: &'static str, detail: String },
    #[error("tls: cannot build the server TLS config: {0} (do tls.cert_file and tls.key_file belong together?)")]
    Rustls(#[from] rustls::Error),
    #[error("tls.ca_file: cannot build the client-certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// A rustls server config that requires a client certificate signed by `m.ca_pem` and not revoked
/// by `crls` (the agents' certificates only: the CA itself is the trust anchor).
pub fn server_config(m: &TlsMaterial, crls: Vec<CertificateRevocationListDer<'static>>) -> Result<Arc<ServerConfig>, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let pem = |key: &'static str, what: &'static str| move |e: rustls::pki_types::pem::Error| TlsSetupError::Pem { key, what, detail: e.to_string() };
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&m.ca_pem) {
        roots.add(ca.map_err(pem("ca_file", "certificate"))?)?;
    }
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&m.cert_pem).collect::<Result<_, _>>().map_err(pem("cert_file", "certificate"))?;
    if certs.is_empty() {
        return Err(TlsSetupError::Pem { key: "cert_file", what: "certificate", detail: "the file holds none".into() });
    }
    let key = PrivateKeyDer::from_pem_slice(&m.key_pem.0).map_err(pem("key_file", "private key"))?;
    let mut verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
    if !crls.is_empty() {
        verifier = verifier.with_crls(crls).only_check_end_entity_revocation();
    }
    let verifier = verifier.build().map_err(|e| match e {
        // webpki's own parse of the CRL: the file's key, not the CA's.
        rustls::server::VerifierBuilderError::InvalidCrl(_) => TlsSetupError::Pem { key: "crl_file", what: "revocation list", detail: e.to_string() },
        e => TlsSetupError::Verifier(e),
    })?;
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    // gRPC needs HTTP/2, negotiated by ALPN.
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(cfg))
}

/// Accepts connections within the limit ([`Conns`]) and hands completed handshakes to the server;
/// a refused handshake is logged with the peer and counted (`tls_handshake`).
/// `current` gives the server config of the moment (the revocation task swaps it on a reload).
pub fn incoming(
    listener: TcpListener,
    current: impl Fn() -> Arc<ServerConfig> + Send + 'static,
    stats: Arc<IngestStats>,
    conns: Arc<Conns>,
) -> tokio_stream::wrappers::ReceiverStream<Result<Guarded<TlsStream<TcpStream>>, std::io::Error>> {
    accept(listener, conns, move |tcp, peer| {
        // The config of the moment: a reloaded CRL applies from the next handshake.
        let (acceptor, stats) = (TlsAcceptor::from(current()), stats.clone());
        async move {
            match tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => Some(tls),
                Ok(Err(e)) => {
                    let revoked = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
                        == Some(&rustls::Error::InvalidCertificate(rustls::CertificateError::Revoked));
                    stats.agents_rejected.inc(if revoked { "certificate_revoked" } else { "tls_handshake" });
                    tracing::warn!(%peer, "refused a connection: TLS handshake failed: {e}");
                    None
                }
                Err(_) => {
                    stats.agents_rejected.inc("tls_handshake");
                    tracing::warn!(%peer, "refused a connection: no TLS handshake within 10 s");
                    None
                }
            }
        }
    })
}

/// The agent id a verified client certificate vouches for: first DNS SAN, else the subject CN.
pub fn identity(cert_der: &[u8]) -> Result<String, String> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let (_, cert) = X509Certificate::from_der(cert_der).map_err(|e| format!("cannot parse the client certificate: {e}"))?;
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        if let Some(dns) = san.value.general_names.iter().find_map(|n| match n {
            GeneralName::DNSName(d) => Some(d.to_string()),
            _ => None,
        }) {
            return Ok(dns);
        }
    }
    let cn = cert.subject().iter_common_name().next().and_then(|cn| cn.as_str().ok()).map(str::to_string);
    cn.ok_or_else(|| "the client certificate has neither a DNS subjectAltName nor a CN".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(sans: &[&str], cn: Option<&str>) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        // rcgen puts a CN of its own in by default.
        p.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        }
        p.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn identity_is_the_first_dns_san_then_the_cn() {
        assert_eq!(identity(&cert(&["node-1", "node-1.dc1"], Some("other"))).unwrap(), "node-1");
        assert_eq!(identity(&cert(&["127.0.0.1"], Some("node-2"))).unwrap(), "node-2");
        assert_eq!(identity(&cert(&["127.0.0.1"], None)).unwrap_err(), "the client certificate has neither a DNS subjectAltName nor a CN");
        assert!(identity(b"garbage").unwrap_err().starts_with("cannot parse the client certificate"));
    }
}
