//! Revoked agents: `tls.crl_file` (a certificate revocation list of the agents' CA, PEM or DER)
//! and `tls.deny_file` (agent ids, one a line, `#` comments), both optional and reloaded without a
//! restart when their modification time or size changes ([`RELOAD_EVERY`]). A revoked certificate
//! fails the TLS handshake (rustls checks the CRL; counted `certificate_revoked`), and a stream
//! already open ends at its next batch with `permission_denied` naming the reason (its serial in
//! the CRL: `certificate_revoked`; its id in the deny list: `denied`). A file that cannot be read
//! or parsed at start stops the collector; on a reload it is logged and the previous lists stay.
//! To revoke by another property, add it to [`Lists`] and to [`Revocation::refusal`].

use crate::config::{read_crl, read_denied, RevocationFiles};
use crate::service::tls::{self, TlsSetupError};
use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};
use tokio_rustls::rustls::ServerConfig;
use wattflip_infra::tls::TlsMaterial;

/// How often the two files are looked at.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// What is revoked now.
#[derive(Debug, Default)]
struct Lists {
    denied: HashSet<String>,
    /// Serial numbers (DER content bytes) in the CRL.
    revoked: HashSet<Vec<u8>>,
}

/// A file's identity for change detection.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(p: &Path) -> Stamp {
    std::fs::metadata(p).ok().map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()))
}

/// The collector's revocation state and the TLS config that enforces the CRL.
pub struct Revocation {
    files: RevocationFiles,
    material: TlsMaterial,
    lists: RwLock<Arc<Lists>>,
    server: RwLock<Arc<ServerConfig>>,
    stamps: Mutex<(Stamp, Stamp)>,
}

impl Revocation {
    /// Loads both files (when configured) and the TLS config that enforces the CRL.
    pub fn load(material: &TlsMaterial, files: RevocationFiles) -> Result<Arc<Revocation>, TlsSetupError> {
        let bad = |key: &'static str| move |detail: String| TlsSetupError::Pem { key, what: "revocation list", detail };
        // The readers `check-config` runs too (`config`), so both refuse the same files.
        let (crls, revoked) = files.crl_file.as_deref().map(read_crl).transpose().map_err(bad("crl_file"))?.unwrap_or_default();
        let denied = files.deny_file.as_deref().map(read_denied).transpose().map_err(bad("deny_file"))?.unwrap_or_default();
        let server = tls::server_config(material, crls)?;
        let stamps = (files.crl_file.as_deref().and_then(stamp), files.deny_file.as_deref().and_then(stamp));
        if files.crl_file.is_some() || files.deny_file.is_some() {
            tracing::info!(revoked_serials = revoked.len(), denied_agents = denied.len(), "revocation lists loaded");
        }
        Ok(Arc::new(Revocation {
            files,
            material: material.clone(),
            lists: RwLock::new(Arc::new(Lists { denied, revoked })),
            server: RwLock::new(server),
            stamps: Mutex::new(stamps),
        }))
    }

    /// The TLS config for the next handshake.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Why the agent `id` with the certificate serial `serial` is refused now, if it is:
    /// (reason, message).
    pub fn refusal(&self, id: &str, serial: &[u8]) -> Option<(&'static str, String)> {
        let lists = self.lists.read().unwrap_or_else(|p| p.into_inner()).clone();
        if lists.denied.contains(id) {
            return Some(("denied", format!("agent `{id}` is on the collector's deny list (tls.deny_file)")));
        }
        if lists.revoked.contains(serial) {
            return Some(("certificate_revoked", format!("the certificate of agent `{id}` is revoked (tls.crl_file)")));
        }
        None
    }

    /// Reloads the files that changed since they were last read; a file that fails keeps the
    /// previous lists (logged).
    pub fn reload(&self) {
        let now = (self.files.crl_file.as_deref().and_then(stamp), self.files.deny_file.as_deref().and_then(stamp));
        let mut last = self.stamps.lock().unwrap_or_else(|p| p.into_inner());
        if *last == now {
            return;
        }
        match Revocation::load(&self.material, self.files.clone()) {
            Ok(fresh) => {
                let lists = fresh.lists.read().unwrap_or_else(|p| p.into_inner()).clone();
                *self.lists.write().unwrap_or_else(|p| p.into_inner()) = lists;
                *self.server.write().unwrap_or_else(|p| p.into_inner()) = fresh.server_config();
                *last = now;
            }
            Err(e) => {
                tracing::error!("{e}; the previous revocation lists stay in force until the file is fixed");
                *last = now;
            }
        }
    }

    /// Reloads every [`RELOAD_EVERY`] until `stop` turns true.
    pub fn watch(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        if self.files.crl_file.is_none() && self.files.deny_file.is_none() {
            return;
        }
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(RELOAD_EVERY) => {}
                    _ = stop.changed() => return,
                }
                let me = self.clone();
                // File reads and CRL parsing off the async workers.
                let _ = tokio::task::spawn_blocking(move || me.reload()).await;
            }
        });
    }
}

/// The serial number of a DER certificate (empty when it cannot be parsed).
pub fn serial_of(cert_der: &[u8]) -> Vec<u8> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    X509Certificate::from_der(cert_der).map(|(_, c)| c.raw_serial().to_vec()).unwrap_or_default()
}

/// The agent id and certificate serial the client certificate of `req` vouches for (None without
/// mutual TLS); a stream without one, or of a revoked agent, is refused (counted by reason).
pub(crate) fn certified<T>(
    mutual: bool,
    revocation: Option<&Revocation>,
    stats: &crate::service::stats::IngestStats,
    req: &tonic::Request<T>,
    peer: &str,
) -> Result<Option<(String, Vec<u8>)>, tonic::Status> {
    if !mutual {
        return Ok(None);
    }
    let cert = req.peer_certs().and_then(|c| c.first().cloned());
    let id = match cert.as_ref().ok_or_else(|| "no client certificate".to_string()).and_then(|c| tls::identity(c)) {
        Ok(id) => id,
        Err(e) => {
            stats.agents_rejected.inc("no_identity");
            tracing::warn!(%peer, "refused a stream: {e}");
            return Err(tonic::Status::permission_denied(format!("{e}; the agent id comes from the client certificate")));
        }
    };
    let serial = cert.map(|c| serial_of(&c)).unwrap_or_default();
    if let Some((reason, m)) = revocation.and_then(|r| r.refusal(&id, &serial)) {
        stats.agents_rejected.inc(reason);
        tracing::warn!(%peer, "refused a stream: {m}");
        return Err(tonic::Status::permission_denied(m));
    }
    Ok(Some((id, serial)))
}
