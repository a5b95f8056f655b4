//! TLS settings from PEM files, the same for the plugin's client, `cinch policy` and `cinch
//! serve`: rustls with the ring provider (no C toolchain beyond a compiler, no OpenSSL).

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// What an `https://` optimizer's certificate must chain to when no CA file is named: Debian's
/// CA bundle.
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The PEM certificates in `path` (perhaps none).
fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what} {}: {e}", path.display()))
}

/// A client that trusts the certificates in `ca_file` (a CA, or several), else the system's.
pub fn client_config(ca_file: Option<&Path>) -> Result<ClientConfig, String> {
    let path = ca_file.unwrap_or(Path::new(SYSTEM_CA_BUNDLE));
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certificates(path, "CA file")?);
    if added == 0 {
        return Err(format!(
            "no usable certificate in CA file {}",
            path.display()
        ));
    }
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A server presenting the certificate chain in `cert_file` with the key in `key_file`.
pub fn server_config(cert_file: &Path, key_file: &Path) -> Result<ServerConfig, String> {
    let certs = certificates(cert_file, "certificate file")?;
    if certs.is_empty() {
        return Err(format!(
            "no certificate in certificate file {}",
            cert_file.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| format!("key file {}: {e}", key_file.display()))?;
    ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "certificate {} and key {} do not make a TLS server: {e}",
                cert_file.display(),
                key_file.display()
            )
        })
}
